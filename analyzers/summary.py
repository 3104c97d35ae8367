"""One-screen summary of parsed frames (``podscope parse``; a per-worker export task returns
it, ``analyzers.execution``): counts, span and step markers per worker, JSON-able."""

from __future__ import annotations

from typing import Any

import pandas as pd

from podscope.trace_parsers.schema import TraceFrames


def summarize(frames: TraceFrames) -> dict[str, Any]:
    """Counts, time span and step markers per worker, as plain JSON-able values.

    ``events`` are slices (XPlane events, Android / Perfetto / Chrome slices), ``sched`` CPU
    scheduling slices and ``counters`` counter samples, each counted in its own column; the
    span runs from the first to the last of any of them (a Perfetto trace of scheduling and
    counters has its span though it holds one slice). ``step_markers`` are events carrying a
    ``step_num`` stat (``Trace('train', step_num=…)``, Keras ``fit``); the full step analysis
    (fallbacks, alignment) is ``analyzers.steps``.
    """
    ev, sched, counters = frames.events, frames.sched, frames.counters
    starts = [
        ev[["worker", "start_ns"]].assign(end=ev["start_ns"] + ev["dur_ps"] // 1000),
        sched[["worker", "start_ns"]].assign(end=sched["start_ns"] + sched["dur_ns"]),
        counters[["worker"]].assign(start_ns=counters["ts_ns"], end=counters["ts_ns"]),
    ]
    times = (
        pd.concat([t.astype({"worker": str}) for t in starts if len(t)], ignore_index=True)
        if any(len(t) for t in starts)
        else pd.DataFrame(columns=["worker", "start_ns", "end"])
    )
    names = sorted(
        {str(w) for f in (frames.workers, ev, sched, counters) for w in f["worker"].unique()}
    )

    def count(frame: Any, w: str) -> int:
        return int(frame["worker"].astype(str).eq(w).sum())

    workers = []
    for w in names:
        t = times[times["worker"] == w]
        mine = ev[ev["worker"].astype(str) == w]
        workers.append(
            {
                "worker": w,
                "planes": count(frames.planes, w),
                "lines": count(frames.lines, w),
                "events": len(mine),
                "sched": count(sched, w),
                "counters": count(counters, w),
                "span_ms": round((int(t["end"].max()) - int(t["start_ns"].min())) / 1e6, 3)
                if len(t)
                else 0.0,
                "step_markers": int(mine["step_num"].dropna().nunique()),
            }
        )
    return {
        "workers": workers,
        "planes": len(frames.planes),
        "lines": len(frames.lines),
        "events": len(ev),
        "sched": len(sched),
        "counters": len(counters),
        "stats": len(frames.stats),
        "aggregates": len(frames.aggregates),
        "failures": [str(f) for f in frames.failures],
    }
