"""Builds the common frames from slices, counters and scheduling slices (text/JSON/Perfetto
parsers share it): nesting per thread, one line per async track, validated columns."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd

from trace_parsers._columns import cat
from trace_parsers.nesting import nest_columns
from trace_parsers.schema import SCHEMA, TraceFrames


class SliceBuilder:
    """Accumulates one file's slices, counters and sched slices; ``frames`` builds the frames.

    Slices are ``(pid, tid, start_ns, end_ns, name, kind)`` with kind 0 sync, 1 async (tid -1:
    one line per async name), 2 instant, 3 unclosed. ``tasks`` names threads by tid,
    ``processes`` names processes by pid (falling back to the thread of that id).
    """

    def __init__(self) -> None:
        self.slices: list[
            tuple[int, int, int, int, str, int]
        ] = []  # tgid, tid, start, end, name, kind
        self.stacks: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
        self.async_open: dict[tuple[int, str, str], int] = {}
        self.counters: list[tuple[int, str, int, float]] = []
        self.sched: list[
            tuple[int, int, int, int, str, str]
        ] = []  # cpu, start, dur, tid, comm, end state
        self.running: dict[int, tuple[int, int, str]] = {}  # cpu -> (start, tid, comm)
        self.tasks: dict[int, str] = {}
        self.processes: dict[int, str] = {}
        self.tgid_of: dict[int, int] = {}
        self.notes: dict[str, int] = defaultdict(int)
        self.first: int | None = None
        self.last: int | None = None

    def time(self, ts_ns: int) -> None:
        self.first = ts_ns if self.first is None else min(self.first, ts_ns)
        self.last = ts_ns if self.last is None else max(self.last, ts_ns)

    def frames(self, worker: str, source: str) -> TraceFrames:
        """The frames of everything added so far."""
        n = len(self.slices)
        arr = np.array(
            [(s[0], s[1], s[2], s[3], s[5]) for s in self.slices], dtype=np.int64
        ).reshape(n, 5)
        pid, tid, start, end, _kind = (arr[:, i] for i in range(5))
        names = [s[4] for s in self.slices]
        # Async slices get their own line per name; sync slices nest per thread.
        line_key = np.where(
            tid >= 0, tid, -1 - pd.factorize(pd.Index(names, dtype=object))[0] if n else tid
        )
        order = np.lexsort((-(end - start), start, line_key)) if n else np.zeros(0, dtype=np.int64)
        depth, parent, self_ps = nest_columns(
            line_key[order], start[order] * 1000, end[order] * 1000
        )
        pname = {
            p: self.processes.get(p) or self.tasks.get(p, f"pid {p}") for p in set(pid.tolist())
        }
        procs = [f"{pname[p]} ({p})" for p in pid[order]]
        lines = [
            f"{self.tasks.get(t, 'thread')} ({t})" if t >= 0 else f"async: {names[i]}"
            for t, i in zip(tid[order], order, strict=True)
        ]
        name_col = [names[i] for i in order]
        events = (
            pd.DataFrame({c: pd.Series(dtype=t) for c, t in SCHEMA["events"].items()})
            if not n
            else pd.DataFrame(
                {
                    "worker": cat(np.zeros(n, dtype=np.int64), [worker]),
                    "plane": pd.Categorical(procs),
                    "line_id": line_key[order],
                    "line": pd.Categorical(lines),
                    "metadata_id": np.zeros(n, dtype=np.int64),
                    "name": pd.Categorical(name_col),
                    "display_name": pd.Categorical(name_col),
                    "start_ns": start[order],
                    "dur_ps": (end - start)[order] * 1000,
                    "depth": depth.astype(np.int16),
                    "parent": parent.astype(np.int32),
                    "self_ps": self_ps,
                }
            )
        )
        if n:
            events["op_name"], events["op_type"] = _tflite_ops(events["name"])
        for col, dtype in SCHEMA["events"].items():
            if col not in events:
                events[col] = (
                    pd.Series([pd.NA] * n, dtype=dtype)
                    if dtype != "category"
                    else pd.Categorical([None] * n)
                )
        events = events[list(SCHEMA["events"])].astype(
            {c: t for c, t in SCHEMA["events"].items() if t != "category"}
        )
        counters = pd.DataFrame(
            {
                "worker": cat(np.zeros(len(self.counters), dtype=np.int64), [worker]),
                "process": pd.Categorical(
                    [pname.get(p, "cpu") if p >= 0 else "cpu" for p, *_ in self.counters]
                ),
                "name": pd.Categorical([c[1] for c in self.counters]),
                "ts_ns": np.array([c[2] for c in self.counters], dtype=np.int64),
                "value": np.array([c[3] for c in self.counters], dtype=np.float64),
            }
        )
        sched = pd.DataFrame(
            {
                "worker": cat(np.zeros(len(self.sched), dtype=np.int64), [worker]),
                "cpu": np.array([s[0] for s in self.sched], dtype=np.int16),
                "start_ns": np.array([s[1] for s in self.sched], dtype=np.int64),
                "dur_ns": np.array([s[2] for s in self.sched], dtype=np.int64),
                "tid": np.array([s[3] for s in self.sched], dtype=np.int64),
                "comm": pd.Categorical([s[4] for s in self.sched]),
                "end_state": pd.Categorical([s[5] for s in self.sched]),
            }
        )
        notes = pd.DataFrame(
            {
                "worker": cat(np.zeros(len(self.notes), dtype=np.int64), [worker]),
                "key": pd.Categorical(list(self.notes)),
                "value": np.array(list(self.notes.values()), dtype=np.int64),
            }
        )
        span = (self.last or 0) - (self.first or 0)
        workers = pd.DataFrame(
            {
                "worker": pd.Categorical([worker]),
                "host": pd.array([worker], dtype="string"),
                "port": pd.array([None], dtype="Int64"),
                "file": pd.array([source], dtype="string"),
                "capture_start_ns": pd.array([self.first], dtype="Int64"),
                "capture_stop_ns": pd.array(
                    [self.first + span if self.first is not None else None], dtype="Int64"
                ),
                "time_base": pd.array(["trace_clock"], dtype="string"),
                "hostnames": pd.array([""], dtype="string"),
                "errors": pd.array([""], dtype="string"),
                "warnings": pd.array([""], dtype="string"),
            }
        )
        planes = (
            events.groupby("plane", observed=True)
            .agg(n_lines=("line", "nunique"), n_events=("name", "size"))
            .reset_index()
        )
        planes = pd.DataFrame(
            {
                "worker": cat(np.zeros(len(planes), dtype=np.int64), [worker]),
                "plane_id": np.arange(len(planes), dtype=np.int64),
                "plane": pd.Categorical(planes["plane"].astype(str)),
                "n_lines": planes["n_lines"].astype(np.int64),
                "n_events": planes["n_events"].astype(np.int64),
            }
        )
        return TraceFrames(
            events=events,
            workers=workers,
            planes=planes,
            counters=counters,
            sched=sched,
            parse_notes=notes,
        )


def _tflite_ops(names: pd.Series) -> tuple[pd.Categorical, pd.Categorical]:
    """TFLite op sections (``CONV_2D@31/0``, delegate kernels) as op name and op type, so the
    op tables work on Android traces; other slices get none. Parsed once per distinct name."""
    from trace_parsers.tflite import section

    labels = [section(str(c)) for c in names.cat.categories]
    ops = [p if p and p.kind in ("op", "delegate") else None for p in labels]
    codes = names.cat.codes.to_numpy()
    return (
        cat(codes, [str(c) if p else None for c, p in zip(names.cat.categories, ops, strict=True)]),
        cat(codes, [p.tag if p else None for p in ops]),
    )
