"""One-screen summary of parsed frames (for ``podscope parse``)."""

from __future__ import annotations

from typing import Any

from trace_parsers import TraceFrames


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


def render(summary: dict[str, Any]) -> None:
    """Prints the summary as a table (rich)."""
    from rich.console import Console
    from rich.table import Table

    s = summary
    table = Table(title=f"{s['events']:,} events · {s['planes']} planes · {s['lines']} lines")
    cols = ("worker", "planes", "lines", "events", "span_ms", "steps")
    for col in cols:
        table.add_column(col, justify="left" if col == "worker" else "right")
    for w in summary["workers"]:
        table.add_row(*(f"{w[c]:,}" if isinstance(w[c], int) else str(w[c]) for c in cols))
    console = Console()
    console.print(table)
    if summary.get("written"):
        console.print(f"frames written to {summary['written']}")
