"""The timeline's index: one worker's events as flat numpy columns (times, track, depth,
name and category codes), built once per worker shown, so that a redraw of any window is a
few vectorized passes.

A track is one (plane, line) of the worker, labelled short (``GPU:0 › Stream #14``); events
nested in a track are drawn at their ``depth`` (a flame chart). Every event has a category,
its TF op type when it has one, else the head of its name (``MemcpyHtoD``, ``Iterator``,
``$python``), which sets its colour.

Android captures add Perfetto's tracks: one per CPU of scheduling slices (the thread that ran,
under the ``sched`` plane) and one per counter (CPU frequency, idle state…, under ``counters``),
so that a trace with no app sections still shows what the device did.

    >>> index = TimelineIndex.build(worker_events, "w0", sched=frames.sched)
    >>> index.labels[:2]                      # per track: "w0 › CPU › tf_Compute"
    >>> rows = index.rows[index.matching("MatMul")]   # event rows whose name contains MatMul
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pandas as pd

_DIGITS, _ID_SEPARATORS = "0123456789", "/ _:#-"
#: A search for an XLA instruction's own events (``TimelineIndex.matching``).
XLA_OP_SEARCH = "hlo:"


def _without_long_id(line: str) -> str:
    """``line`` without a trailing id of 6+ digits and the separators before it. String
    methods, not a regex: ``[/ _:#-]*-?\\d{6,}$`` retried from every digit of a long digit run
    (an 80 k-digit line name took 50 s)."""
    head = line.rstrip(_DIGITS)
    return head.rstrip(_ID_SEPARATORS) if len(line) - len(head) >= 6 else line


def short_line(plane: str, line: str) -> str:
    """A track's label without the noise: ``/host:CPU`` → ``CPU``, ``/device:GPU:0`` →
    ``GPU:0``; a line's trailing long numeric id (``tf_Compute/-1481541789699770605``) and
    leading path go."""
    where = plane.rsplit("/", 1)[-1].removeprefix("host:").removeprefix("device:")
    what = _without_long_id(line).rstrip("/") or line
    if "/" in what:
        what = what.rsplit("/", 1)[-1] or what
    return f"{where} › {what}" if where else what


def category_of(name: str) -> str:
    """The head of an event name: ``MemcpyHtoD``, ``Iterator`` for ``Iterator::Map``,
    ``$python`` for Python-tracer events, ``ncclKernel`` for ``ncclKernel_AllReduce_…``."""
    if name.startswith("$"):
        return "$python"
    head = re.split(r"[:(<\s/.]", name, maxsplit=1)[0]
    return head.split("_", 1)[0] if head.startswith("nccl") else head or name[:16]


def _categorical(col: pd.Series) -> pd.Series:
    return col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")


def _unique(labels: list[str]) -> list[str]:
    """Labels that shortening made equal (threads ``tf_Compute/-14…`` and ``tf_Compute/-92…``)
    numbered apart: ``tf_Compute #1``, ``tf_Compute #2``."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        if counts[label] > 1:
            seen[label] = seen.get(label, 0) + 1
            label = f"{label} #{seen[label]}"
        out.append(label)
    return out


#: Highest duration level of the multi-resolution index (2**62 ns is 146 years).
MAX_LEVEL = 62
#: Pseudo-planes of Android tracks: scheduling slices per CPU, and counters.
SCHED_PLANE, COUNTER_PLANE = "sched", "counters"
#: ``cpu_idle`` counts this when a CPU leaves idle (ftrace's (u32)-1); Perfetto shows it as -1.
_IDLE_EXIT = 4294967295


@dataclass(frozen=True)
class Counters:
    """One worker's counter tracks: samples sorted by (track, time)."""

    labels: list[str]
    track: np.ndarray
    t: np.ndarray
    value: np.ndarray

    @classmethod
    def build(cls, counters: pd.DataFrame | None, worker: str) -> Counters:
        if counters is None or counters.empty:
            return cls([], np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0))
        codes, uniques = pd.factorize(counters["name"].astype(str), sort=True)
        t = counters["ts_ns"].to_numpy(dtype=np.int64)
        value = counters["value"].to_numpy(dtype=np.float64)
        idle = np.asarray(uniques.str.startswith("cpu_idle"), dtype=bool)[codes]
        value = np.where(idle & (value == _IDLE_EXIT), -1.0, value)
        order = np.lexsort((t, codes))
        labels = [f"{worker} › {COUNTER_PLANE} › {u}" for u in uniques]
        return cls(labels, codes[order].astype(np.int32), t[order], value[order])


