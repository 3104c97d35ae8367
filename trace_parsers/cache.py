"""Parquet cache of parsed frames, keyed by file size, mtime, content hash and parser version.

    >>> from trace_parsers.cache import FrameCache
    >>> store = FrameCache(FrameCache.default_dir())
    >>> key = store.key(path, data); frames = store.get(key) or parse(data)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from trace_parsers.schema import PARSER_VERSION, SCHEMA, TraceFrames, validate


class FrameCache:
    """One folder per parsed file; one ``<frame>.parquet`` per frame.

    Entries are written to a temporary folder and renamed into place, so concurrent readers
    never see a half-written entry. A damaged entry is treated as a miss and rewritten.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def default_dir() -> Path:
        """``$PODSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/podscope``, else ``~/.cache/podscope``.

        Read here, at the edge where the cache is built (the CLI and app pass ``cache_dir``).
        """
        env = os.environ.get("PODSCOPE_CACHE_DIR")
        if env:
            return Path(env)
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "podscope"

    def key(self, path: Path, data: bytes) -> str:
        """Cache key of one input file: size, mtime, BLAKE2 of the content, parser version."""
        st = path.stat()
        digest = hashlib.blake2b(data, digest_size=16).hexdigest()
        return f"{st.st_size}-{st.st_mtime_ns}-{digest}-v{PARSER_VERSION}"

    def get(self, key: str) -> TraceFrames | None:
        """The cached frames, or None on a miss (or an unreadable entry)."""
        entry = self.root / key
        if not entry.is_dir():
            return None
        try:
            frames = {name: pq.read_table(entry / f"{name}.parquet").to_pandas() for name in SCHEMA}
            return validate(TraceFrames(**frames), str(entry))
        except (OSError, pa.ArrowException, ValueError):
            shutil.rmtree(entry, ignore_errors=True)
            return None

    def put(self, key: str, frames: TraceFrames) -> None:
        """Stores frames under ``key``; a cache that cannot be written is skipped silently
        because the parse result is already in hand (caching is an optimisation only)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
        except OSError:
            return
        try:
            for name, frame in frames.frames():
                table = pa.Table.from_pandas(frame, preserve_index=False)
                pq.write_table(table, tmp / f"{name}.parquet", compression="lz4")
            os.replace(tmp, self.root / key)
        except OSError:
            pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
