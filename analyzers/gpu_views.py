"""Holistic Trace Analysis' numbers for PyTorch ranks, from PodScope's frames.

PyTorch users read their ``torch.profiler`` traces with Holistic Trace Analysis (HTA,
``traceinsight`` on the package index). These views give HTA's numbers by HTA's definitions,
named as HTA names them (with ``_us`` / ``_pctg`` for ``(us)`` / percentages), so a number
here and in a user's notebook agree (the tests compare every view with HTA 0.6.1 on real
traces):

* **What HTA reads of a rank.** Every timed event, with its ``args.stream`` (-1: none) and
  ``args.correlation`` (-1: none). Times are whole µs: in a trace with fractional times HTA
  moves each start up and each end down to a whole µs. HTA then keeps only the iterations the
  profiler traced whole: the CPU events that start before the last ``ProfilerStep#N``, and the
  GPU events (a stream and a correlation, or an ``Event Sync`` / ``Context Sync``) launched by
  one of them (matched by correlation id). The views read the events with a stream.
* **Kernel types** by name, as HTA's ``get_kernel_type``: COMMUNICATION (``nccl…``, ``hip…``,
  ``hccl…``, ``…ncclKernel…``), MEMORY (``Memcpy…``, ``Memset…``, ``dma…``), COMPUTATION
  (anything but syncs, copies, launches and collectives), else OTHER.
* ``temporal``: per rank, ``kernel_time_us`` from the first event's start to the last one's
  end; ``idle_time_us`` the part no event covers; ``compute_time_us`` the union of the
  COMPUTATION kernels; ``non_compute_time_us`` the rest; each as a percentage of the kernel
  time (two decimals).
* ``overlap``: per rank, the share of the union of COMMUNICATION kernels' time that a
  COMPUTATION kernel overlaps (``comp_comm_overlap_pctg``; empty without communication).
* ``kernel-types``: over every rank, the time each kernel type runs alone and each set of
  types runs together (``COMPUTATION overlapping COMMUNICATION``…), summed, and its
  percentage of them all (one decimal).
* ``kernels``: per rank and kernel type, the kernels by total time, each with its sum, max,
  min, mean and standard deviation; past the tenth kernel, or the 80th percentile of the
  cumulative time, they are summed as ``others`` (whose statistics are over those sums, as
  HTA's are).

    >>> from podscope.analyzers.gpu_views import gpu_view
    >>> gpu_view(frames, "temporal")
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from podscope.trace_parsers.schema import HOST_PLANE, KINETO_MARK, TraceFrames

_COMMUNICATION = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
_MEMORY = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
_NOT_COMPUTE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)"
    r"|(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)"
    r"|(^collective_subgraph_execution)"
)
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)")
#: Kernel types in HTA's order (its overlap names list them in this order).
KERNEL_TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")
#: HTA's ``get_gpu_kernel_breakdown`` defaults: kernels shown per type, and the share of the
#: cumulative time past which the rest are ``others``.
TOP_KERNELS, DURATION_RATIO = 10, 0.8


def kernel_type(name: str) -> str:
    """HTA's kernel type of a GPU event's name."""
    if _COMMUNICATION.match(name):
        return "COMMUNICATION"
    if _MEMORY.match(name):
        return "MEMORY"
    if not _NOT_COMPUTE.match(name):
        return "COMPUTATION"
    return "OTHER"


def pytorch_workers(frames: TraceFrames) -> list[str]:
    """The session's workers read from PyTorch profiler traces (``trace_parsers.kineto``)."""
    ps = frames.plane_stats
    mark = ps[(ps["plane"] == HOST_PLANE) & (ps["key"] == KINETO_MARK)]
    return sorted({str(w) for w in mark["worker"]})


def rank_events(frames: TraceFrames) -> dict[int, pd.DataFrame]:
    """Per rank (``distributedInfo.rank``; else its worker's position), the events HTA keeps of
    it (module docstring): ``name``, ``kernel_type``, ``ts``, ``dur`` (µs), ``stream``,
    ``correlation``, in time order."""
    events, stats, plane_stats = frames.events, frames.stats, frames.plane_stats
    stream = np.full(len(events), -1, dtype=np.int64)
    rows = stats[stats["key"] == "stream"]
    numeric = pd.to_numeric(
        rows["int_value"].astype("Float64").fillna(rows["float_value"]), errors="coerce"
    )
    numeric = numeric.fillna(pd.to_numeric(rows["str_value"].astype(object), errors="coerce"))
    stream[rows["event_row"].to_numpy()] = numeric.fillna(-1).astype(np.int64).to_numpy()
    correlation = events["correlation_id"].fillna(-1).to_numpy(dtype=np.int64)
    host = plane_stats[plane_stats["plane"] == HOST_PLANE]
    read: dict[int, pd.DataFrame] = {}
    for position, worker in enumerate(pytorch_workers(frames)):
        mine = host[host["worker"] == worker]
        at = np.flatnonzero((events["worker"] == worker).to_numpy())
        ts, dur = _hta_times(
            events["start_ns"].to_numpy()[at] - _host_int(mine, "baseTimeNanoseconds", 0),
            events["dur_ps"].to_numpy()[at] // 1000,
            fractional=bool(_host_int(mine, "fractional_timestamps", 0)),
        )
        names = events["name"].to_numpy()[at].astype(str)
        read[_host_int(mine, "rank", position)] = pd.DataFrame(
            {
                "name": names,
                "ts": ts,
                "dur": dur,
                "stream": stream[at],
                "correlation": correlation[at],
            }
        )
    # HTA aligns the ranks' times to the earliest event of any (its sums are then exact)
    first = min((f["ts"].min() for f in read.values() if len(f)), default=0.0)
    out: dict[int, pd.DataFrame] = {}
    for rank, frame in sorted(read.items()):
        frame["ts"] -= first
        frame = _traced_iterations(frame)
        types = {n: kernel_type(n) for n in frame["name"].unique()}
        frame["kernel_type"] = frame["name"].map(types)
        out[rank] = frame.sort_values("ts", kind="stable", ignore_index=True)
    return out


