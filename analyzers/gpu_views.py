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
  one of them (matched by correlation id), unless the ranks name fewer than two
  ``ProfilerStep`` between them: then it keeps every event. The views read the events with a
  stream.
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

from podscope.trace_parsers.schema import HOST_PLANE, KINETO_MARK, TRACE_ORDER, TraceFrames

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


def rank_workers(frames: TraceFrames) -> dict[int, str]:
    """Each PyTorch worker's rank (``distributedInfo.rank``; else its worker's position)."""
    host = frames.plane_stats[frames.plane_stats["plane"] == HOST_PLANE]
    return {
        _host_int(host[host["worker"] == worker], "rank", position): worker
        for position, worker in enumerate(pytorch_workers(frames))
    }


def rank_events(frames: TraceFrames) -> dict[int, pd.DataFrame]:
    """Per rank (``distributedInfo.rank``; else its worker's position), the events HTA keeps of
    it (module docstring): ``name``, ``cat``, ``kernel_type``, ``ts``, ``dur`` (µs),
    ``stream``, ``correlation``, ``bandwidth`` (a copy's GB/s), ``order`` (a GPU event's or
    launch call's place in the file's ``traceEvents``; -1 for others), in time order."""
    workers = rank_workers(frames)
    if not workers:  # no PyTorch rank (every TF or JAX worker's rule inputs ask): no work
        return {}
    events, stats, plane_stats = frames.events, frames.stats, frames.plane_stats
    stream = _numeric_arg(stats, "stream", len(events), -1).astype(np.int64)
    bandwidth = _numeric_arg(stats, "memory bandwidth (GB/s)", len(events), 0.0)
    order = _numeric_arg(stats, TRACE_ORDER, len(events), -1)
    correlation = events["correlation_id"].fillna(-1).to_numpy(dtype=np.int64)
    category = np.full(len(events), "", dtype=object)
    cats = stats[stats["key"] == "cat"]
    category[cats["event_row"].to_numpy()] = cats["str_value"].astype(str).to_numpy()
    host = plane_stats[plane_stats["plane"] == HOST_PLANE]
    read: dict[int, pd.DataFrame] = {}
    for rank, worker in workers.items():
        mine = host[host["worker"] == worker]
        at = np.flatnonzero((events["worker"] == worker).to_numpy())
        ts, dur = _hta_times(
            events["start_ns"].to_numpy()[at] - _host_int(mine, "baseTimeNanoseconds", 0),
            events["dur_ps"].to_numpy()[at] // 1000,
            fractional=bool(_host_int(mine, "fractional_timestamps", 0)),
        )
        names = events["name"].to_numpy()[at].astype(str)
        read[rank] = pd.DataFrame(
            {
                "name": names,
                "cat": category[at],
                "ts": ts,
                "dur": dur,
                "stream": stream[at],
                "correlation": correlation[at],
                "bandwidth": bandwidth[at],
                "order": order[at],
            }
        )
    # HTA aligns the ranks' times to the earliest event of any (its sums are then exact)
    first = min((f["ts"].min() for f in read.values() if len(f)), default=0.0)
    # and keeps whole iterations only when the ranks name two steps or more between them
    steps = {n for f in read.values() for n in f["name"].unique() if _PROFILER_STEP.match(n)}
    out: dict[int, pd.DataFrame] = {}
    for rank, frame in sorted(read.items()):
        frame["ts"] -= first
        if len(steps) > 1:
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


def _numeric_arg(stats: pd.DataFrame, key: str, n: int, default: float) -> np.ndarray:
    """Per event row, its arg ``key`` as a number (text that reads as one too), as HTA reads
    it (``pd.to_numeric``); ``default`` where it has none or it is not a number."""
    out = np.full(n, default, dtype=np.float64)
    rows = stats[stats["key"] == key]
    value = rows["int_value"].astype("Float64").fillna(rows["float_value"])
    text = pd.to_numeric(rows["str_value"].astype(object), errors="coerce")
    value = pd.to_numeric(value, errors="coerce").fillna(text).fillna(default)
    out[rows["event_row"].to_numpy()] = value.to_numpy(dtype=np.float64)
    return out


def _host_int(host_stats: pd.DataFrame, key: str, default: int) -> int:
    found = host_stats.loc[host_stats["key"] == key, "int_value"].dropna()
    return int(found.iloc[0]) if len(found) else default


