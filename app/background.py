"""The background-callback manager, in its own module so pages can import it while the app
module is still loading.

Its store is a diskcache, whose values are pickles the server reads back and runs: it lives in
a folder this process makes for itself, with a name nobody can guess and mode 0700
(``tempfile.mkdtemp``), removed at exit. A fixed name under the shared temp folder
(``/tmp/podscope-background``) let a local user create it first, rewrite the stored values as
pickles of their own, and have the dashboard run them at the next Capture click.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from functools import cache
from pathlib import Path

import diskcache
from dash import DiskcacheManager


class StoreError(RuntimeError):
    """The store's folder is not this user's private folder."""


def private_folder(prefix: str = "podscope-background-") -> Path:
    """A new folder only this user can read or write, removed when the process exits.

    Raises:
        StoreError: what was made is not a private folder of this user's (it never is unless
            the temp folder itself is compromised).
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    check_private(folder)
    return folder


def check_private(folder: Path) -> None:
    """Raises ``StoreError`` unless ``folder`` is a real folder (no link), owned by this
    process's user, that no one else may read or write."""
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{folder} is not a folder")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise StoreError(f"{folder} belongs to uid {st.st_uid}, not this user")
    if st.st_mode & 0o077:
        raise StoreError(f"{folder} can be read or written by others (mode {st.st_mode & 0o777:o})")


@cache
def manager() -> DiskcacheManager:
    """One DiskcacheManager per process, its store in a private folder of its own."""
    return DiskcacheManager(diskcache.Cache(str(private_folder())))
