"""One-screen summary of parsed frames (``podscope parse``; a per-worker export task returns
it, ``analyzers.execution``): counts, span and step markers per worker, JSON-able."""

from __future__ import annotations

from typing import Any

from trace_parsers.schema import TraceFrames


def summarize(frames: TraceFrames) -> dict[str, Any]:
    """Counts, time span and step markers per worker, as plain JSON-able values.

    Step markers are events carrying a ``step_num`` stat (``Trace('train', step_num=…)``, Keras
    ``fit``); the full step analysis (fallbacks, alignment) is ``analyzers.steps``.
    """
    ev = frames.events
    workers = []
    for w, g in ev.groupby("worker", observed=True, sort=True):
        end = g["start_ns"] + g["dur_ps"] // 1000
        workers.append(
            {
                "worker": str(w),
                "planes": int(frames.planes["worker"].eq(w).sum()),
                "lines": int(frames.lines["worker"].eq(w).sum()),
                "events": len(g),
                "span_ms": round((int(end.max()) - int(g["start_ns"].min())) / 1e6, 3),
                "steps": int(g["step_num"].dropna().nunique()),
            }
        )
    return {
        "workers": workers,
        "planes": len(frames.planes),
        "lines": len(frames.lines),
        "events": len(ev),
        "stats": len(frames.stats),
        "aggregates": len(frames.aggregates),
        "failures": [str(f) for f in frames.failures],
    }