def _hta_times(
    start_ns: np.ndarray, dur_ns: np.ndarray, fractional: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Starts and durations in µs as HTA reads them: the JSON's numbers as float64 (the nearest
    double to each decimal: Python's int division rounds correctly, numpy's float64 of an
    epoch ns time would not), and in a trace with fractional starts each start moved up and
    each end (start + duration, added in float64 as HTA does) down to a whole µs."""
    ts = np.array([n / 1000 for n in start_ns.tolist()], dtype=np.float64)
    dur = np.array([n / 1000 for n in dur_ns.tolist()], dtype=np.float64)
    if fractional:
        end = np.floor(ts + dur)
        ts = np.ceil(ts)
        dur = end - ts
    return ts, dur


def _host_int(host_stats: pd.DataFrame, key: str, default: int) -> int:
    found = host_stats.loc[host_stats["key"] == key, "int_value"].dropna()
    return int(found.iloc[0]) if len(found) else default


def _traced_iterations(frame: pd.DataFrame) -> pd.DataFrame:
    """HTA's ``_filter_irrelevant_gpu_kernels``: the CPU events that start before the last
    ``ProfilerStep``, and the GPU events whose correlation one of them has (once per match)."""
    on_gpu = ((frame["stream"] >= 0) & (frame["correlation"] >= 0)) | frame["name"].isin(
        ("Event Sync", "Context Sync")
    )
    cpu, gpu = frame[~on_gpu], frame[on_gpu]
    if cpu.empty:
        return frame
    steps = cpu[cpu["name"].str.match(_PROFILER_STEP)]
    last_start = steps["ts"].max() if len(steps) else cpu["ts"].min()
    cpu = cpu[cpu["ts"] < last_start]
    launched = gpu.merge(cpu[["correlation"]], on="correlation", how="inner")
    return pd.concat([launched, cpu], ignore_index=True)


def _merged(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """HTA's ``merge_kernel_intervals``: the union of the events' [ts, ts + dur) intervals, as
    (starts, ends) in time order."""
    if frame.empty:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(frame["ts"].to_numpy(), kind="stable")
    ts = frame["ts"].to_numpy()[order]
    end = ts + frame["dur"].to_numpy()[order]
    new = np.ones(len(ts), dtype=bool)
    new[1:] = ts[1:] > np.maximum.accumulate(end)[:-1]
    group = np.cumsum(new) - 1
    starts = np.minimum.reduceat(ts, np.flatnonzero(new))
    ends = np.full(group[-1] + 1, -np.inf)
    np.maximum.at(ends, group, end)
    return starts, ends


def _on_gpu(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["stream"] != -1]


def temporal(ranks: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """HTA's ``get_temporal_breakdown``."""
    rows = []
    for rank, frame in ranks.items():
        gpu = _on_gpu(frame)
        starts, ends = _merged(gpu)
        if not len(starts):
            continue
        kernel = float(ends[-1] - starts[0])
        idle = kernel - float((ends - starts).sum())
        c_starts, c_ends = _merged(gpu[gpu["kernel_type"] == "COMPUTATION"])
        compute = float((c_ends - c_starts).sum())
        rows.append((rank, idle, compute, kernel - compute - idle, kernel))
    table = pd.DataFrame(
        rows,
        columns=[
            "rank",
            "idle_time_us",
            "compute_time_us",
            "non_compute_time_us",
            "kernel_time_us",
        ],
    )
    for part in ("idle_time", "compute_time", "non_compute_time"):
        table[f"{part}_pctg"] = (100 * table[f"{part}_us"] / table["kernel_time_us"]).round(2)
    return table


