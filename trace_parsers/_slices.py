"""Builds the common frames from slices, counters and scheduling slices (text/JSON/Perfetto
parsers share it): nesting per thread, one line per async track, validated columns."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from podscope.trace_parsers._columns import cat, id_cat, missing
from podscope.trace_parsers.nesting import depth_column, nest_columns
from podscope.trace_parsers.schema import SCHEMA, TraceFrames


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
        self.notes: dict[str, int] = defaultdict(int)
        self.first: int | None = None
        self.last: int | None = None
        # Column chunks added by vectorized readers (same meaning as the lists above).
        self.slice_chunks: list[tuple[np.ndarray, ...]] = []
        self.counter_chunks: list[tuple[np.ndarray, ...]] = []
        self.sched_chunks: list[tuple[np.ndarray, ...]] = []
        self.chunk_rows = 0  # rows in the chunks above

    def add_slices(
        self,
        pid: np.ndarray,
        tid: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        names: np.ndarray,
        kind: int | np.ndarray,
    ) -> None:
        if len(pid):
            kinds = np.broadcast_to(np.asarray(kind, dtype=np.int64), len(pid))
            self.chunk_rows += len(pid)
            self.slice_chunks.append((pid, tid, start, end, kinds, np.asarray(names, dtype=object)))

    def add_counters(
        self, pid: np.ndarray, names: np.ndarray, ts: np.ndarray, values: np.ndarray
    ) -> None:
        if len(pid):
            self.chunk_rows += len(pid)
            self.counter_chunks.append((pid, np.asarray(names, dtype=object), ts, values))

    def add_sched(
        self,
        cpu: np.ndarray,
        start: np.ndarray,
        dur: np.ndarray,
        tid: np.ndarray,
        comm: np.ndarray,
        state: np.ndarray,
    ) -> None:
        if len(cpu):
            self.chunk_rows += len(cpu)
            self.sched_chunks.append(
                (
                    cpu,
                    start,
                    dur,
                    tid,
                    np.asarray(comm, dtype=object),
                    np.asarray(state, dtype=object),
                )
            )

    def _slice_columns(self) -> tuple[np.ndarray, ...]:
        rows = self.slices
        base = (
            np.array([r[0] for r in rows], dtype=np.int64),
            np.array([r[1] for r in rows], dtype=np.int64),
            np.array([r[2] for r in rows], dtype=np.int64),
            np.array([r[3] for r in rows], dtype=np.int64),
            np.array([r[5] for r in rows], dtype=np.int64),
            np.array([r[4] for r in rows], dtype=object),
        )
        parts = [base, *self.slice_chunks]
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(6))

    def _counter_columns(self) -> tuple[np.ndarray, ...]:
        rows = self.counters
        base = (
            np.array([r[0] for r in rows], dtype=np.int64),
            np.array([r[1] for r in rows], dtype=object),
            np.array([r[2] for r in rows], dtype=np.int64),
            np.array([r[3] for r in rows], dtype=np.float64),
        )
        parts = [base, *self.counter_chunks]
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))

    def _sched_columns(self) -> tuple[np.ndarray, ...]:
        rows = self.sched
        base = tuple(
            np.array([r[i] for r in rows], dtype=object if i >= 4 else np.int64) for i in range(6)
        )
        parts = [base, *self.sched_chunks]
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(6))

    def rows(self) -> int:
        """Slices, counter samples and scheduling slices made so far (charged to the file's
        ``trace_parsers.budget``)."""
        return len(self.slices) + len(self.counters) + len(self.sched) + self.chunk_rows

    def time(self, ts_ns: int) -> None:
        self.first = ts_ns if self.first is None else min(self.first, ts_ns)
        self.last = ts_ns if self.last is None else max(self.last, ts_ns)

    def frames(self, worker: str, source: str) -> TraceFrames:
        """The frames of everything added so far."""
        pid, tid, start, end, _kind, names = self._slice_columns()
        n = len(pid)
        # Async slices get their own line per name; sync slices nest per thread.
        name_codes, name_uniques = (
            pd.factorize(pd.Index(names, dtype=object)) if n else (np.zeros(0, np.int64), [])
        )
        line_key = np.where(tid >= 0, tid, -1 - name_codes)
        order = np.lexsort((-(end - start), start, line_key)) if n else np.zeros(0, dtype=np.int64)
        # Nested in ns (a garbled timestamp times 1000 could wrap around int64).
        depth, parent, self_ns = nest_columns(line_key[order], start[order], end[order])
        pids, pid_codes = np.unique(pid[order], return_inverse=True)
        pname = {
            int(p): self.processes.get(int(p)) or self.tasks.get(int(p), f"pid {p}") for p in pids
        }
        plane_labels = [f"{pname[int(p)]} ({p})" for p in pids]
        keys, key_codes = np.unique(line_key[order], return_inverse=True)
        key_labels = [
            f"{self.tasks.get(int(k), 'thread')} ({k})"
            if k >= 0
            else f"async: {name_uniques[-1 - int(k)]}"
            for k in keys
        ]
        name_cat = cat(name_codes[order], name_uniques)
        cols: dict[str, Any] = {
            "worker": cat(np.zeros(n, dtype=np.int64), [worker]),
            "plane": cat(pid_codes, plane_labels),
            "line_id": id_cat(key_codes, keys),
            "line": cat(key_codes, key_labels),
            "metadata_id": id_cat(np.zeros(n, dtype=np.int8), np.zeros(1, dtype=np.int64)),
            "name": name_cat,
            "display_name": name_cat,
            "start_ns": start[order],
            "dur_ps": (end - start)[order] * 1000,
            "depth": depth_column(depth),
            "parent": parent.astype(np.int32),
            "self_ps": self_ns * 1000,
        }
        cols["op_name"], cols["op_type"] = _tflite_ops(name_cat)
        events = pd.DataFrame(
            {c: cols[c] if c in cols else missing(n, t) for c, t in SCHEMA["events"].items()}
        )
        c_pid, c_name, c_ts, c_val = self._counter_columns()
        c_pids, c_pid_codes = np.unique(c_pid, return_inverse=True)
        c_labels = [
            str(pname.get(p) or self.processes.get(p) or self.tasks.get(p, f"pid {p}"))
            if p >= 0
            else "cpu"
            for p in c_pids.tolist()
        ]
        counters = pd.DataFrame(
            {
                "worker": cat(np.zeros(len(c_pid), dtype=np.int64), [worker]),
                "process": cat(c_pid_codes, c_labels),
                "name": pd.Categorical(c_name),
                "ts_ns": c_ts,
                "value": c_val,
            }
        )
        s_cpu, s_start, s_dur, s_tid, s_comm, s_state = self._sched_columns()
        sched = pd.DataFrame(
            {
                "worker": cat(np.zeros(len(s_cpu), dtype=np.int64), [worker]),
                "cpu": s_cpu.astype(np.int16),
                "start_ns": s_start.astype(np.int64),
                "dur_ns": s_dur.astype(np.int64),
                "tid": s_tid.astype(np.int64),
                "comm": pd.Categorical(s_comm),
                "end_state": pd.Categorical(s_state),
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
        plane_lines = np.unique(pid_codes * max(len(keys), 1) + key_codes) // max(len(keys), 1)
        planes = pd.DataFrame(
            {
                "worker": cat(np.zeros(len(pids), dtype=np.int64), [worker]),
                "plane_id": np.arange(len(pids), dtype=np.int64),
                "plane": pd.Categorical(plane_labels),
                "n_lines": np.bincount(plane_lines, minlength=len(pids)).astype(np.int64),
                "n_events": np.bincount(pid_codes, minlength=len(pids)).astype(np.int64),
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


def _tflite_ops(names: pd.Categorical) -> tuple[pd.Categorical, pd.Categorical]:
    """TFLite op sections (``CONV_2D@31/0``, delegate kernels) as op name and op type, so the
    op tables work on Android traces; other slices get none. Parsed once per distinct name."""
    from podscope.trace_parsers.tflite import section

    labels = [section(str(c)) for c in names.categories]
    ops = [p if p and p.kind in ("op", "delegate") else None for p in labels]
    codes = names.codes
    return (
        cat(codes, [str(c) if p else None for c, p in zip(names.categories, ops, strict=True)]),
        cat(codes, [p.tag if p else None for p in ops]),
    )
