"""Run inside a PodScope container (``docker exec -i C python - < docker/cache_hit.py``): every
trace under the logdir has an entry in the parse cache that this container can use (written by
an earlier container on the same /cache volume). Exits non-zero, naming the file, otherwise."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from podscope.trace_parsers.cache import FrameCache
from podscope.trace_parsers.loader import session_folders, trace_files


def main() -> None:
    store = FrameCache(Path(os.environ["PODSCOPE_CACHE_DIR"]))
    files = [
        f
        for folder in session_folders(Path(os.environ["PODSCOPE_LOGDIR"])).values()
        for f in trace_files(folder)
    ]
    assert files, "no trace under the logdir"
    for f in files:
        if store.get(store.key(f)) is None:
            sys.exit(f"{f}: no usable parse cache entry under {store.root}")
    print(f"cache hits for {len(files)} traces under {store.root}")


main()
