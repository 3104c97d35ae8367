"""Step-time breakdown per worker × device × step into XProf's categories.

Each instant of a step gets the highest-priority event type active then (XProf's generic
GPU/CPU model, priorities in ``PRIORITY``); the breakdown partitions the step exactly (the
categories sum to the step time). One sorted sweep per worker and device, merged in C
(``_sweep``), no per-event Python.

    >>> b = step_breakdown(frames.events, aligned_steps)
    >>> b[["worker", "device", "step", "step_time_ns", "input_ns", "host_compute_ns"]]

Deliberate differences from XProf, each for a reason:

* one row per device (GPU) instead of XProf's one merged stream per host, so imbalance
  between the GPUs of one worker is visible;
* host-side collective ops (``CollectiveReduceV2`` & co., MultiWorkerMirroredStrategy on
  CPU) count as *device collectives*, not host compute: on a fast worker that time is spent
  waiting for the slowest one;
* workers traced with the Python tracer only (the collector's safe plan) have step times but
  their categories are missing (``split`` False), never zeros.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from podscope.analyzers._match import isin, matches, rows_by
from podscope.analyzers.collectives import TORCH_GLOO
from podscope.analyzers.groups import device_spans, step_groups
from podscope.analyzers.hlo_stats import host_copies
from podscope.analyzers.lines import DERIVED_LINES
from podscope.analyzers.xla_programs import (
    XLA_COLLECTIVE,
    XLA_DEVICE_COPY,
    device_steps,
    program_executions,
)
from podscope.trace_parsers.nesting import top_type_times

# Event types, low → high priority (XProf generic model).
PRIORITY = (
    "UNKNOWN",
    "HOST_COMPUTE",
    "HOST_PREPROCESS",
    "HOST_POSTPROCESS",
    "HOST_BATCH_FORMATION",
    "HOST_RUNTIME",
    "HOST_COMPILE",
    "HOST_TO_HOST",
    "HOST_TO_DEVICE",
    "HOST_PREPARE",
    "DEVICE_COLLECTIVES",
    "HOST_WAIT_INPUT",
    "DEVICE_TO_DEVICE",
    "DEVICE_TO_HOST",
    "HOST_OFFLOAD",
    "DEVICE_COMPUTE_32",
    "DEVICE_COMPUTE_16",
    "DEVICE_WAIT_DEVICE",
    "DEVICE_WAIT_HOST",
)
P = {name: i for i, name in enumerate(PRIORITY)}

#: The 9 categories users see, from event types.
CATEGORIES = {
    "device_compute": ("DEVICE_COMPUTE_32", "DEVICE_COMPUTE_16"),
    "device_to_device": ("DEVICE_TO_DEVICE", "DEVICE_WAIT_DEVICE"),
    "device_collectives": ("DEVICE_COLLECTIVES",),
    "host_compute": ("HOST_COMPUTE", "HOST_PREPROCESS", "HOST_POSTPROCESS", "HOST_BATCH_FORMATION"),
    "kernel_launch": ("HOST_PREPARE",),
    "input": ("HOST_WAIT_INPUT", "HOST_TO_DEVICE", "DEVICE_WAIT_HOST"),
    "output": ("DEVICE_TO_HOST",),
    "compilation": ("HOST_COMPILE",),
    "all_others": ("UNKNOWN", "HOST_RUNTIME", "HOST_TO_HOST"),
    # XLA copies between host memory (memory space 5) and the device's: host offload
    "host_offload": ("HOST_OFFLOAD",),
    # XLA program steps only (JAX): a device's time with no op of it running
    "device_idle": (),
}
CATEGORY_COLUMNS = [f"{c}_ns" for c in CATEGORIES]
#: Parts of categories, beside them: 16-bit device compute (of ``device_compute``), host→device
#: copies (of ``input``: the rest is the wait for the input pipeline, PyTorch's DataLoader).
PART_COLUMNS = ["device_compute_16_ns", "host_to_device_ns"]
_NOT_REAL_COMPUTE = r"(?:EagerExecute|EagerLocalExecute|EagerKernelExecute|FunctionRun)|(?:train|test|TraceContext)[^/]*$"
_HALF = r"(?i)(?:half|fp16|bf16|h884|h1688|hmma|_f16|16816)"
#: PyTorch's DataLoader's ``__next__``: the loop waits for its batch. (Its collectives on the
#: host are gloo's spans, ``collectives.TORCH_GLOO``: the c10d op the loop or DDP's reducer
#: calls, and ``nccl:*``/``record_param_comms`` on a GPU rank, only enqueue the work: CPU time;
#: NCCL's is its kernels'.)
_TORCH_INPUT = r"enumerate\(DataLoader\)#"


def classify(
    events: pd.DataFrame, grouped: np.ndarray | None = None, xla: np.ndarray | None = None
) -> np.ndarray:
    """Event type (index into ``PRIORITY``) per event, -1 for events that are not counted.

    Args:
        events: the ``events`` frame.
        grouped: per event, True if it belongs to a step (``analyzers.groups``); host events
            outside every step are then not counted, as in XProf. Without grouping (no step
            roots), only TF ops and the special events below count on the host.
        xla: per event, the type its HLO instruction gives it (``xla_types``), -1 where the
            event is no XLA op: 16-bit compute by the instruction's element types, not the
            kernel's name; copies to and from host memory as host offload.

    Patterns are tested on the categories, not the rows.
    """
    out = np.full(len(events), -1, dtype=np.int8)
    name, op_type, details = events["name"], events["op_type"], events["memcpy_details"]
    on_device = matches(events["plane"], "/device:", how="startswith")
    dev = on_device & ~isin(events["line"], DERIVED_LINES)

    # Device planes: kernels (16-bit if the name says so), collectives, memcpy by direction.
    memcpy = matches(name, "(?i)memcpy") | details.notna().to_numpy()
    out[dev] = P["DEVICE_COMPUTE_32"]
    out[dev & matches(name, _HALF)] = P["DEVICE_COMPUTE_16"]
    out[dev & matches(name, r"(?i)^nccl|all-?reduce|all-?gather|reduce-?scatter")] = P[
        "DEVICE_COLLECTIVES"
    ]
    out[dev & memcpy] = P["DEVICE_TO_DEVICE"]
    h2d = matches(name, r"(?i)HtoD|H2D|HostToDevice") | matches(
        details, r"(?i)HtoD|H2D|HostToDevice"
    )
    d2h = matches(name, r"(?i)DtoH|D2H|DeviceToHost") | matches(
        details, r"(?i)DtoH|D2H|DeviceToHost"
    )
    out[dev & memcpy & h2d] = P["HOST_TO_DEVICE"]
    out[dev & memcpy & d2h] = P["DEVICE_TO_HOST"]
    if xla is not None:
        known = dev & (xla >= 0)
        out[known] = xla[known]

    # Host planes: grouped events (or, without grouping, TF ops) are host compute;
    # collectives, compiles, H2D copies, launches and input waits have their own type.
    host = ~on_device if grouped is None else ~on_device & grouped
    out[host & (op_type.notna().to_numpy() if grouped is None else True)] = P["HOST_COMPUTE"]
    # XProf's IsRealCpuCompute: eager/function dispatch wrappers and step-marker-like events
    # (train*, test*, TraceContext* without "/") span the step and are not compute.
    out[~on_device & matches(name, _NOT_REAL_COMPUTE, how="match")] = -1
    out[host & matches(op_type, "Collective", how="startswith")] = P["DEVICE_COLLECTIVES"]
    out[host & matches(name, TORCH_GLOO, how="match")] = P["DEVICE_COLLECTIVES"]
    out[host & matches(name, "(?i)compil")] = P["HOST_COMPILE"]
    out[host & isin(op_type, {"InfeedEnqueue", "InfeedEnqueueTuple", "MemcpyHToD"})] = P[
        "HOST_TO_DEVICE"
    ]
    out[host & events["correlation_id"].notna().to_numpy()] = P["HOST_PREPARE"]
    # Waiting for input counts even when the grouping misses the link (tf.data threads).
    out[~on_device & matches(name, "IteratorGetNext", how="startswith")] = P["HOST_WAIT_INPUT"]
    out[~on_device & matches(name, _TORCH_INPUT, how="match")] = P["HOST_WAIT_INPUT"]
    # Python tracer events ("$file.py:line function") only give step times, never categories.
    out[matches(name, "$", how="startswith")] = -1
    return out


def _sweep(
    start: np.ndarray,
    end: np.ndarray,
    prio: np.ndarray,
    step_start: np.ndarray,
    step_end: np.ndarray,
) -> np.ndarray:
    """ns per (step, event type): the top event type active at each instant of each step
    (``trace_parsers.nesting.top_type_times``, a merge in C)."""
    return top_type_times(start, end, prio, len(PRIORITY), step_start, step_end)


def _own_step_windows(group: np.ndarray, steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per event, the [start, end] ns of the step it is grouped into; unbounded if none."""
    lo = np.full(len(group), np.iinfo(np.int64).min, dtype=np.int64)
    hi = np.full(len(group), np.iinfo(np.int64).max, dtype=np.int64)
    rows = steps["event_row"].to_numpy(dtype=np.int64)
    order = np.argsort(rows)
    has = group >= 0
    at = np.clip(np.searchsorted(rows[order], group[has]), 0, len(rows) - 1)
    found = rows[order][at] == group[has]
    idx = np.flatnonzero(has)[found]
    step = order[at[found]]
    lo[idx] = steps["start_ns"].to_numpy(dtype=np.int64)[step]
    hi[idx] = steps["end_ns"].to_numpy(dtype=np.int64)[step]
    return lo, hi


