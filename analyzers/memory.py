"""Memory across workers: per worker and allocator the peak, what was live at the peak, the
fragmentation then, and whether the heap grows step after step (a leak).

    >>> tl = memory_timeline(frames.events, frames.stats)    # analyzers.ops
    >>> memory_summary(tl, aligned)                          # one row per worker × allocator
    >>> live_at_peak(tl, "w0", "GPU_0_bfc")                  # the allocations live at the peak

Peak and fragmentation are XProf's ``memory_profile`` ``peakStats``: the largest bytes in use
(heap allocated + stack reserved) after an allocator event in the capture, and the
allocator's fragmentation reported with that event. Where several events reach the peak,
XProf keeps the last it reads (``>=``, line by line, each line's events in order), not the
first or the last in time: so does ``peak_position``. Live allocations at the peak are the
blocks allocated and not yet freed then (by address), with the op, shape and dtype that TF's
allocator events carry.

Growth: the bytes in use at the end of each aligned step. A leak is a heap that rises in at
least ``rising`` of the steps while allocations outnumber deallocations in as many, by more
than ``min_growth`` of the peak over the capture.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: TF's DataType enum (tensorflow/core/framework/types.proto), the names XProf shows.
DTYPES = {
    0: "INVALID",
    1: "float",
    2: "double",
    3: "int32",
    4: "uint8",
    5: "int16",
    6: "int8",
    7: "string",
    8: "complex64",
    9: "int64",
    10: "bool",
    14: "bfloat16",
    17: "uint16",
    18: "complex128",
    19: "half",
    20: "resource",
    21: "variant",
    22: "uint32",
    23: "uint64",
}
SUMMARY_COLUMNS = [
    "worker",
    "allocator",
    "peak_bytes",
    "peak_t_ns",
    "fragmentation_at_peak",
    "live_at_peak",
    "live_bytes",
    "top_live",
    "steps",
    "growth_bytes_per_step",
    "rising_share",
    "net_allocs_share",
    "leak",
]


def peak_position(g: pd.DataFrame) -> int:
    """Where in ``g`` (one allocator's events, in time order, with bytes in use) XProf's peak
    is: of the events at the highest bytes in use, the last in file order (``seq``)."""
    used = g["bytes_in_use"].astype(float).to_numpy()
    at = np.flatnonzero(used == used.max())
    return int(at[np.argmax(g["seq"].to_numpy()[at])])


def live_at_peak(timeline: pd.DataFrame, worker: str, allocator: str) -> pd.DataFrame:
    """The blocks live at the allocator's peak: allocated at or before it and not freed since.

    Returns:
        Columns ``tf_op, shape, dtype, region_type, requested_bytes, allocation_bytes,
        t_ns``, largest first; empty without address stats.
    """
    g = timeline[(timeline["worker"] == worker) & (timeline["allocator"] == allocator)]
    g = g.dropna(subset=["bytes_in_use"])
    cols = ["tf_op", "shape", "dtype", "region_type", "requested_bytes", "allocation_bytes", "t_ns"]
    if g.empty or g["addr"].isna().all():
        return pd.DataFrame(columns=cols)
    upto = g.iloc[: peak_position(g) + 1]
    last = upto.drop_duplicates("addr", keep="last")
    live = last[last["event"] == "MemoryAllocation"].copy()
    live["dtype"] = live["data_type"].map(
        lambda v: DTYPES.get(int(v), str(v)) if pd.notna(v) else ""
    )
    live = live.sort_values("allocation_bytes", ascending=False, ignore_index=True)
    return live[cols]


def _per_step(g: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step of this worker: bytes in use at its end, and the allocations and deallocations
    since the previous step's end (work between steps counts: a leak often lives there)."""
    st = steps.sort_values("start_ns")
    t = g["t_ns"].to_numpy()
    end = np.searchsorted(t, st["end_ns"].to_numpy(), side="right") - 1
    stop = end + 1
    start = np.concatenate(([np.searchsorted(t, st["start_ns"].iloc[0], side="left")], stop[:-1]))
    used = g["bytes_in_use"].astype(float).to_numpy()
    is_alloc = (g["event"] == "MemoryAllocation").to_numpy()
    n_alloc = np.concatenate(([0], np.cumsum(is_alloc)))
    n_free = np.concatenate(([0], np.cumsum(~is_alloc)))
    return pd.DataFrame(
        {
            "in_use": np.where(end >= 0, used[np.clip(end, 0, None)], np.nan),
            "allocs": n_alloc[stop] - n_alloc[start],
            "frees": n_free[stop] - n_free[start],
        }
    )


#: Steps per run over which allocations and deallocations are counted.
NET_RUN_STEPS = 4


def _net_allocs_share(allocs: np.ndarray, frees: np.ndarray) -> float:
    """Share of runs of ``NET_RUN_STEPS`` consecutive steps with more allocations than frees.
    Counted per run, not per step: on a loaded machine a step's temporaries are often freed in
    the next step, so a leak of one block per step read as 1 more allocation in only 75 % of
    its steps (-1, 0 or +3 in the others; measured on a memory-leak engine run at 16 ms/step)."""
    net = np.asarray(allocs, dtype=np.int64) - np.asarray(frees, dtype=np.int64)
    k = min(NET_RUN_STEPS, len(net))
    runs = np.convolve(net, np.ones(k, dtype=np.int64), mode="valid")
    return float((runs > 0).mean())


def memory_summary(
    timeline: pd.DataFrame,
    aligned: pd.DataFrame,
    rising: float = 0.8,
    min_growth: float = 0.05,
) -> pd.DataFrame:
    """Per worker and allocator: peak, fragmentation then, live blocks at the peak (count and
    the largest by op), and growth across the aligned steps.

    Args:
        timeline: ``analyzers.ops.memory_timeline`` output.
        aligned: each worker's steps (``worker, start_ns, end_ns``): its own steps
            (``analyzers.steps.find_steps``), or the aligned ones.
        rising: share of steps whose heap rose (and of runs of steps whose allocations
            outnumbered their deallocations, ``_net_allocs_share``) that makes a leak.
        min_growth: growth over the capture, as a share of the peak, that a leak must reach.

    Returns:
        Columns ``SUMMARY_COLUMNS``: ``live_bytes`` is what the live blocks the capture saw
        allocated add up to (the rest of the peak was allocated before the capture);
        ``top_live`` the live blocks by op, shape and dtype, largest first; growth columns
        missing without steps.
    """
    rows = []
    for (worker, allocator), g in timeline.groupby(["worker", "allocator"], sort=True):
        g = g.dropna(subset=["bytes_in_use"]).sort_values("t_ns", kind="stable")
        if g.empty:
            continue
        at = g.iloc[peak_position(g)]
        live = live_at_peak(g, str(worker), str(allocator))
        by_op = (
            live.assign(
                tf_op=live["tf_op"].where(live["tf_op"].fillna("") != "", "(no op)"),
                shape=live["shape"].fillna(""),
            )
            .groupby(["tf_op", "shape", "dtype"], sort=False)["allocation_bytes"]
            .agg(["size", "sum"])
            .sort_values("sum", ascending=False)
        )
        named = ", ".join(
            " ".join(x for x in (op, shape, "" if dtype == "INVALID" else dtype) if x)
            + f" ×{n} {int(b):,} B"
            for (op, shape, dtype), n, b in zip(
                by_op.index, by_op["size"], by_op["sum"], strict=True
            )
        )
        steps = aligned[aligned["worker"].astype(str) == str(worker)]
        growth = rise = net = np.nan
        leak = False
        if len(steps) >= 3:
            ps = _per_step(g, steps).dropna(subset=["in_use"])
            if len(ps) >= 3:
                growth = float(np.polyfit(np.arange(len(ps)), ps["in_use"].to_numpy(), 1)[0])
                rise = float((np.diff(ps["in_use"].to_numpy()) > 0).mean())
                net = _net_allocs_share(ps["allocs"].to_numpy(), ps["frees"].to_numpy())
                total = growth * (len(ps) - 1)
                peak = float(at["bytes_in_use"])
                leak = bool(rise >= rising and net >= rising and total >= min_growth * peak)
        rows.append(
            (
                str(worker),
                str(allocator),
                int(at["bytes_in_use"]),
                int(at["t_ns"]),
                float(at["fragmentation"]) if pd.notna(at["fragmentation"]) else np.nan,
                len(live),
                int(live["allocation_bytes"].sum()) if len(live) else 0,
                named,
                len(steps),
                growth,
                rise,
                net,
                leak,
            )
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
