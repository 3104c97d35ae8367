"""The background-callback manager, in its own module so pages can import it while the app
module is still loading."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import diskcache
from dash import DiskcacheManager


@cache
def manager() -> DiskcacheManager:
    """One DiskcacheManager per process (cache folder under the system temp dir)."""
    return DiskcacheManager(
        diskcache.Cache(str(Path(tempfile.gettempdir()) / "podscope-background"))
    )
