"""ftrace/atrace text blocks → ``SliceBuilder`` (the reader behind ``trace_parsers.atrace``).

The per-line work — tokenizing, interning names, the per-thread B/E stacks, marker kinds,
sched_switch and cpu counter payloads — is one C pass (``_ftrace_fast.c``, whose header holds
the grammar). Here its columns are wrapped with numpy and added to the builder: sched_switch
lines become per-CPU slices (each ends at the next switch on that CPU), async S/F pairs (few)
are matched on (pid, name, cookie), and the counts go to ``parse_notes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podscope.trace_parsers import compiled

try:
    from podscope.trace_parsers import _ftrace_fast
except ImportError as e:  # installed without a C compiler
    _ftrace_fast = compiled.missing(e)
from podscope.trace_parsers._slices import SliceBuilder

_COUNTS = ("skipped_lines", "clock_sync", "markers", "unknown_marker", "unmatched_end")
_IF_ANY = ("bad_counter", "sched_switch", "bad_sched_switch")


class _Columns:
    """The reader's output: ``cols.i64("s_pid")`` wraps a column buffer, ``cols.str_("s_name")``
    maps a string-code column to its strings."""

    def __init__(self, text: str | bytes) -> None:
        self.r: dict[str, Any] = _ftrace_fast.read_ftrace(
            text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        )
        self.strings = np.array(self.r["strings"], dtype=object)

    def i64(self, name: str) -> np.ndarray:
        return np.frombuffer(self.r[name], dtype=np.int64)

    def i32(self, name: str) -> np.ndarray:
        return np.frombuffer(self.r[name], dtype=np.int32)

    def str_(self, name: str) -> np.ndarray:
        return self.strings[self.i32(name)]


def read_text(sb: SliceBuilder, text: str | bytes) -> None:
    """Adds one ftrace text block (str, or UTF-8 bytes) to the builder."""
    c = _Columns(text)
    r = c.r
    sb.notes["events"] += r["lines"]
    for key in _COUNTS:
        sb.notes[key] += r[key]
    counts = c.i64("event_counts")
    for code in np.flatnonzero(counts):
        if c.strings[code] != "sched_switch":  # counted as parsed / bad below
            sb.notes[str(c.strings[code])] += int(counts[code])
    for key in _IF_ANY:
        if r[key]:
            sb.notes[key] += r[key]
    if r["first"] is not None:
        sb.time(r["first"])
        sb.time(r["last"])
    for tid, task in zip(c.i64("t_tid").tolist(), c.i32("t_task").tolist(), strict=True):
        if task >= 0:
            sb.tasks[tid] = c.strings[task]
    sb.add_slices(
        c.i64("s_pid"),
        c.i64("s_tid"),
        c.i64("s_start"),
        c.i64("s_end"),
        c.str_("s_name"),
        np.frombuffer(r["s_kind"], dtype=np.int8),
    )
    sb.add_counters(
        c.i64("c_pid"), c.str_("c_name"), c.i64("c_ts"), np.frombuffer(r["c_val"], np.float64)
    )
    for tid, ts, name, pid in zip(
        c.i64("o_tid").tolist(),
        c.i64("o_ts").tolist(),
        c.str_("o_name").tolist(),
        c.i64("o_pid").tolist(),
        strict=True,
    ):  # unclosed B, bottom of each thread's stack first: closed at the end of the trace
        sb.stacks[tid].append((ts, name, pid))
    _async(sb, c)
    _sched(sb, c)
    _cpu_counters(sb, c)


def _async(sb: SliceBuilder, c: _Columns) -> None:
    rows = zip(
        np.frombuffer(c.r["a_kind"], np.int8).tolist(),
        c.i64("a_pid").tolist(),
        c.str_("a_name").tolist(),
        c.str_("a_cookie").tolist(),
        c.i64("a_ts").tolist(),
        strict=True,
    )
    for kind, pid, name, cookie, ts in rows:
        key = (pid, name, cookie)
        if kind == ord("S"):
            sb.async_open[key] = ts
        elif key in sb.async_open:
            sb.slices.append((pid, -1, sb.async_open.pop(key), ts, name, 1))
        else:
            sb.notes["unmatched_async_finish"] += 1


def _sched(sb: SliceBuilder, c: _Columns) -> None:
    """Per CPU in time order, a switch runs its next task until the CPU's next switch, whose
    prev_state is how that task left; the last switch on each CPU is still running."""
    cpu, ts = c.i64("w_cpu"), c.i64("w_ts")
    if not len(cpu):
        return
    order = np.lexsort((ts, cpu))  # stable: equal times keep file order
    cpu, ts = cpu[order], ts[order]
    tid, comm, state = c.i64("w_tid")[order], c.str_("w_comm")[order], c.str_("w_state")[order]
    closed = np.r_[cpu[1:] == cpu[:-1], False]
    nxt = np.flatnonzero(closed) + 1
    sb.add_sched(
        cpu[closed], ts[closed], ts[nxt] - ts[closed], tid[closed], comm[closed], state[nxt]
    )
    for i in np.flatnonzero(~closed).tolist():
        sb.running[int(cpu[i])] = (int(ts[i]), int(tid[i]), str(comm[i]))


def _cpu_counters(sb: SliceBuilder, c: _Columns) -> None:
    event, cpu = c.i32("f_event"), c.i32("f_cpu")
    if not len(event):
        return
    pairs, inverse = np.unique(np.stack([event, cpu], axis=1), axis=0, return_inverse=True)
    names = np.array([f"{c.strings[e]} cpu{c.strings[k]}" for e, k in pairs], dtype=object)
    sb.add_counters(
        np.full(len(event), -1),
        names[inverse.ravel()],
        c.i64("f_ts"),
        c.i64("f_state").astype(np.float64),
    )
