"""One measurement in a fresh process: ``python -m bench.measure TOOL PATH [CACHE_DIR]``.

Prints one JSON line: ``seconds`` (the tool's work, imports excluded), ``peak_rss_mb`` of this
process, and tool-specific numbers. Run by bench/__main__.py so each tool starts cold.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable
from typing import Any


def _podscope_parse(path: str, cache_dir: str | None) -> dict[str, Any]:
    from podscope.trace_parsers import load

    t = time.perf_counter()
    frames = load(path, cache=cache_dir is not None, cache_dir=cache_dir)
    seconds = time.perf_counter() - t
    events_bytes = int(frames.events.memory_usage(deep=True).sum())
    all_bytes = sum(int(f.memory_usage(deep=True).sum()) for _, f in frames.frames())
    n = len(frames.events)
    return {
        "seconds": seconds,
        "events": n,
        "events_bytes_per_event": events_bytes / n,
        "all_bytes_per_event": all_bytes / n,
    }


def _podscope_reload(path: str, cache_dir: str | None) -> dict[str, Any]:
    """A warm-cache load in a process that has loaded a capture before (a dashboard or
    notebook session): the one-time costs of pandas' first frames are already paid."""
    from podscope.trace_parsers import load

    load(path, cache=True, cache_dir=cache_dir)  # fills the cache if it is empty
    t = time.perf_counter()
    load(path, cache=True, cache_dir=cache_dir)
    return {"seconds": time.perf_counter() - t}


def _podscope_op_table(path: str, cache_dir: str | None) -> dict[str, Any]:
    """Parse (or warm load) + ``analyzers.ops.op_stats``: what framework_op_stats shows."""
    from podscope.analyzers.ops import op_stats
    from podscope.trace_parsers import load

    t = time.perf_counter()
    table = op_stats(load(path, cache=cache_dir is not None, cache_dir=cache_dir).events)
    return {"seconds": time.perf_counter() - t, "ops": len(table)}


def _podscope_analyze(path: str, cache_dir: str | None) -> dict[str, Any]:
    """The full per-worker analysis (``analyzers.execution.analyze_files``, every part: parse,
    steps, breakdown, op tables, memory and what the rules read), no cache, on one core: the
    second run in this process (a Dask worker's state after its first task). ``first_seconds``
    is the first run, first-use costs included."""
    from podscope.analyzers.execution import PARTS, analyze_files

    t = time.perf_counter()
    analyze_files((path,), PARTS, False, None)
    first = time.perf_counter() - t
    t = time.perf_counter()
    part = analyze_files((path,), PARTS, False, None)
    events = sum(n for _, _, n in part.workers)
    return {"seconds": time.perf_counter() - t, "first_seconds": first, "events": events}


def _xprof_framework_op_stats(path: str, cache_dir: str | None) -> dict[str, Any]:
    from xprof.convert import raw_to_tool_data

    t = time.perf_counter()
    data, _ = raw_to_tool_data.xspace_to_tool_data(
        [path], "framework_op_stats", {"use_saved_result": False}
    )
    return {"seconds": time.perf_counter() - t, "bytes_out": len(data or b"")}


TOOLS: dict[str, Callable[[str, str | None], dict[str, Any]]] = {
    "podscope_parse": _podscope_parse,
    "podscope_reload": _podscope_reload,
    "podscope_op_table": _podscope_op_table,
    "podscope_analyze": _podscope_analyze,
    "xprof_framework_op_stats": _xprof_framework_op_stats,
}


def main() -> None:
    tool, path = sys.argv[1], sys.argv[2]
    cache_dir = sys.argv[3] if len(sys.argv) > 3 else None
    result = TOOLS[tool](path, cache_dir)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


if __name__ == "__main__":
    main()