def _traced_iterations(frame: pd.DataFrame) -> pd.DataFrame:
    """HTA's ``_filter_irrelevant_gpu_kernels``: the CPU events that start before the last
    ``ProfilerStep``, and the GPU events whose correlation one of them has (once per match).
    (HTA skips it when its ranks name fewer than two steps: ``rank_events``.)"""
    on_gpu = _gpu_events(frame)
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
    intervals: Iterable[tuple[int, np.ndarray, np.ndarray]], each: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Over intervals of several kinds (``(bit, starts, ends)``, each kind's disjoint), the
    elementary segments' set of running kinds (a bit mask) and durations.

    Ties in time are broken as HTA breaks them, so that the zero-length segments between
    tied points (which name a set of kinds with no time) are its: every kind's starts then
    ends, sorted by pandas' default (unstable) sort once all are in, or, ``each``, after each
    kind is added (its ``_get_gpu_kernel_type_time``)."""
    frame = pd.DataFrame({"status": np.zeros(0, np.int64), "time": np.zeros(0)})
    for bit, starts, ends in intervals:
        piece = pd.DataFrame(
            {
                "status": np.r_[np.full(len(starts), bit), np.full(len(ends), -bit)],
                "time": np.r_[starts, ends].astype(np.float64),
            }
        )
        frame = pd.concat([frame, piece], ignore_index=True)
        if each:
            frame = frame.sort_values(by="time").reset_index(drop=True)
    if not each:
        frame = frame.sort_values(by="time").reset_index(drop=True)
    running = frame["status"].cumsum().to_numpy()
    return running[:-1], np.diff(frame["time"].to_numpy())


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
        running, durations = _sweep(parts, each=True)
        for mask in np.unique(running[running > 0]).tolist():
            name = _type_names(int(mask))
            totals[name] = totals.get(name, 0.0) + float(durations[running == mask].sum())
    # by name, then by time as HTA sorts (types of equal time stay in its order)
    table = pd.DataFrame(sorted(totals.items()), columns=["kernel_type", "sum_us"])
    table = table.sort_values(by=["sum_us"], ascending=False, ignore_index=True)
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


#: The runtime calls HTA counts as launches: kernels (CUDA, MTIA), then copies and sets.
LAUNCHES = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "runFunction - job_prep_and_submit_for_execution",
)
MEMORY_LAUNCHES = ("cudaMemcpyAsync", "cudaMemsetAsync")


def launches(ranks: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """HTA's ``get_cuda_kernel_launch_stats`` (memory events included), every rank: per
    launch (a launch call and the GPU event of its correlation) the call's duration, the GPU
    event's, and the delay from the call's end to the event's start (0 when negative), µs."""
    parts = []
    for rank, frame in ranks.items():
        launched = frame.loc[frame["name"].isin(LAUNCHES + MEMORY_LAUNCHES), "correlation"]
        cpu = frame[(frame["stream"] == -1) & frame["correlation"].isin(launched)]
        gpu = frame[(frame["stream"] != -1) & frame["correlation"].isin(launched)]
        joined = cpu[["correlation", "dur", "ts"]].merge(
            gpu[["correlation", "dur", "ts"]], on="correlation", suffixes=("_cpu", "_gpu")
        )
        parts.append(
            pd.DataFrame(
                {
                    "rank": rank,
                    "correlation": joined["correlation"],
                    "cpu_duration": joined["dur_cpu"],
                    "gpu_duration": joined["dur_gpu"],
                    "launch_delay": (joined["ts_gpu"] - joined["ts_cpu"] - joined["dur_cpu"]).clip(
                        lower=0
                    ),
                }
            )
        )
    columns = ["rank", "correlation", "cpu_duration", "gpu_duration", "launch_delay"]
    if not parts:
        return pd.DataFrame(columns=columns)
    table = pd.concat(parts, ignore_index=True)[columns]
    return table.sort_values(["rank", "correlation"], ignore_index=True, kind="stable")


#: The categories of GPU events HTA's idle time reads (no syncs), and its threshold (µs) below
#: which a gap between two kernels is the launch overhead ("kernel wait").
IDLE_CATEGORIES = (
    "kernel",
    "Kernel",
    "gpu_memset",
    "Memset",
    "gpu_memcpy",
    "Memcpy",
    "mtia_ccp_events",
)
CONSECUTIVE_KERNEL_DELAY = 30


def idle(ranks: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """HTA's ``get_idle_time_breakdown`` of every rank: per stream, each gap before a GPU
    event (from the previous event's end on the stream, in start order) is *host wait* when
    the event's launch call started after that end (the host was late), else *kernel wait*
    when shorter than ``CONSECUTIVE_KERNEL_DELAY``, else *other*; their sums and shares of the
    stream's idle time (two decimals)."""
    parts = []
    for rank, frame in ranks.items():
        gpu = frame[(frame["stream"] != -1) & frame["cat"].isin(IDLE_CATEGORIES)]
        launch = frame[~_gpu_events(frame)].drop_duplicates("correlation", keep="last")
        runtime = gpu["correlation"].map(launch.set_index("correlation")["ts"])
        gpu = gpu.assign(ts_runtime=runtime)
        gpu = gpu.sort_values("order", kind="stable")  # the file's order, as HTA holds them
        for stream, on in gpu.groupby("stream", sort=True):
            on = on.sort_values("ts")  # HTA's sort: events at one µs stay as its sort leaves them
            prev_end = (on["ts"] + on["dur"]).shift(1)
            gap = on["ts"] - prev_end
            host = on["ts_runtime"] > prev_end
            category = np.where(
                host, "host_wait", np.where(gap < CONSECUTIVE_KERNEL_DELAY, "kernel_wait", "other")
            )
            sums = gap.groupby(category).sum()
            parts.append(
                pd.DataFrame(
                    {
                        "rank": rank,
                        "stream": int(stream),
                        "idle_category": sums.index,
                        "idle_time": sums.to_numpy(),
                        "idle_time_ratio": (sums / sums.sum()).to_numpy(),
                    }
                )
            )
    columns = ["rank", "stream", "idle_category", "idle_time", "idle_time_ratio"]
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)[columns].round(2)


def _gpu_events(frame: pd.DataFrame) -> pd.Series:
    """HTA's GPU events (its ``GPUKernelFilter``): a stream and a correlation, or a sync."""
    return ((frame["stream"] >= 0) & (frame["correlation"] >= 0)) | frame["name"].isin(
        ("Event Sync", "Context Sync")
    )


#: The runtime calls that enqueue work on a stream (HTA's ``get_runtime_launch_events_mask``).
ENQUEUES = (
    LAUNCHES
    + MEMORY_LAUNCHES
    + (
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipMemcpyAsync",
        "hipMemsetAsync",
        "hipMemcpyWithStream",
    )
)
STATISTICS = ["count", "mean", "std", "min", "25%", "50%", "75%", "max"]


def _described(frame: pd.DataFrame, by: list[str], column: str) -> pd.DataFrame:
    """pandas' ``describe`` of ``column`` per ``by`` group, flat: ``by`` then ``STATISTICS``."""
    if frame.empty:
        return pd.DataFrame(columns=[*by, *STATISTICS])
    table = frame.groupby(by)[column].describe().reset_index()
    return table[[*by, *STATISTICS]].astype({"count": "int64"})


def queues(ranks: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """HTA's ``get_queue_length_summary`` of every rank: per stream, the number of operations
    enqueued and not yet run (+1 at each launch call that has its GPU event, -1 at each such
    event's start), described over the points where it changes."""
    parts = []
    for rank, frame in ranks.items():
        frame = frame.sort_values("order", kind="stable")  # the file's order, as HTA holds it
        gpu = frame[frame["stream"] != -1]
        # a launch call linked to its GPU event (HTA links none to the file's first event)
        linked = _gpu_events(frame) & (frame["order"] != 0)
        has_event = frame["correlation"].isin(frame.loc[linked, "correlation"])
        calls = frame[frame["name"].isin(ENQUEUES) & has_event & ~_gpu_events(frame)]
        streams = gpu.drop_duplicates("correlation", keep="last").set_index("correlation")
        calls = calls.assign(stream=calls["correlation"].map(streams["stream"]), queue=1)
        calls = calls[calls["stream"].notna()]
        ran = gpu[gpu["correlation"].isin(calls["correlation"])].assign(queue=-1)
        both = pd.concat([calls, ran]).sort_values("ts")  # HTA's sort, ties as it leaves them
        for stream, on in both.groupby("stream", sort=True):
            parts.append(
                pd.DataFrame(
                    {"rank": rank, "stream": int(stream), "queue_length": on["queue"].cumsum()}
                )
            )
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return _described(table, ["rank", "stream"], "queue_length")


def memory_bw(ranks: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """HTA's ``get_memory_bw_summary`` of every rank: per copy kind (``Memcpy HtoD``, ``Memcpy
    DtoH``, ``Memcpy DtoD``, ``Memset``…), the bandwidth in use (GB/s, the events'
    ``memory bandwidth (GB/s)``, summed while they overlap) described over the points where it
    changes and is above zero."""
    parts = []
    for rank, frame in ranks.items():
        gpu = frame[frame["stream"] != -1]
        # in the file's order, as HTA holds them: its (unstable) sort by time then breaks
        # ties as it does, and the running sums between tied points are its
        copies = gpu[gpu["kernel_type"] == "MEMORY"].sort_values("order", kind="stable")
        kind = copies["name"].map(_copy_kind)
        dur = copies["dur"].where(copies["dur"] != 0, 1)  # HTA: a 0 µs copy lasts 1 µs
        bw = copies["bandwidth"]
        series = pd.concat(
            [
                pd.DataFrame({"ts": copies["ts"], "name": kind, "bw": bw}),
                pd.DataFrame({"ts": copies["ts"] + dur, "name": kind, "bw": -bw}),
            ],
            ignore_index=True,
        ).sort_values("ts")
        for name, on in series.groupby("name", sort=True):
            running = on["bw"].cumsum()
            parts.append(
                pd.DataFrame({"rank": rank, "name": name, "memory_bw_gbps": running[running > 0]})
            )
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return _described(table, ["rank", "name"], "memory_bw_gbps")


def _copy_kind(name: str) -> str:
    """HTA's ``get_memory_kernel_type``: ``Memset``, ``Memcpy HtoD``… from the event's name."""
    if name[:6] == "Memset":
        return "Memset"
    return name[:11] if name[:6] == "Memcpy" else "Memcpy Unknown"


#: ``podscope gpu --view`` names → the view.
VIEWS: dict[str, Callable[[dict[int, pd.DataFrame]], pd.DataFrame]] = {
    "temporal": temporal,
    "overlap": overlap,
    "kernel-types": kernel_types,
    "kernels": kernels,
    "launches": launches,
    "idle": idle,
    "queues": queues,
    "memory-bw": memory_bw,
}


def launch_summary(frames: TraceFrames) -> pd.DataFrame:
    """Per PyTorch rank, from HTA's views, what tells a launch-bound GPU: its kernel launches
    and those whose GPU event ran shorter than the launch call (``launches``), the share of
    its span with no GPU event (``temporal``) and host wait's share of its streams' idle time
    (``idle``: the event's launch began after the stream ran dry).

    And the host-to-device copies from pageable memory (Kineto's ``Memcpy HtoD (Pageable ->
    Device)``): the CUDA runtime stages them through a pinned buffer and the call returns only
    when the data is copied, so the host waits for each: their number and the host's time in
    their calls (``pageable_copies``, ``pageable_copy_host_us``), with the rank's GPU span
    (``span_us``: HTA's temporal ``kernel_time``).

    Returns:
        Columns ``worker, rank, launches, short_launches, idle_share, host_wait_share,
        pageable_copies, pageable_copy_host_us, span_us``.
    """
    ranks = rank_events(frames)
    names = rank_workers(frames)
    t = temporal(ranks).set_index("rank")
    idle_by = idle(ranks)
    calls = launches(ranks)
    rows = []
    for rank in ranks:
        mine = idle_by[idle_by["rank"] == rank]
        waits = mine.groupby("idle_category")["idle_time"].sum()
        launched = calls[calls["rank"] == rank]
        frame = ranks[rank]
        pageable = frame.loc[
            (frame["stream"] != -1) & frame["name"].str.startswith("Memcpy HtoD (Pageable"),
            "correlation",
        ]
        host = frame[(frame["stream"] == -1) & frame["correlation"].isin(pageable)]
        rows.append(
            {
                "worker": names[rank],
                "rank": int(rank),
                "launches": len(launched),
                "short_launches": int((launched["gpu_duration"] < launched["cpu_duration"]).sum()),
                "idle_share": float(t.loc[rank, "idle_time_pctg"]) / 100
                if rank in t.index
                else 0.0,
                "host_wait_share": float(waits.get("host_wait", 0.0) / waits.sum())
                if waits.sum() > 0
                else 0.0,
                "pageable_copies": len(pageable),
                "pageable_copy_host_us": float(host["dur"].sum()),
                "span_us": float(t.loc[rank, "kernel_time_us"]) if rank in t.index else 0.0,
            }
        )
    cols = [
        "worker",
        "rank",
        "launches",
        "short_launches",
        "idle_share",
        "host_wait_share",
        "pageable_copies",
        "pageable_copy_host_us",
        "span_us",
    ]
    return pd.DataFrame(rows, columns=cols)


def gpu_view(frames: TraceFrames, view: str) -> pd.DataFrame:
    """One of ``VIEWS`` of a session's PyTorch ranks.

    Raises:
        KeyError: an unknown view.
    """
    return VIEWS[view](rank_events(frames))


__all__ = [
    "KERNEL_TYPES",
    "VIEWS",
    "gpu_view",
    "kernel_type",
    "launch_summary",
    "pytorch_workers",
    "rank_events",
    "rank_workers",
]
