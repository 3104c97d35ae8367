"""Export parsed frames as Chrome trace JSON (opens in Perfetto's UI and chrome://tracing).

    >>> from podscope.trace_parsers.chrome import write_chrome_trace
    >>> write_chrome_trace(frames, Path("session.json.gz"))  # gzip when the name ends in .gz

Processes are workers (× plane), threads are lines; ``ts``/``dur`` are microseconds from the
session start (Chrome's unit); the absolute start is in the metadata. Events are written in
chunks, so memory stays flat for big sessions.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import IO

import numpy as np

from podscope.trace_parsers.schema import TraceFrames

CHUNK = 200_000


def write_chrome_trace(frames: TraceFrames, path: Path) -> int:
    """Writes ``frames.events`` to ``path`` (gzip if it ends with ``.gz``); returns the event count."""
    ev = frames.events
    opener = gzip.open if path.name.endswith(".gz") else open
    base = int(ev["start_ns"].min()) if len(ev) else 0
    proc = (ev["worker"].astype(str) + " " + ev["plane"].astype(str)).astype("category")
    thread = (ev["line_id"].astype(str) + " " + ev["line"].astype(str)).astype("category")
    pids = proc.cat.codes.to_numpy() + 1
    tids = thread.cat.codes.to_numpy() + 1
    with opener(path, "wt", encoding="utf-8") as out:
        f: IO[str] = out
        f.write(
            '{"displayTimeUnit":"ns","otherData":'
            + json.dumps({"start_ns": base})
            + ',"traceEvents":[\n'
        )
        meta = [
            {"ph": "M", "name": "process_name", "pid": i + 1, "tid": 0, "args": {"name": n}}
            for i, n in enumerate(proc.cat.categories)
        ]
        pairs = (
            np.unique(np.stack([pids, tids], axis=1), axis=0)
            if len(ev)
            else np.zeros((0, 2), dtype=int)
        )
        meta += [
            {
                "ph": "M",
                "name": "thread_name",
                "pid": int(p),
                "tid": int(t),
                "args": {"name": str(thread.cat.categories[t - 1])},
            }
            for p, t in pairs
        ]
        f.write(",\n".join(json.dumps(m) for m in meta))
        names = ev["name"].astype(str).to_numpy()
        ts = (ev["start_ns"].to_numpy() - base) / 1000.0
        dur = ev["dur_ps"].to_numpy() / 1e6
        steps = ev["step_num"].to_numpy(dtype="float64", na_value=np.nan)
        for lo in range(0, len(ev), CHUNK):
            hi = min(lo + CHUNK, len(ev))
            rows = []
            for i in range(lo, hi):
                args = f',"args":{{"step_num":{int(steps[i])}}}' if steps[i] == steps[i] else ""
                rows.append(
                    f'{{"ph":"X","name":{json.dumps(names[i])},"pid":{pids[i]},"tid":{tids[i]},'
                    f'"ts":{ts[i]:.3f},"dur":{dur[i]:.3f}{args}}}'
                )
            f.write((",\n" if (lo or meta) else "") + ",\n".join(rows))
        f.write("\n]}\n")
    return len(ev)