@dataclass(frozen=True)
class TimelineIndex:
    """One worker's events (and scheduling slices, as events of ``sched`` tracks) as flat
    arrays; ``rows`` holds each event's row label of ``events``, or ``-1 - i`` for slice ``i``
    of ``sched``."""

    worker: str
    start: np.ndarray
    end: np.ndarray
    track: np.ndarray
    depth: np.ndarray
    labels: list[str]
    max_depth: np.ndarray
    name: np.ndarray
    names: pd.Index
    category: np.ndarray
    categories: list[str]
    rows: np.ndarray
    counters: Counters
    #: The events the XLA op tables count, by row label, with their instruction
    #: (``hlo_stats.op_events``): what an ``hlo:NAME`` search finds.
    xla_ops: pd.Series | None = None

    @classmethod
    def build(
        cls,
        events: pd.DataFrame,
        worker: str,
        sched: pd.DataFrame | None = None,
        counters: pd.DataFrame | None = None,
        xla_ops: pd.Series | None = None,
    ) -> TimelineIndex:
        """The index of ``events`` (one worker's rows; their index labels are kept in
        ``rows`` for ``event_details``), with the worker's scheduling slices and counters,
        and its XLA ops' events (``xla_ops``)."""
        ev = replace(cls._of_events(events, worker), xla_ops=xla_ops)
        if sched is None or sched.empty:
            return replace(ev, counters=Counters.build(counters, worker))
        return replace(
            _with_sched(ev, sched, worker, Counters.build(counters, worker)), xla_ops=xla_ops
        )

    @classmethod
    def _of_events(cls, events: pd.DataFrame, worker: str) -> TimelineIndex:
        """On the categorical codes (a string per row cost 1.5 s on 1.2 M events)."""
        plane, line = _categorical(events["plane"]), _categorical(events["line"])
        pair = plane.cat.codes.to_numpy(np.int64) * (len(line.cat.categories) + 1)
        pair = pair + line.cat.codes.to_numpy(np.int64)
        codes, uniques = pd.factorize(pair, sort=True)
        p_names = np.asarray(plane.cat.categories.astype(str), dtype=object)
        l_names = np.asarray(line.cat.categories.astype(str), dtype=object)
        pairs = [
            (p_names[u // (len(l_names) + 1)], l_names[u % (len(l_names) + 1)]) for u in uniques
        ]
        labels = _unique([f"{worker} › {short_line(p, ln)}" for p, ln in pairs])
        depth = events["depth"].to_numpy(dtype=np.int64, na_value=0).clip(0, None)
        max_depth = np.zeros(len(uniques), dtype=np.int64)
        np.maximum.at(max_depth, codes, depth)
        name = _categorical(events["name"])
        names = name.cat.categories
        heads = [category_of(str(n)) for n in names] + ["?"]
        op_type = _categorical(events["op_type"])
        ops = [str(o) for o in op_type.cat.categories]
        # a category per (op type, name head): op type where set, else the name's head
        cat_names, cat_of_op = pd.factorize(pd.Index([*ops, *heads]))
        head_code = cat_names[len(ops) :][name.cat.codes.to_numpy()]
        op_code = op_type.cat.codes.to_numpy()
        op_table = np.append(cat_names[: len(ops)], -1)  # code -1: no op type
        category = np.where(op_code >= 0, op_table[op_code], head_code)
        # the categories in use, renumbered in order: counted, not sorted (np.unique's sort
        # of 1.2 M codes took 0.4 s of a Timeline's first load)
        used = np.flatnonzero(np.bincount(category)) if len(category) else category[:0]
        renumber = np.zeros(int(used.max()) + 1 if len(used) else 0, dtype=np.int64)
        renumber[used] = np.arange(len(used))
        category = renumber[category]
        start = events["start_ns"].to_numpy()
        return cls(
            worker=worker,
            start=start,
            end=start + events["dur_ps"].to_numpy() // 1000,
            track=codes.astype(np.int32),
            depth=depth,
            labels=labels,
            max_depth=max_depth,
            name=name.cat.codes.to_numpy(),
            names=names,
            category=category.astype(np.int32),
            categories=[str(c) for c in np.asarray(cat_of_op, dtype=object)[used]],
            rows=events.index.to_numpy(),
            counters=Counters.build(None, worker),
        )

    @cached_property
    def _levels(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The multi-resolution index: events grouped by duration level (``floor(log2(dur))``,
        level 0 for ≤ 1 ns), each level sorted by start. Returns (order: event positions by
        level then start; starts in that order; offsets: where each level begins, 64 + 1)."""
        dur = np.maximum(self.end - self.start, 1)
        level = np.floor(np.log2(dur)).astype(np.int8)
        # Two stable sorts instead of a lexsort (0.3 s on 1.2 M events): by start, a timsort
        # that merges the lines' already sorted runs, then by level, a radix sort of int8.
        by_start = np.argsort(self.start, kind="stable")
        order = by_start[np.argsort(level[by_start], kind="stable")]
        offsets = np.searchsorted(level[order], np.arange(MAX_LEVEL + 2))
        return order, self.start[order], offsets

    def window(self, t0: int, t1: int, min_dur: int = 0, below: bool = False) -> np.ndarray:
        """Positions of the events that overlap [t0, t1) and last at least ``min_dur`` ns (or,
        with ``below``, less than ``min_dur``): per duration level a binary search on start,
        since an event of level ``L`` starts at most ``2**(L+1)`` ns before it overlaps — a
        window of a million-event worker costs what it holds, not a scan of every event."""
        if len(self.start) and t0 < self._span[0] and t1 > self._span[1]:
            # every event overlaps (the whole capture, as a page first shows it): a mask
            # gives them in row order, where the index's parts would have to be sorted
            dur = self.end - self.start
            return np.flatnonzero((dur < min_dur) if below else (dur >= min_dur))
        order, starts, offsets = self._levels
        cut = int(np.floor(np.log2(max(min_dur, 1))))
        levels = range(0, cut + 1) if below else range(cut, MAX_LEVEL + 1)
        parts = []
        for lv in levels:
            a, b = offsets[lv], offsets[lv + 1]
            if a == b:
                continue
            lo = a + np.searchsorted(starts[a:b], t0 - (2 << lv), side="left")
            hi = a + np.searchsorted(starts[a:b], t1, side="left")
            if hi > lo:
                parts.append(order[lo:hi])
        at = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        dur = self.end[at] - self.start[at]
        keep = (self.end[at] > t0) & ((dur < min_dur) if below else (dur >= min_dur))
        return np.sort(at[keep], kind="stable")  # runs sorted within each level: merged

    @cached_property
    def _span(self) -> tuple[int, int]:
        """The first start and the last end."""
        return int(self.start.min()), int(self.end.max())

    def matching(self, text: str) -> np.ndarray:
        """Row mask of events whose name contains ``text``, case-insensitive (tested per
        distinct name); for ``hlo:NAME``, the events an XLA op table counts for instruction
        ``NAME`` exactly (its kernels or TPU ops, not a host thunk of the same name nor
        ``NAME0``): what a table's link shows."""
        if text.startswith(XLA_OP_SEARCH):
            ops = self.xla_ops if self.xla_ops is not None else pd.Series(dtype=object)
            wanted = ops.index[(ops == text.removeprefix(XLA_OP_SEARCH)).to_numpy()]
            return np.isin(self.rows, wanted.to_numpy())
        hit = self.names.str.contains(text, case=False, regex=False)
        return np.append(np.asarray(hit, dtype=bool), False)[self.name]


def _with_sched(
    ev: TimelineIndex, sched: pd.DataFrame, worker: str, counters: Counters
) -> TimelineIndex:
    """``ev`` with one track per CPU of scheduling slices named ``comm [tid]`` and coloured
    by the thread's name head (``kworker``, ``surfaceflinger``). The idle task (tid 0,
    ``swapper``) is left out, as Perfetto draws an idle CPU empty."""
    busy = sched["tid"].to_numpy() != 0
    sched = sched[busy]
    cpu_codes, cpus = pd.factorize(sched["cpu"].to_numpy(), sort=True)
    labels = _unique([*ev.labels, *(f"{worker} › {SCHED_PLANE} › CPU {c}" for c in cpus)])
    slice_names = sched["comm"].astype(str) + " [" + sched["tid"].astype(str) + "]"
    name_codes, slice_uniques = pd.factorize(slice_names)
    names = ev.names.append(pd.Index(slice_uniques.astype(str)))
    comms = sched["comm"].astype(str)
    comm_codes, comm_uniques = pd.factorize(comms)
    heads = np.array([category_of(c) for c in comm_uniques], dtype=object)
    cat = np.concatenate([np.asarray(ev.categories, dtype=object)[ev.category], heads[comm_codes]])
    cat_codes, cat_uniques = pd.factorize(cat)
    start = sched["start_ns"].to_numpy(dtype=np.int64)
    n_ev = len(ev.names)
    return TimelineIndex(
        worker=worker,
        start=np.concatenate([ev.start, start]),
        end=np.concatenate([ev.end, start + sched["dur_ns"].to_numpy(dtype=np.int64)]),
        track=np.concatenate([ev.track, len(ev.labels) + cpu_codes]).astype(np.int32),
        depth=np.concatenate([ev.depth, np.zeros(len(sched), dtype=np.int64)]),
        labels=labels,
        max_depth=np.concatenate([ev.max_depth, np.zeros(len(cpus), dtype=np.int64)]),
        name=np.concatenate([ev.name, n_ev + name_codes]),
        names=names,
        category=cat_codes.astype(np.int32),
        categories=[str(c) for c in cat_uniques],
        rows=np.concatenate([ev.rows, -1 - np.flatnonzero(busy)]),
        counters=counters,
    )


def sched_details(sched: pd.DataFrame, i: int) -> dict[str, object]:
    """Scheduling slice ``i`` of ``sched`` as the timeline's details show it.

    Raises:
        KeyError: no such slice.
    """
    if not 0 <= i < len(sched):
        raise KeyError(i)
    r = sched.iloc[i]
    return {
        "thread": f"{r['comm']} [{r['tid']}]",
        "CPU": int(r["cpu"]),
        "start_ns": int(r["start_ns"]),
        "dur_ps": int(r["dur_ns"]) * 1000,
        "left the CPU": END_STATES.get(str(r["end_state"]), str(r["end_state"])),
    }


#: sched_switch prev_state values as Perfetto names them.
END_STATES = {
    "0": "runnable (preempted)",
    "1": "sleeping (S)",
    "2": "uninterruptible sleep (D)",
    "4": "stopped (T)",
    "8": "traced (t)",
    "16": "exit dead (X)",
    "32": "exit zombie (Z)",
    "64": "task dead (x)",
    "128": "wake kill (K)",
    "256": "waking (W)",
    "R": "runnable (preempted)",
    "R+": "runnable (preempted)",
    "S": "sleeping (S)",
    "D": "uninterruptible sleep (D)",
}


#: Event columns shown for one event, in this order (when set).
DETAIL_COLUMNS = (
    "worker",
    "plane",
    "line",
    "name",
    "start_ns",
    "dur_ps",
    "self_ps",
    "depth",
    "step_num",
    "group_id",
    "tf_op",
    "op_type",
    "is_eager",
)


def event_details(events: pd.DataFrame, stats: pd.DataFrame, row: int) -> dict[str, object]:
    """One event's set columns (``DETAIL_COLUMNS``) and its other stats, by name.

    Args:
        events, stats: a session's ``events`` and ``stats`` frames.
        row: an index label of ``events``.

    Returns:
        ``{column or stat key: value}``; a stat's value is its string, integer or float value,
        whichever is set.

    Raises:
        KeyError: ``row`` is not an event of the session.
    """
    ev = events.loc[row]
    fields: dict[str, object] = {k: ev[k] for k in DETAIL_COLUMNS if pd.notna(ev[k])}
    for s in stats[stats["event_row"] == row].itertuples():
        fields[str(s.key)] = next(
            (v for v in (s.str_value, s.int_value, s.float_value) if pd.notna(v)), ""
        )
    return fields
