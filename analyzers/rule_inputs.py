"""What the diagnostics rules read of a session's events, reduced per worker.

No rule reads the events frame: each reads these small frames (beside the op tables, steps,
breakdown and memory timeline). Each is computed from one worker's events at a time and the
workers' frames concatenate exactly (every function groups by worker first); the two that
count per step are computed over a worker's *own* steps and then cut to the steps every worker
has (``per_aligned_step``, ``first_starts_per_aligned_step``), so a session analysed per worker
(``analyzers.execution``) is diagnosed without its events ever reaching the driver, and equals the
whole-session analysis.

    >>> rule_events(frames.events)                    # eager, iterator, compile, copy, all-reduce
    >>> op_summary(op_events(frames.events))          # per op: executions, tiny ones, time
    >>> per_aligned_step(op_counts(events, steps), aligned)   # = ops_per_step(events, aligned)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from podscope.analyzers._match import group_ids, isin, matches, worker_time_keys
from podscope.analyzers.lines import DERIVED_LINES

#: An op execution shorter than this is tiny (the ``tiny_ops`` rule's short-op share).
TINY_OP_PS = 20_000_000
EAGER_OP = r"EagerLocalExecute: (?!__inference)"
COMPILE = r"(?i)(?:xlacompile|compile_ondemand|compilation|__inference.*compile)"
COPY = r"(?i)memcpy(?:HtoD|DtoH|H2D|D2H)"
ALLREDUCE = r"(?i)^nccl.*all-?reduce|all-?reduce"
DEVICE_PLANE = "/device:(?:GPU|TPU)"


def rule_events(events: pd.DataFrame) -> pd.DataFrame:
    """The events rules pick by name: eager dispatches (``EagerLocalExecute``),
    ``IteratorGetNext`` and ``Iterator::`` (tf.data), compilations, and on GPU/TPU planes the
    host↔device copies and all-reduces.

    Returns:
        Columns ``worker, plane, name, start_ns, dur_ps``, in event order.
    """
    name = events["name"]
    device = matches(events["plane"], DEVICE_PLANE, how="match")
    keep = (
        matches(name, EAGER_OP, how="match")
        | matches(name, "IteratorGetNext", how="startswith")
        | matches(name, "Iterator::", how="startswith")
        | (matches(name, COMPILE) & ~matches(name, "$", how="startswith"))
        | (device & (matches(name, COPY) | matches(name, ALLREDUCE)))
    )
    cols = ["worker", "plane", "name", "start_ns", "dur_ps"]
    return events.loc[keep, cols].reset_index(drop=True)


def worker_events(events: pd.DataFrame) -> pd.DataFrame:
    """Per worker: events, those not from the Python tracer, and TF ops on the host (XLA
    launches aside): what tells a Python-traced worker and a JAX capture.

    Returns:
        Columns ``worker, events, traced, host_tf_ops`` (one row per worker with events).
    """
    python = matches(events["name"], "$", how="startswith")
    host = ~matches(events["plane"], "/device:", how="startswith")
    tf_op = ~isin(events["op_type"], {"XlaModule"}) & events["op_type"].notna().to_numpy() & host
    worker = events["worker"].astype("category")
    codes = worker.cat.codes.to_numpy()
    has = codes >= 0
    codes, n = codes[has], len(worker.cat.categories)
    out = pd.DataFrame(  # counts per worker code, in the categories' order, as a groupby's
        {
            "worker": worker.cat.categories.astype(str),
            "events": np.bincount(codes, minlength=n),
            "traced": np.bincount(codes, ~python[has], n).astype(np.int64),
            "host_tf_ops": np.bincount(codes, tf_op[has], n).astype(np.int64),
        }
    )
    return out[out["events"] > 0].reset_index(drop=True)


def _union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of the intervals ``[start, end)`` (nanoseconds)."""
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.concatenate(([True], start[1:] > reach[:-1]))
    seg = np.cumsum(new) - 1
    seg_start = start[new]
    seg_end = np.zeros(len(seg_start), dtype=np.int64)
    np.maximum.at(seg_end, seg, end)
    return int((seg_end - seg_start).sum())


