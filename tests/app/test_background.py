"""The background-callback store: its values are pickles the server runs, so it lives in a
folder only this process's user can write, never one a name lets another user make first."""

from __future__ import annotations

import os
import pickle
import stat
import tempfile
from pathlib import Path

import pytest

from podscope.app import background


def test_the_store_is_a_new_private_folder_not_a_planted_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / "podscope-background"  # what a local user made first, before
    planted.mkdir(mode=0o777)
    os.chmod(planted, 0o777)
    (planted / "cache.db").write_bytes(pickle.dumps("the attacker's value"))
    background.manager.cache_clear()
    try:
        store = Path(background.manager().handle.directory)
    finally:
        background.manager.cache_clear()
    assert store.parent == tmp_path and store != planted
    st = store.stat()
    assert st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert sorted(p.name for p in planted.iterdir()) == ["cache.db"]  # never opened


@pytest.mark.parametrize("kind", ["others can write", "a link", "a file"])
def test_a_folder_that_is_not_private_is_refused(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "store"
    if kind == "others can write":
        folder.mkdir(mode=0o700)
        os.chmod(folder, 0o733)
    elif kind == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.write_text("")
    with pytest.raises(background.StoreError):
        background.check_private(folder)