def _sweep(
    intervals: Iterable[tuple[int, np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """Over intervals of several kinds (``(bit, starts, ends)``, each kind's disjoint), the
    elementary segments' set of running kinds (a bit mask) and durations."""
    times, deltas = [], []
    for bit, starts, ends in intervals:
        times += [starts, ends]
        deltas += [np.full(len(starts), bit), np.full(len(ends), -bit)]
    if not times:
        return np.zeros(0, np.int64), np.zeros(0)
    t = np.concatenate(times)
    d = np.concatenate(deltas)
    order = np.argsort(t, kind="stable")
    t, running = t[order], np.cumsum(d[order])
    return running[:-1], np.diff(t)


def overlap(ranks: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """HTA's ``get_comm_comp_overlap``: per rank, the share of communication time overlapped
    by computation (NaN without communication)."""
    rows = []
    for rank, frame in ranks.items():
        gpu = _on_gpu(frame)
        comp = _merged(gpu[gpu["kernel_type"] == "COMPUTATION"])
        comm = _merged(gpu[gpu["kernel_type"] == "COMMUNICATION"])
        running, durations = _sweep([(1, *comm), (2, *comp)])
        both = float(durations[running == 3].sum())
        total = float((comm[1] - comm[0]).sum())
        rows.append((rank, round(100 * both / total, 2) if total else np.nan))
    return pd.DataFrame(rows, columns=["rank", "comp_comm_overlap_pctg"])


def _type_names(mask: int) -> str:
    """The name HTA gives a set of running kernel types (``A overlapping B``)."""
    return " overlapping ".join(t for i, t in enumerate(KERNEL_TYPES) if mask & (1 << i))


def kernel_types(ranks: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """HTA's ``get_gpu_kernel_breakdown(include_memory_kernels=True)`` kernel-type table."""
    totals: dict[str, float] = {}
    for frame in ranks.values():
        gpu = _on_gpu(frame)
        parts = [
            (1 << i, *_merged(gpu[gpu["kernel_type"] == t])) for i, t in enumerate(KERNEL_TYPES)
        ]
        running, durations = _sweep(parts)
        for mask in np.unique(running[running > 0]).tolist():
            name = _type_names(int(mask))
            totals[name] = totals.get(name, 0.0) + float(durations[running == mask].sum())
    table = pd.DataFrame(list(totals.items()), columns=["kernel_type", "sum_us"])
    table = table.sort_values("sum_us", ascending=False, ignore_index=True, kind="stable")
    table["percentage"] = (100 * table["sum_us"] / table["sum_us"].sum()).round(1)
    return table


def kernels(ranks: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """HTA's ``get_gpu_kernel_breakdown(include_memory_kernels=True)`` per-kernel table."""
    parts = []
    for rank, frame in ranks.items():
        gpu = _on_gpu(frame)
        for kind in KERNEL_TYPES:
            top = _top_kernels(gpu[gpu["kernel_type"] == kind])
            parts.append(top.assign(kernel_type=kind, rank=rank))
    columns = ["kernel_type", "rank", "name", "sum_us", "max_us", "min_us", "mean_us", "stddev"]
    if not parts:
        return pd.DataFrame(columns=columns)
    table = pd.concat(parts, ignore_index=True).rename(
        columns={
            "sum": "sum_us",
            "max": "max_us",
            "min": "min_us",
            "mean": "mean_us",
            "std": "stddev",
        }
    )
    return table.sort_values(["kernel_type", "name", "rank"], ignore_index=True)[columns]


def _top_kernels(gpu: pd.DataFrame) -> pd.DataFrame:
    """HTA's ``_aggr_gpu_kernel_time``: per name, sum/max/min/mean/std of durations; past
    ``TOP_KERNELS`` names or the ``DURATION_RATIO`` quantile of the cumulative sum, summed as
    ``others`` (their statistics then over the names' sums)."""
    stats = ["sum", "max", "min", "mean", "std"]
    table = gpu.groupby("name")["dur"].agg(stats).reset_index()
    table = table.sort_values("sum", ascending=False, ignore_index=True).fillna({"std": 0})
    if len(table) > TOP_KERNELS:
        cumulative = table["sum"].cumsum()
        rest = (cumulative > cumulative.quantile(DURATION_RATIO)) | (table.index >= TOP_KERNELS)
        table.loc[rest, "name"] = "others"
        table = table.groupby("name")["sum"].agg(stats).reset_index().fillna({"std": 0})
    return table


#: ``podscope gpu --view`` names → the view.
VIEWS: dict[str, Callable[[dict[int, pd.DataFrame]], pd.DataFrame]] = {
    "temporal": temporal,
    "overlap": overlap,
    "kernel-types": kernel_types,
    "kernels": kernels,
}


def gpu_view(frames: TraceFrames, view: str) -> pd.DataFrame:
    """One of ``VIEWS`` of a session's PyTorch ranks.

    Raises:
        KeyError: an unknown view.
    """
    return VIEWS[view](rank_events(frames))


__all__ = ["KERNEL_TYPES", "VIEWS", "gpu_view", "kernel_type", "pytorch_workers", "rank_events"]