def device_busy(events: pd.DataFrame) -> pd.DataFrame:
    """Per worker × GPU/TPU plane: its events and the time some work ran on it (the union of
    its work events' intervals), whatever the steps say: a device is idle when it ran nothing.

    Work events are those on the device's own lines (kernel and copy streams); lines that
    repeat them (``DERIVED_LINES``: TF ops, name scopes, steps) are left out, except that a
    TPU's ops live on its ``XLA Ops`` line, which counts where the plane has no other.

    Returns:
        Columns ``worker, device, events, busy_ns, first_ns, last_ns``.
    """
    cols = ["worker", "device", "events", "busy_ns", "first_ns", "last_ns"]
    dev = events[matches(events["plane"], DEVICE_PLANE, how="match")]
    rows = []
    for (worker, plane), g in dev.groupby(["worker", "plane"], observed=True, sort=True):
        work = g[~isin(g["line"], DERIVED_LINES)]
        if work.empty:
            work = g[isin(g["line"], {"XLA Ops"})]
        if work.empty:
            continue
        start = work["start_ns"].to_numpy(dtype=np.int64)
        end = start + work["dur_ps"].to_numpy(dtype=np.int64) // 1000
        rows.append(
            (str(worker), str(plane), len(work), _union_ns(start, end), start.min(), end.max())
        )
    out = pd.DataFrame(rows, columns=cols)
    return out.astype(
        {"events": "int64", "busy_ns": "int64", "first_ns": "int64", "last_ns": "int64"}
    )


def op_summary(ops: pd.DataFrame) -> pd.DataFrame:
    """Op executions (``analyzers.ops.op_events``) per worker, host or device, op type and name,
    and eager flag: executions, tiny executions (``TINY_OP_PS``), time and self time.

    Returns:
        Columns ``worker, on_device, op_type, op_name, eager, n, n_tiny, dur_ps, self_ps``.
    """
    keys = ["worker", "on_device", "op_type", "op_name", "eager"]
    frame = pd.DataFrame(
        {  # keys stay categorical while grouping: one string per category, not per row
            "worker": ops["worker"].astype("category").array,
            "on_device": matches(ops["plane"], "/device:", how="startswith"),
            "op_type": ops["op_type"].astype("category").array,
            "op_name": ops["op_name"].astype("category").array,
            "eager": ops["is_eager"].to_numpy(dtype=bool, na_value=False),
            "n_tiny": (ops["dur_ps"] < TINY_OP_PS).to_numpy(),
            "dur_ps": ops["dur_ps"].to_numpy(dtype=np.float64),
            "self_ps": ops["op_self_ps"].to_numpy(dtype=np.float64),
        }
    )
    # One int64 key per row and sums by bincount: pandas' groupby on five keys was 90 ms of a
    # 64-host batch. The sums are of whole picoseconds, exact in float64 in any order.
    gid, first = group_ids(frame, keys)
    out = frame[keys].iloc[first].reset_index(drop=True)
    out["n"] = np.bincount(gid, minlength=len(first))
    out["n_tiny"] = np.bincount(gid, frame["n_tiny"].to_numpy(), len(first)).astype(np.int64)
    for col in ("dur_ps", "self_ps"):
        out[col] = np.bincount(gid, frame[col].to_numpy(), len(first)).astype(np.float64)
    for col in ("worker", "op_type", "op_name"):
        out[col] = out[col].astype(object).fillna("").astype(str)
    # in the names' order, not the categories' (a file's first appearances): one worker's
    # rows are the same whichever workers were parsed with it
    return out.sort_values(keys, ignore_index=True)


