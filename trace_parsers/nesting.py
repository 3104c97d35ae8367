"""Nesting of events on one timeline: depth, parent row and self time; and, of overlapping
typed events, which type is on top at each instant (``top_type_times``).

>>> import numpy as np
>>> from podscope.trace_parsers.nesting import nest_columns
>>> depth, parent, self_t = nest_columns(np.zeros(2, np.int64), np.array([0, 2]), np.array([10, 5]))
>>> depth.tolist(), parent.tolist(), self_t.tolist()
([0, 1], [-1, 0], [7, 3])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from podscope.trace_parsers import compiled

if TYPE_CHECKING:  # the frame helpers' callers have pandas loaded; the column kernels need none
    import pandas as pd

try:
    from podscope.trace_parsers import _column_kernels
except ImportError as e:  # installed without a C compiler
    _column_kernels = compiled.missing(e)


def nest_columns(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, parent_dtype: type = np.int64
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Depth, parent row and self time of events sorted by (group, start, end descending).

    A child is clipped to its parent, so partial overlaps never make a self time negative; the
    parent's self time is its duration minus the union of its direct children. Runs in C (one
    stack pass); this is the parser's one unavoidable sequential loop.

    Args:
        group: timeline key per event (e.g. line index); events of a group are contiguous.
        start, end: integer times in one unit.

    Returns:
        ``(depth int32, parent (-1 = top level; int64 unless ``parent_dtype``), self int64)``,
        in the input's order.

    Raises:
        ValueError: the rows are not in that order.
    """
    out = nest_if_sorted(group, start, end, parent_dtype)
    if out is None:
        raise ValueError("nest_columns: rows are not ordered by (group, start, end descending)")
    return out