def _busy(start: np.ndarray, end: np.ndarray, st: pd.DataFrame) -> np.ndarray:
    """Per step of ``st``: whether any of the events [start, end) overlaps it."""
    if not len(start):
        return np.zeros(len(st), dtype=bool)
    order = np.argsort(start)
    s, e = start[order], np.maximum.accumulate(end[order])
    i = np.searchsorted(s, st["end_ns"].to_numpy(), side="left") - 1
    return (i >= 0) & (e[np.clip(i, 0, None)] > st["start_ns"].to_numpy())


def _device_steps(dev: pd.DataFrame, st: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Steps found from ``group_id`` on a GPU capture: per device, the steps it ran, each
    with the device's own span of it (``start_ns``/``end_ns`` replaced). The worker's step
    is the longest of these (``analyzers.steps``); GPU:4 and GPU:6 running the same step
    650 ms apart each get their own 20 ms step, not a share of a 670 ms one."""
    grouped = st[st["method"] == "group_id"]
    dev = dev[dev["group_id"].notna().to_numpy() & ~isin(dev["line"], DERIVED_LINES)]
    if grouped.empty or dev.empty:
        return {}
    spans = device_spans(dev).rename(columns={"group_id": "key"})
    steps = grouped.assign(key=grouped["step_num"].astype("int64")).drop(
        columns=["start_ns", "end_ns"]
    )
    both = steps.merge(spans, on="key").sort_values("start_ns")
    return {str(p): g.drop(columns=["key", "plane"]) for p, g in both.groupby("plane", sort=True)}


def _xla_types(ev: pd.DataFrame, xla: np.ndarray | None = None) -> np.ndarray:
    """Event type per op of an XLA program step: collectives, copies by direction, else device
    compute (16-bit where the name says so); ``xla`` (``xla_types``) overrides by the HLO
    instruction where known."""
    name = ev["name"]
    out = np.full(len(ev), P["DEVICE_COMPUTE_32"], dtype=np.int8)
    out[matches(name, _HALF)] = P["DEVICE_COMPUTE_16"]
    memcpy = matches(name, "(?i)memcpy") | ev["memcpy_details"].notna().to_numpy()
    out[memcpy | matches(name, XLA_DEVICE_COPY)] = P["DEVICE_TO_DEVICE"]
    both = (name, ev["memcpy_details"])
    out[memcpy & np.any([matches(c, r"(?i)HtoD|H2D|HostToDevice") for c in both], axis=0)] = P[
        "HOST_TO_DEVICE"
    ]
    out[memcpy & np.any([matches(c, r"(?i)DtoH|D2H|DeviceToHost") for c in both], axis=0)] = P[
        "DEVICE_TO_HOST"
    ]
    out[matches(name, XLA_COLLECTIVE, how="match")] = P["DEVICE_COLLECTIVES"]
    if xla is not None:
        out = np.where(xla >= 0, xla, out).astype(np.int8)
    return out


HALF_TYPES = frozenset({"bf16", "f16"})


def xla_types(
    events: pd.DataFrame,
    stats: pd.DataFrame,
    metadata_stats: pd.DataFrame | None,
    hlo_ops: pd.DataFrame | None,
) -> np.ndarray:
    """Per event, the event type its HLO instruction says (-1 for events that are no XLA op
    or whose program the trace lacks): copies between host memory (memory space 5) and the
    device are ``HOST_OFFLOAD``, collectives ``DEVICE_COLLECTIVES``, other ops device compute,
    16-bit when the narrowest float type the instruction reads or writes is bf16 or f16
    (``trace_parsers.hlo_module.compute_dtype``: a bf16 matmul that accumulates in f32 is
    16-bit compute)."""
    out = np.full(len(events), -1, dtype=np.int8)
    if hlo_ops is None or hlo_ops.empty or events.empty:
        return out
    from podscope.analyzers.hlo_stats import event_instructions  # hlo_stats imports this module

    inst = event_instructions(events, stats, metadata_stats)
    if inst.empty:
        return out
    h = hlo_ops[
        ["worker", "program_id", "hlo_op", "compute_dtype", "copy_from", "copy_to", "opcode"]
    ]
    h = h.assign(worker=h["worker"].astype(str), hlo_op=h["hlo_op"].astype(str))
    hit = inst.merge(h, on=["worker", "program_id", "hlo_op"], how="inner")
    if hit.empty:
        return out
    kind = np.full(len(hit), P["DEVICE_COMPUTE_32"], dtype=np.int8)
    kind[hit["compute_dtype"].astype(str).isin(HALF_TYPES).to_numpy()] = P["DEVICE_COMPUTE_16"]
    opcode = hit["opcode"].astype(str)
    copy = opcode.isin(["copy-start", "copy-done", "copy"]).to_numpy()
    kind[copy] = P["DEVICE_TO_DEVICE"]
    kind[copy & host_copies(hit)] = P["HOST_OFFLOAD"]
    kind[opcode.str.match(XLA_COLLECTIVE).to_numpy()] = P["DEVICE_COLLECTIVES"]
    pos = events.index.get_indexer(hit["row"].to_numpy())
    ok = pos >= 0
    out[pos[ok]] = kind[ok]
    return out


def _device_ops(ev: pd.DataFrame, stats: pd.DataFrame, device: str) -> pd.DataFrame:
    """The op events of ``device``: its stream lines (a TPU's ``XLA Ops`` and ``Async XLA Ops``,
    which are its only op lines), or on the host, the XLA:CPU thunks (``hlo_module`` stat)."""
    if device == "/host:CPU":
        tagged = stats.loc[stats["key"] == "hlo_module", "event_row"].to_numpy()
        host = ev[~matches(ev["plane"], "/device:", how="startswith")]
        return host[host.index.isin(tagged)]
    mine = ev[isin(ev["plane"], {device})]
    if device.startswith("/device:TPU"):
        return mine[isin(mine["line"], {"XLA Ops", "Async XLA Ops"})]
    return mine[~isin(mine["line"], DERIVED_LINES)]


def _xla_rows(
    worker: str, events: pd.DataFrame, stats: pd.DataFrame, st: pd.DataFrame, xla: np.ndarray
) -> list[dict[str, Any]]:
    """Breakdown rows of one worker's XLA program steps (``analyzers.xla_programs``): per
    device, its own step span (end of execution ``k - 1`` to end of ``k``) split into its ops'
    categories; time with no op running is ``device_idle``."""
    ev = events[isin(events["worker"], {worker})]
    st_ = stats[stats["event_row"].isin(ev.index)]
    dev = device_steps(program_executions(ev, st_), str(st["name"].iloc[0]))
    first = dev.groupby("k")["start_ns"].min()  # the worker step's start, per execution k
    step_of = pd.Series(st["step"].to_numpy(), index=st["start_ns"].to_numpy())
    step_of = step_of[~step_of.index.duplicated()]
    num_of = pd.Series(st["step_num"].to_numpy(), index=st["start_ns"].to_numpy())
    num_of = num_of[~num_of.index.duplicated()]
    dev = dev.assign(step_start=first.reindex(dev["k"]).to_numpy())
    dev = dev[dev["step_start"].isin(step_of.index)]
    out = []
    for device, d in dev.groupby("device", sort=True):
        d = d.sort_values("start_ns")
        ops = _device_ops(ev, st_, str(device))
        start = ops["start_ns"].to_numpy()
        times = _sweep(
            start,
            start + ops["dur_ps"].to_numpy() // 1000,
            _xla_types(ops, xla[events.index.get_indexer(ops.index)]),
            d["start_ns"].to_numpy(),
            d["end_ns"].to_numpy(),
        )
        rows = {
            "step": step_of.reindex(d["step_start"]).to_numpy(),
            "step_num": num_of.reindex(d["step_start"]).to_numpy(),
            "start_ns": d["start_ns"].to_numpy(),
            "step_time_ns": (d["end_ns"] - d["start_ns"]).to_numpy(),
        }
        out.append(_block(worker, str(device), rows, times, "xla_program", idle=True))
    return out


def _host_only(
    by_worker: dict[str, np.ndarray],
    typed: np.ndarray,
    on_device: np.ndarray,
    steps: pd.DataFrame,
    xla: bool,
) -> list[str]:
    """The workers of ``steps`` whose typed events are all on the host (a CPU worker), and
    that have some and no XLA program steps: their rows are one ``/host:CPU`` sweep over all
    their steps (``_host_rows``), sorted by name."""
    program = steps["method"].eq("xla_program").groupby(steps["worker"].astype(str)).all()
    out = []
    for worker in sorted(program.index):
        pos = by_worker.get(worker, np.empty(0, dtype=np.int64))
        pos = pos[typed[pos]]
        if len(pos) and not on_device[pos].any() and not (xla and program[worker]):
            out.append(worker)
    return out


def _host_rows(
    hosts: list[str],
    by_worker: dict[str, np.ndarray],
    steps: pd.DataFrame,
    etype: np.ndarray,
    all_start: np.ndarray,
    all_end: np.ndarray,
    window: tuple[np.ndarray, np.ndarray] | None,
) -> dict[str, Any]:
    """``step_breakdown``'s rows of the host-only workers ``hosts`` (``_host_only``) in one
    sweep, as a loop per worker gives them: each worker's events and steps are moved to a
    time range of its own (in worker order, apart from the others'), so one sorted sweep
    splits every worker's steps by that worker's events only. A sweep, a sort and a dozen
    pandas calls per worker cost 7 ms of each small host of a pod."""
    parts = [p[etype[p] >= 0] for p in (by_worker[w] for w in hosts)]  # typed events
    pos = np.concatenate(parts)
    event_host = np.repeat(np.arange(len(hosts)), [len(p) for p in parts])
    start, end = all_start[pos], all_end[pos]
    if window is not None:  # an event counts only inside its own step (``step_breakdown``)
        start = np.clip(start, window[0][pos], window[1][pos])
        end = np.clip(end, start, window[1][pos])
    host = pd.Index(hosts)
    step_host = host.get_indexer(steps["worker"].astype(str))
    keep = np.flatnonzero(step_host >= 0)
    order = keep[np.lexsort((steps["start_ns"].to_numpy()[keep], step_host[keep]))]
    st, step_host = steps.iloc[order], step_host[order]  # by host, then start
    st_start, st_end = st["start_ns"].to_numpy(np.int64), st["end_ns"].to_numpy(np.int64)
    # each host's first and last instant, of its events and its steps
    event_first = np.r_[0, np.cumsum(np.bincount(event_host, minlength=len(hosts)))[:-1]]
    step_first = np.r_[0, np.cumsum(np.bincount(step_host, minlength=len(hosts)))[:-1]]
    lo = np.minimum(
        np.minimum.reduceat(start, event_first), np.minimum.reduceat(st_start, step_first)
    )
    hi = np.maximum(np.maximum.reduceat(end, event_first), np.maximum.reduceat(st_end, step_first))
    base = np.r_[0, np.cumsum(hi - lo + 1)[:-1]]
    shift = base - lo
    times = _sweep(
        start + shift[event_host],
        end + shift[event_host],
        etype[pos],
        st_start + shift[step_host],
        st_end + shift[step_host],
    )
    rows = {
        "step": st["step"].to_numpy(),
        "step_num": st["step_num"].to_numpy(),
        "start_ns": st["start_ns"].to_numpy(),
        "step_time_ns": (st["end_ns"] - st["start_ns"]).to_numpy(),
    }
    workers = host.to_numpy(dtype=object)[step_host]
    return _block(workers, "/host:CPU", rows, times, st["method"].to_numpy(), True)


def _block(
    worker: str | np.ndarray,
    device: str,
    rows: dict[str, np.ndarray],
    times: np.ndarray,
    method: np.ndarray | str,
    split: bool = True,
    idle: bool = False,
) -> dict[str, Any]:
    """One worker x device's breakdown rows, as columns: ``rows`` (step, step_num, start_ns,
    step_time_ns) and the categories' times from the sweep's ``times``; unknown (NA) without
    ``split``; with ``idle`` (XLA program steps), a device's time with no op of it running is
    ``device_idle``, not ``all_others``."""
    n = len(rows["start_ns"])
    cols: dict[str, Any] = {
        "worker": np.full(n, worker, dtype=object) if isinstance(worker, str) else worker,
        "device": np.full(n, device, dtype=object),
        **rows,
    }
    for cat, members in CATEGORIES.items():
        cols[f"{cat}_ns"] = times[:, [P[m] for m in members]].sum(axis=1)
    if idle:
        cols["device_idle_ns"] = times[:, P["UNKNOWN"]]
        cols["all_others_ns"] = np.zeros(n, dtype=np.int64)
    cols["device_compute_16_ns"] = times[:, P["DEVICE_COMPUTE_16"]]
    cols["host_to_device_ns"] = times[:, P["HOST_TO_DEVICE"]]
    if not split:
        for col in [*CATEGORY_COLUMNS, *PART_COLUMNS]:
            cols[col] = pd.array([pd.NA] * n, dtype="Int64")
    cols["split"] = np.full(n, split)
    cols["method"] = np.full(n, method, dtype=object) if isinstance(method, str) else method
    return cols


def _frame_of(blocks: list[dict[str, Any]]) -> pd.DataFrame:
    """Blocks' columns end to end, as one frame (built once: a frame per block and a column
    set at a time cost 25 ms per worker)."""
    cols = {}
    for col in blocks[0]:
        parts = [b[col] for b in blocks]
        cols[col] = (
            np.concatenate(parts)
            if all(isinstance(p, np.ndarray) for p in parts)
            else pd.concat([pd.Series(p) for p in parts], ignore_index=True)
        )
    return pd.DataFrame(cols)


#: Event columns the per-device sweep reads (``_device_steps`` included).
_SWEPT_COLUMNS = ["plane", "line", "start_ns", "dur_ps", "group_id"]


def step_breakdown(
    events: pd.DataFrame,
    steps: pd.DataFrame,
    stats: pd.DataFrame | None = None,
    *,
    hlo_ops: pd.DataFrame | None = None,
    metadata_stats: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Category times per worker × device × step.

    Args:
        events: the ``events`` frame.
        steps: aligned steps (``analyzers.steps.align_steps``): worker, step, step_num,
            start_ns, end_ns, method, event_row.
        stats: the ``stats`` frame; with it, host events count only when they belong to a
            step (``analyzers.groups``: nesting and producer/consumer links from the step's
            event), which is how XProf attributes host time. Without it, only TF ops and the
            special host events count.
        hlo_ops, metadata_stats: the session's; with them, XLA ops are typed by their HLO
            instruction (``xla_types``): 16-bit compute by element type, host offload.

    Returns:
        One row per worker × device × step: ``worker, device, step, step_num, start_ns,
        step_time_ns`` + ``<category>_ns`` for the 9 categories + ``PART_COLUMNS``,
        ``split`` (False: categories unknown, Python-tracer-only worker) and ``method``.
    """
    grouped = None
    window_start = window_end = None
    if stats is not None and "event_row" in steps and len(steps):
        roots = steps["event_row"].to_numpy(dtype=np.int64)
        group = step_groups(events, stats, roots)
        grouped = group >= 0
        grouped |= events["group_id"].notna().to_numpy()  # groups XProf already assigned
        grouped[roots[steps["method"].to_numpy() != "group_id"]] = (
            False  # markers span the step: not activities
        )
        window_start, window_end = _own_step_windows(group, steps)
    xla = (
        xla_types(events, stats, metadata_stats, hlo_ops)
        if stats is not None
        else np.full(len(events), -1, dtype=np.int8)
    )
    etype = classify(events, grouped, xla)
    blocks: list[dict[str, Any]] = []
    by_worker = rows_by(events["worker"]) if len(steps) else {}
    # Read once for every worker: per event its start, end, plane code, whether on a device.
    all_start = events["start_ns"].to_numpy()
    all_end = all_start + events["dur_ps"].to_numpy() // 1000
    plane_codes = events["plane"].cat.codes.to_numpy()
    # Per category, not per row: a str per event cost 0.5 s on 1.2 M events.
    plane_names = np.append(events["plane"].cat.categories.astype(str).to_numpy(dtype=object), "")
    all_on_device = matches(events["plane"], "/device:", how="startswith")
    swept = events[_SWEPT_COLUMNS]  # the columns read below: a copy of every one cost 0.1 s
    typed = etype >= 0
    hosts = _host_only(by_worker, typed, all_on_device, steps, stats is not None)
    if hosts:
        window = None
        if window_start is not None and window_end is not None:
            window = (window_start, window_end)
        blocks.append(_host_rows(hosts, by_worker, steps, etype, all_start, all_end, window))
        steps = steps[~steps["worker"].astype(str).isin(hosts).to_numpy()]
    for worker, st in steps.groupby("worker", sort=True):
        st = st.sort_values("start_ns")
        if (st["method"] == "xla_program").all() and stats is not None:
            blocks.extend(_xla_rows(str(worker), events, stats, st, xla))
            continue
        pos = by_worker.get(str(worker), np.empty(0, dtype=np.int64))
        pos = pos[etype[pos] >= 0]  # the worker's typed events, by position
        types = etype[pos]
        start, end = all_start[pos], all_end[pos]
        if window_start is not None and window_end is not None:
            # An event counts only inside its own step: a step's late callback that runs
            # into the next step is not the next step's host compute (XProf's grouping).
            start = np.clip(start, window_start[pos], window_end[pos])
            end = np.clip(end, start, window_end[pos])
        plane = plane_names[plane_codes[pos]]
        on_device = all_on_device[pos]
        devices = sorted(set(plane[on_device])) or ["/host:CPU"]
        split = bool(len(pos))
        own = _device_steps(swept.iloc[pos[on_device]], st) if on_device.any() else {}
        for device in devices:
            st_d, sel = st, ~on_device | (plane == device)
            if device in own:  # the device's own span of each step it ran; its events only
                st_d, sel = own[device], plane == device
            elif device != "/host:CPU":  # no row where the device ran nothing in the step
                busy = _busy(start[plane == device], end[plane == device], st)
                st_d = st[busy]
            if st_d.empty:
                continue
            times = _sweep(
                start[sel],
                end[sel],
                types[sel],
                st_d["start_ns"].to_numpy(),
                st_d["end_ns"].to_numpy(),
            )
            rows = {
                "step": st_d["step"].to_numpy(),
                "step_num": st_d["step_num"].to_numpy(),
                "start_ns": st_d["start_ns"].to_numpy(),
                "step_time_ns": (st_d["end_ns"] - st_d["start_ns"]).to_numpy(),
            }
            method = st_d["method"].to_numpy()
            blocks.append(_block(str(worker), device, rows, times, method, split))
    if not blocks:  # typed as rows would be: an empty session's frame equals its workers'
        text = {c: pd.Series(dtype=str) for c in ("worker", "device")}
        ints = ["step", "step_num", "start_ns", "step_time_ns", *CATEGORY_COLUMNS]
        return pd.DataFrame(
            {
                **text,
                **{c: pd.Series(dtype="int64") for c in [*ints, *PART_COLUMNS]},
                "split": pd.Series(dtype=bool),
                "method": pd.Series(dtype=str),
            }
        )
    out = _frame_of(blocks)
    return out.sort_values(["start_ns", "worker", "device"], ignore_index=True)


def before_call_breakdown(
    events: pd.DataFrame,
    steps: pd.DataFrame,
    stats: pd.DataFrame | None = None,
    *,
    hlo_ops: pd.DataFrame | None = None,
    metadata_stats: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The categories of each step's time before its step function was called (``call_ns``
    of ``analyzers.steps``: callbacks, a loop's Python, an input wait outside the function),
    for host-traced workers: ``step_breakdown`` rows of the windows [step start, call) on the
    host (accelerator workers have none: their steps are split per device). Empty where no
    step calls its function after it starts."""
    empty = step_breakdown(events.iloc[:0], steps.iloc[:0])
    if "call_ns" not in steps or steps.empty:
        return empty
    call = steps["call_ns"].astype("Float64")
    windows = steps[(call > steps["start_ns"]).fillna(False).to_numpy()]
    if windows.empty:
        return empty
    windows = windows.assign(end_ns=windows["call_ns"].astype("int64"))
    out = step_breakdown(events, windows, stats, hlo_ops=hlo_ops, metadata_stats=metadata_stats)
    return out[out["device"] == "/host:CPU"].reset_index(drop=True)