def _step_of(starts: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the step (by sorted ``starts``) each time falls after, -1 before the first."""
    return np.searchsorted(starts, t, side="right") - 1


def op_counts(ops: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Op executions (and their self time) that start inside each step, per worker, step and
    op type; tf.data work (type ``Dataset`` or on ``tf_data`` threads) excluded: it runs
    beside the step.

    Args:
        ops: ``analyzers.ops.op_events`` of the events.
        steps: steps with ``worker, start_ns, end_ns`` (a worker's own, or aligned).

    Returns:
        Columns ``worker, step_start_ns, op_type, count, self_ps``.
    """
    ops = ops[["worker", "op_type", "start_ns", "op_self_ps"]][
        ~isin(ops["op_type"], {"Dataset"}) & ~matches(ops["line"], "tf_data", how="startswith")
    ]  # the columns read below: a copy of every op column cost 60 ms on 1.2 M events
    cols = ["worker", "step_start_ns", "op_type", "count", "self_ps"]
    workers = pd.Index(sorted(steps["worker"].astype(str).unique()))
    if ops.empty or not len(workers):
        return pd.DataFrame(columns=cols)
    # Every worker at once: steps by (worker, start), each op in the last step of its worker
    # that starts by it (a pass per worker cost 8 ms each of a batch of 64).
    st_worker = workers.get_indexer(steps["worker"].astype(str))
    order = np.lexsort((steps["start_ns"].to_numpy(), st_worker))
    st_worker = st_worker[order]
    starts = steps["start_ns"].to_numpy(np.int64)[order]
    ends = steps["end_ns"].to_numpy(np.int64)[order]
    by = ops["worker"].astype("category")
    op_worker = np.append(workers.get_indexer(by.cat.categories.astype(str)), -1)[
        by.cat.codes.to_numpy()
    ]
    t = ops["start_ns"].to_numpy(np.int64)
    op_key, step_key = worker_time_keys(op_worker, t, st_worker, starts)
    k = np.searchsorted(step_key, op_key, side="right") - 1
    j = np.clip(k, 0, None)
    inside = (op_worker >= 0) & (k >= 0) & (st_worker[j] == op_worker) & (t < ends[j])
    type_col = ops["op_type"].astype("category")
    types = np.append(type_col.cat.categories.astype(str).to_numpy(dtype=object), "nan")
    code = type_col.cat.codes.to_numpy().astype(np.int64)[inside]
    # (step, op type) as one integer, counted: rows in (step, type) order
    key = k[inside] * len(types) + code + 1
    count = np.bincount(key)
    cells = np.flatnonzero(count)
    if not len(cells):
        return pd.DataFrame(columns=cols)
    step = cells // len(types)
    out = pd.DataFrame(
        {
            "worker": workers[st_worker[step]],
            "step_start_ns": starts[step],
            "op_type": types[cells % len(types) - 1],
            "count": count[cells],
            "self_ps": np.bincount(
                key, weights=ops["op_self_ps"].to_numpy(dtype=np.float64)[inside]
            )[cells],
        }
    )
    return out.sort_values(cols[:3], ignore_index=True)


def per_aligned_step(counts: pd.DataFrame, aligned: pd.DataFrame) -> pd.DataFrame:
    """Mean executions per aligned step, per worker and op type, from ``op_counts`` over a
    worker's own steps (the aligned steps are some of them, with the same bounds).

    Returns:
        Columns ``worker, op_type, per_step``, highest first per worker.
    """
    cols = ["worker", "op_type", "per_step"]
    if aligned.empty or counts.empty:
        return pd.DataFrame(columns=cols)
    keys = aligned[["worker", "start_ns"]].astype({"worker": str})
    n_steps = keys.groupby("worker").size()
    kept = counts.merge(
        keys.rename(columns={"start_ns": "step_start_ns"}), on=["worker", "step_start_ns"]
    )
    out = kept.groupby(["worker", "op_type"], sort=True)["count"].sum().reset_index()
    out["per_step"] = (out["count"] / out["worker"].map(n_steps)).astype(float)
    return out[cols].sort_values(["worker", "per_step"], ascending=[True, False], ignore_index=True)


def first_device_starts(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per worker, step and GPU/TPU plane: the first device event that starts in the step
    (from its start to the next step's start), and how long the device had been idle before
    it (since the end of its previous event: a device that waits for the host to dispatch
    its step has been idle; one still busy with earlier work has not).

    Returns:
        Columns ``worker, step_start_ns, plane, first_ns, idle_before_ns``.
    """
    device = events[matches(events["plane"], DEVICE_PLANE, how="match")]
    worker = device["worker"].astype(str).to_numpy()
    plane = device["plane"].astype(str).to_numpy()
    start = device["start_ns"].to_numpy(np.int64)
    end = start + device["dur_ps"].to_numpy(np.int64) // 1000
    # Per device, in time order: how far its busy time reached before each event.
    key = pd.factorize(pd.Series(worker) + "\0" + pd.Series(plane))[0]
    order = np.lexsort((start, key))
    reach = pd.Series(end[order]).groupby(key[order]).cummax()
    prev = reach.groupby(key[order]).shift(1).fillna(pd.Series(start[order])).to_numpy(np.int64)
    idle = np.empty(len(device), dtype=np.int64)
    idle[order] = np.maximum(start[order] - prev, 0)
    parts = []
    for w, st in steps.groupby(steps["worker"].astype(str)):
        starts = np.sort(st["start_ns"].to_numpy())
        mine = worker == w
        t = start[mine]
        k = _step_of(starts, t)
        ok = k >= 0
        if not ok.any():
            continue
        parts.append(
            pd.DataFrame(
                {
                    "worker": w,
                    "step_start_ns": starts[k[ok]],
                    "plane": plane[mine][ok],
                    "first_ns": t[ok],
                    "idle_before_ns": idle[mine][ok],
                }
            )
        )
    return _first_per_step(parts)


def first_starts_per_aligned_step(firsts: pd.DataFrame, aligned: pd.DataFrame) -> pd.DataFrame:
    """``first_device_starts`` over a worker's own steps → over the aligned steps: a step left
    out of the alignment belongs to the aligned step before it, as its events would. Every
    worker's rows in one search, on keys of (worker, ranked time): a search per worker was
    3.7 s of a 1,024-host GPU pod's diagnostics."""
    workers = pd.Index(sorted(aligned["worker"].astype(str).unique()))
    if firsts.empty or workers.empty:
        return _first_per_step([])
    step_worker = workers.get_indexer(aligned["worker"].astype(str))
    starts = aligned["start_ns"].to_numpy(np.int64)
    order = np.lexsort((starts, step_worker))
    step_worker, starts = step_worker[order], starts[order]
    worker = workers.get_indexer(firsts["worker"].astype(str))  # -1: not aligned, left out
    t = firsts["step_start_ns"].to_numpy(np.int64)
    key, step_key = worker_time_keys(worker, t, step_worker, starts)
    k = np.searchsorted(step_key, key, side="right") - 1
    j = np.clip(k, 0, None)
    ok = (worker >= 0) & (k >= 0) & (step_worker[j] == worker)
    if not ok.any():
        return _first_per_step([])
    return _first_per_step([firsts[ok].assign(step_start_ns=starts[j[ok]])])


def _first_per_step(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The earliest event per (worker, step, plane), with its idle time before it."""
    cols = ["worker", "step_start_ns", "plane", "first_ns", "idle_before_ns"]
    if not parts:
        return pd.DataFrame(columns=cols)
    both = pd.concat(parts, ignore_index=True)
    if "idle_before_ns" not in both:  # shards written before the column existed
        both["idle_before_ns"] = np.int64(0)
    both = both.sort_values(["worker", "step_start_ns", "plane", "first_ns"], kind="stable")
    return both.drop_duplicates(cols[:3]).reset_index(drop=True)[cols]


#: Host calls that wait for the GPU: a tensor's value fetched (``.item()``, ``.tolist()``,
#: ``.cpu()`` of a scalar: ``aten::_local_scalar_dense``), a stream, event or device
#: synchronize, a synchronous copy.
HOST_SYNC = (
    r"aten::_local_scalar_dense$|(?:cuda|hip)(?:Stream|Device|Event)Synchronize$|"
    r"(?:cuda|hip)Memcpy$"
)


def host_syncs(events: pd.DataFrame) -> pd.DataFrame:
    """Per host sync (``HOST_SYNC``) of each worker: when it returned, and how long its GPUs then
    ran nothing (from its end to the next work event on any of the worker's GPUs, where none
    was running at its end; 0 where one was).

    Returns:
        Columns ``worker, name, start_ns, dur_ns, idle_after_ns``.
    """
    cols = ["worker", "name", "start_ns", "dur_ns", "idle_after_ns"]
    host = ~matches(events["plane"], "/device:", how="startswith")
    syncs = events[host & matches(events["name"], HOST_SYNC, how="match")]
    if syncs.empty:
        return pd.DataFrame(
            {c: pd.Series(dtype=str if c in ("worker", "name") else "int64") for c in cols}
        )
    # work: not the lines that repeat it, nor a PyTorch GPU's user annotations (spans of a
    # stream's time, not work: ``trace_parsers.kineto``)
    device = (
        matches(events["plane"], DEVICE_PLANE, how="match")
        & ~isin(events["line"], DERIVED_LINES)
        & ~matches(events["line"], " annotations$")
    )
    work = events[device]
    out = []
    for worker, mine in syncs.groupby("worker", observed=True, sort=True):
        w = work[work["worker"] == worker]
        start = w["start_ns"].to_numpy(np.int64)
        order = np.argsort(start, kind="stable")
        start = start[order]
        end = start + w["dur_ps"].to_numpy(np.int64)[order] // 1000
        reach = np.maximum.accumulate(end) if len(end) else end
        s = mine["start_ns"].to_numpy(np.int64)
        e = s + mine["dur_ps"].to_numpy(np.int64) // 1000
        i = np.searchsorted(start, e, side="left")  # the first work starting at or after it
        before = i - 1
        running = (before >= 0) & (reach[np.clip(before, 0, None)] > e) if len(end) else i < 0
        nxt = np.where(i < len(start), start[np.clip(i, 0, len(start) - 1)] if len(start) else 0, e)
        idle = np.where(running | (i >= len(start)), 0, nxt - e)
        out.append(
            pd.DataFrame(
                {
                    "worker": str(worker),
                    "name": mine["name"].astype(str).to_numpy(),
                    "start_ns": s,
                    "dur_ns": e - s,
                    "idle_after_ns": idle.astype(np.int64),
                }
            )
        )
    return pd.concat(out, ignore_index=True)[cols]