def nest_if_sorted(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, parent_dtype: type = np.int64
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``nest_columns`` that checks the order in the same pass: None when the rows are not
    ordered by (group, start, end descending), so callers sort only when they must.
    ``group`` may be int32 or int64; ``parent_dtype`` is int32 or int64."""
    n = len(start)
    g = np.ascontiguousarray(group, dtype=np.int32 if group.dtype == np.int32 else np.int64)
    s = np.ascontiguousarray(start, dtype=np.int64)
    e = np.ascontiguousarray(end, dtype=np.int64)
    depth = np.empty(n, dtype=np.int32)
    parent: np.ndarray = np.empty(n, dtype=parent_dtype)
    self_t = np.empty(n, dtype=np.int64)
    if not _column_kernels.nest(g, s, e, depth, parent, self_t):
        return None
    return depth, parent, self_t


def nest_events(events: pd.DataFrame) -> pd.DataFrame:
    """Nesting among the given events only, e.g. TF ops without the runtime events around them.

    Args:
        events: rows of an ``events`` frame (columns ``worker``, ``plane``, ``line_id``,
            ``start_ns``, ``dur_ps``), any order.

    Returns:
        A frame on the same index with ``depth``, ``parent`` (an index label of ``events``, or
        -1) and ``self_ps`` computed as if only these events existed.
    """
    return _nested(events, _in_order(events))


_InOrder = tuple[np.ndarray | None, np.ndarray, np.ndarray, tuple[np.ndarray, ...] | None]


def _in_order(events: pd.DataFrame) -> _InOrder:
    """Timeline ids (None if the rows of a line are not contiguous), start and end in ps from
    the first start, and the nesting when the rows are already in timeline order (as a parsed
    frame's rows, and subsets of them, usually are), else None."""
    group = _line_runs(events)
    start_ps = (
        events["start_ns"].to_numpy() - (events["start_ns"].min() if len(events) else 0)
    ) * 1000
    end_ps = start_ps + events["dur_ps"].to_numpy()
    nested = None if group is None else nest_if_sorted(group, start_ps, end_ps)
    return group, start_ps, end_ps, nested


def _nested(events: pd.DataFrame, pre: _InOrder) -> pd.DataFrame:
    """``nest_events`` from ``_in_order(events)``: sorted into timeline order only if needed."""
    import pandas as pd

    group, start_ps, end_ps, nested = pre
    labels = events.index.to_numpy()
    if nested is not None:
        depth, parent, self_t = nested
        parent_label = np.where(parent >= 0, labels[np.maximum(parent, 0)], -1)
        return pd.DataFrame(
            {"depth": depth, "parent": parent_label, "self_ps": self_t}, index=events.index
        )
    if group is None:
        group = (
            events.groupby(["worker", "plane", "line_id"], observed=True, sort=False)
            .ngroup()
            .to_numpy()
        )
    order = np.lexsort((-end_ps, start_ps, group))
    depth, parent, self_t = nest_columns(group[order], start_ps[order], end_ps[order])
    # Back to the input's order by position (scatter through ``order``), not by label lookup.
    out = {
        "depth": np.empty_like(depth),
        "parent": np.empty(len(order), dtype=np.result_type(labels.dtype, np.int64)),
        "self_ps": np.empty_like(self_t),
    }
    out["depth"][order] = depth
    out["parent"][order] = np.where(parent >= 0, labels[order[np.maximum(parent, 0)]], -1)
    out["self_ps"][order] = self_t
    return pd.DataFrame(out, index=events.index)


def self_times(events: pd.DataFrame) -> np.ndarray:
    """``nest_events(events)["self_ps"]`` without the depth and parent labels, for callers
    that read only self time (the op tables)."""
    pre = _in_order(events)
    nested = pre[3]
    return nested[2] if nested is not None else _nested(events, pre)["self_ps"].to_numpy()


def _line_runs(events: pd.DataFrame) -> np.ndarray | None:
    """Timeline id per row when the rows of each (worker, plane, line_id) are contiguous (as
    in a parsed frame), else None. Found from row-to-row changes: no hashing of the rows."""
    import pandas as pd

    n = len(events)
    if not n:
        return np.zeros(0, dtype=np.int64)
    keys = [
        events[c].cat.codes.to_numpy()
        if isinstance(events[c].dtype, pd.CategoricalDtype)
        else pd.factorize(events[c])[0]
        for c in ("worker", "plane", "line_id")
    ]
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    first = np.flatnonzero(change)
    if pd.DataFrame({i: k[first] for i, k in enumerate(keys)}).duplicated().any():
        return None  # a timeline comes back after another one: not contiguous
    runs = np.cumsum(change, dtype=np.int32)  # int32: a frame holds < 2**31 rows (schema)
    runs -= 1
    return runs


def depth_column(depth: np.ndarray) -> np.ndarray:
    """The schema's int16 ``depth``, saturated at 32,767 rather than wrapped negative (a crafted
    trace can nest deeper; no real one comes close)."""
    return np.minimum(depth, np.iinfo(np.int16).max).astype(np.int16)


def top_type_times(
    start: np.ndarray,
    end: np.ndarray,
    types: np.ndarray,
    n_types: int,
    span_start: np.ndarray,
    span_end: np.ndarray,
) -> np.ndarray:
    """ns per (span, type): at each instant of each span, the highest type among the events
    active then ([start, end)); type 0 where none is. Spans are sorted and do not overlap.

    The events' starts and ends are sorted once as ``(time << bits) | type`` keys and merged
    in C (``_column_kernels.sweep``) with the span bounds: two sorts and one pass, where a
    ``searchsorted`` per type over every bound took 0.4 s on 1.2 M events. The sorts are
    timsorts: a parsed frame's events come in runs sorted by start (one per line), which it
    merges (4-8 ms on 1.2 M events where quicksort took 66 ms).

    Returns:
        int64 array, spans x ``n_types``.

    Raises:
        ValueError: the times span more than 2^57 ns (four years: not one capture).
    """
    bits = max(int(n_types - 1).bit_length(), 1)
    if not len(span_start):
        return np.zeros((0, n_types), dtype=np.int64)
    t0 = min(int(span_start.min()), int(start.min()) if len(start) else int(span_start.min()))
    t1 = max(int(span_end.max()), int(end.max()) if len(end) else int(span_end.max()))
    if t1 - t0 >= 1 << (62 - bits):
        raise ValueError(f"a time span of {t1 - t0} ns is not a capture's")
    kind = types.astype(np.int64)
    starts = np.sort(((start - t0) << bits) | kind, kind="stable")
    ends = np.sort(((end - t0) << bits) | kind, kind="stable")
    out = np.zeros((len(span_start), 1 << bits), dtype=np.int64)
    _column_kernels.sweep(
        starts,
        ends,
        np.ascontiguousarray(span_start - t0, dtype=np.int64),
        np.ascontiguousarray(span_end - t0, dtype=np.int64),
        np.sort(span_end - t0).astype(np.int64),
        bits,
        out,
    )
    return out[:, :n_types]
