"""Op resource usage: which ops cost what, on which worker and device, and how workers differ.

    >>> table = op_stats(frames.events)                  # one row per worker × device × op
    >>> kernels = op_stats(frames.events, by="kernel")   # GPU kernels with launch dims, Tensor Cores
    >>> op_comparison(table)                              # the same op across workers

Self time is computed among op events only (an op's self time excludes nested ops, not the
runtime bookkeeping around it), which is what XProf's framework_op_stats reports; IDLE is
never a row. Times are integers in picoseconds (``*_ps``).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzers._match import isin, matches
from analyzers.breakdown import DERIVED_LINES
from trace_parsers.nesting import nest_events

BY = ("op", "type", "kernel")
#: Kernel names that use Tensor Cores (NVIDIA naming: mma shapes and generators).
TENSOR_CORE_KERNEL = r"(?i)(?:h884|s884|h1688|s1688|i8816|hmma|xmma_gemm|16816|tensorop|wmma|_tc_|cutlass.*(?:1688|16816|884))"
#: TF op types whose kernels can use Tensor Cores (TF GPU performance guide).
TENSOR_CORE_ELIGIBLE = frozenset(
    {
        "Conv2D",
        "Conv2DBackpropInput",
        "Conv2DBackpropFilter",
        "Conv3D",
        "DepthwiseConv2dNative",
        "MatMul",
        "BatchMatMul",
        "BatchMatMulV2",
        "BatchMatMulV3",
        "_FusedMatMul",
        "FusedMatMul",
        "_FusedConv2D",
        "CudnnRNN",
        "CudnnRNNV2",
        "CudnnRNNV3",
        "XlaDot",
        "Einsum",
    }
)
#: Event columns op_stats reads (op_events and its kernel → launch matching included).
_OP_STATS_COLUMNS = [
    "worker",
    "plane",
    "line_id",
    "name",
    "start_ns",
    "dur_ps",
    "correlation_id",
    "is_eager",
    "flops",
    "bytes_accessed",
    "kernel_details",
    "op_name",
    "op_type",
]
_KERNEL_FIELDS = ("regs", "shm", "static_shared", "dynamic_shared", "occ_pct")


def op_events(
    events: pd.DataFrame, columns: list[str] | None = None, stats: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Events that are ops: host TF ops (``name:Type`` or ``tf_op``), device kernels and copies
    (derived device lines excluded, Python tracer events excluded), with ``op_self_ps``.

    A device plane whose only events are on derived lines (a TPU: no stream lines) has its ops
    on the ``XLA Ops`` line; those count, named by their TF/JAX op (``tf_op``) or else by the
    HLO instruction (``%copy-done.4 = … copy-done(…)`` → op ``copy-done.4``, type
    ``copy-done``), as XProf's framework_op_stats names them. With ``stats``, their time is
    the ``device_duration_ps`` stat, as XProf counts it: the XLA Ops line's event can be longer
    (on the public TPU sample one copy-done event lasts 299 ms, its device time 194 ms).

    Args:
        events: the ``events`` frame.
        columns: keep only these columns of it (the rows are copied: fewer columns, less work).
        stats: the ``stats`` frame of the same frames (for device durations of XLA ops).
    """
    on_device = matches(events["plane"], "/device:", how="startswith")
    derived = isin(events["line"], DERIVED_LINES)
    xla_ops = _xla_op_rows(events, on_device & ~derived)
    derived &= ~xla_ops
    python = matches(events["name"], "$", how="startswith")
    is_op = (events["op_type"].notna().to_numpy() | on_device) & ~derived & ~python
    ops = (events if columns is None else events[columns])[is_op]
    if xla_ops.any() and stats is not None:
        ops = ops.assign(dur_ps=_device_durations(events, stats, xla_ops)[is_op])
    self_ps = nest_events(ops)["self_ps"].to_numpy()
    if xla_ops.any():  # XLA ops run one after another: overlaps are clock artifacts, not nesting
        self_ps = np.where(xla_ops[is_op], ops["dur_ps"].to_numpy(), self_ps)
    ops = ops.assign(op_self_ps=self_ps, device=ops["plane"])
    if xla_ops.any():
        ops = _hlo_ops(ops, xla_ops[is_op])
    return _ops_of_kernels(events, ops, on_device[is_op])


def _xla_op_rows(events: pd.DataFrame, device_rows: np.ndarray) -> np.ndarray:
    """Rows on the ``XLA Ops`` line of device planes without events on other device lines."""
    on_line = isin(events["line"], {"XLA Ops"})
    if not on_line.any():
        return on_line
    plane = (
        events["worker"].cat.codes.to_numpy().astype(np.int64)
        * (len(events["plane"].cat.categories) + 1)
        + events["plane"].cat.codes.to_numpy()
    )
    return on_line & ~np.isin(plane, np.unique(plane[device_rows]))


def _device_durations(events: pd.DataFrame, stats: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """``dur_ps`` with the ``device_duration_ps`` stat of ``rows`` where they have one."""
    dur = events["dur_ps"].to_numpy().copy()
    st = stats[isin(stats["key"], {"device_duration_ps"}) & stats["int_value"].notna().to_numpy()]
    pos = st["event_row"].to_numpy()
    if not isinstance(events.index, pd.RangeIndex) or events.index.start != 0:
        pos = events.index.get_indexer(pos)  # a filtered frame: rows by label
    ok = (pos >= 0) & (pos < len(dur))
    pos, value = pos[ok], st["int_value"].to_numpy(dtype=np.int64, na_value=0)[ok]
    keep = rows[pos]
    dur[pos[keep]] = value[keep]
    return dur


_HLO = re.compile(r"%?([^\s=]+) = .*? ([a-z][a-z0-9-]*)\(", re.S)


def _hlo_ops(ops: pd.DataFrame, xla: np.ndarray) -> pd.DataFrame:
    """XLA Ops rows without a TF/JAX op: op name and type from the HLO instruction text."""
    need = xla & ops["op_type"].isna().to_numpy()
    if not need.any():
        return ops
    names = ops["name"].cat.categories.astype(str)
    parsed = [_HLO.match(n) for n in names]
    codes = ops["name"].cat.codes.to_numpy()[need]
    op_name = ops["op_name"].astype(object).to_numpy().copy()
    op_type = ops["op_type"].astype(object).to_numpy().copy()
    op_name[need] = np.array([m.group(1) if m else n for m, n in zip(parsed, names, strict=True)])[
        codes
    ]
    op_type[need] = np.array([m.group(2) if m else "(device)" for m in parsed], dtype=object)[codes]
    return ops.assign(op_name=pd.Categorical(op_name), op_type=pd.Categorical(op_type))


def _ops_of_kernels(events: pd.DataFrame, ops: pd.DataFrame, on_device: np.ndarray) -> pd.DataFrame:
    """Device events without a ``tf_op`` get the op of their host launch: the host event with
    the same (worker, correlation_id), or its nearest enclosing TF op (up to 4 levels up)."""
    need = on_device & ops["op_type"].isna().to_numpy() & ops["correlation_id"].notna().to_numpy()
    if not need.any():
        return ops
    host = events[
        events["correlation_id"].notna() & ~matches(events["plane"], "/device:", how="startswith")
    ]
    parent = events["parent"].to_numpy()
    has_op = events["op_type"].notna().to_numpy()
    row = host.index.to_numpy()
    for _ in range(4):  # climb to the enclosing op where the launch itself is not one
        climb = ~has_op[row] & (parent[row] >= 0)
        row = np.where(climb, parent[row], row)
    launch = pd.DataFrame(
        {
            "worker": host["worker"].astype(str).to_numpy(),
            "correlation_id": host["correlation_id"].to_numpy(),
            "l_name": events["op_name"].to_numpy()[row],
            "l_type": events["op_type"].to_numpy()[row],
        }
    )
    launch = launch.dropna(subset=["l_type"]).drop_duplicates(["worker", "correlation_id"])
    key = pd.DataFrame(
        {
            "worker": ops["worker"].astype(str).to_numpy(),
            "correlation_id": ops["correlation_id"].to_numpy(),
        }
    )
    found = key.merge(launch, on=["worker", "correlation_id"], how="left")
    fill = need & found["l_type"].notna().to_numpy()
    op_name = ops["op_name"].astype(object).to_numpy().copy()
    op_type = ops["op_type"].astype(object).to_numpy().copy()
    op_name[fill], op_type[fill] = (
        found["l_name"].to_numpy()[fill],
        found["l_type"].to_numpy()[fill],
    )
    return ops.assign(op_name=pd.Categorical(op_name), op_type=pd.Categorical(op_type))


def _group_ids(frame: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Group id per row over the categorical ``keys`` (ids in order of first appearance, as
    ``groupby(sort=False)``) and each group's first row. One int64 key mixes the category
    codes, so rows are hashed once instead of grouping on several categoricals."""
    cols = [
        c if isinstance(c.dtype, pd.CategoricalDtype) else c.astype("category")
        for c in (frame[k] for k in keys)
    ]
    codes = [c.cat.codes.to_numpy().astype(np.int64) + 1 for c in cols]
    radix = [len(c.cat.categories) + 1 for c in cols]
    if float(np.prod(np.array(radix, dtype=np.float64))) < 2.0**62:
        key = codes[0]
        for c, r in zip(codes[1:], radix[1:], strict=True):
            key = key * r + c
        gid = pd.factorize(key)[0]
    else:  # too many categories to mix into one int64
        gid = frame.groupby(keys, sort=False, observed=True).ngroup().to_numpy()
    seen = np.maximum.accumulate(np.r_[-1, gid[:-1]]) if len(gid) else gid
    return gid, np.flatnonzero(gid > seen)


def _filled(col: pd.Series, value: str) -> pd.Series:
    """The categorical ``col`` with missing values set to ``value`` (on codes, not rows)."""
    c = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
    if value not in c.cat.categories:
        c = c.cat.add_categories([value])
    return c.fillna(value)


def parse_kernel_details(details: pd.Series) -> pd.DataFrame:
    """``regs:38 shm:0 grid:160,1,1 block:1024,1,1`` (CUDA) / ROCm variants → typed columns,
    parsed once per distinct string. Garbage values (seen in real traces) become missing."""
    cats = (
        details.cat.categories
        if isinstance(details.dtype, pd.CategoricalDtype)
        else pd.Index(details.dropna().unique())
    )
    rows = []
    for text in cats:
        row: dict[str, float] = {}
        v: float
        for token in str(text).split():
            key, _, value = token.partition(":")
            if key in ("grid", "block"):
                dims = [int(v) if v.isdigit() else -1 for v in value.split(",")]
                for axis, v in zip("xyz", dims, strict=False):
                    row[f"{key}_{axis}"] = v if 0 <= v < 2**31 else np.nan
            elif key in _KERNEL_FIELDS and value.replace(".", "", 1).isdigit():
                v = float(value)
                row[key] = v if v < 2**31 else np.nan
        rows.append(row)
    table = pd.DataFrame(rows, index=cats).reindex(
        columns=[
            "regs",
            "shm",
            "static_shared",
            "dynamic_shared",
            "occ_pct",
            "grid_x",
            "grid_y",
            "grid_z",
            "block_x",
            "block_y",
            "block_z",
        ]
    )
    return (
        table.reindex(details.astype(object).to_numpy())
        .reset_index(drop=True)
        .set_axis(details.index)
    )


def op_stats(
    events: pd.DataFrame,
    *,
    by: str = "op",
    worker: str | None = None,
    stats: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per worker × device × op (``by``: op name+type, op type, or kernel name).

    Args:
        events: the ``events`` frame.
        by: ``op`` (op_type + op_name), ``type`` (op_type) or ``kernel`` (kernel name, device
            events only).
        worker: only this worker.
        stats: the ``stats`` frame, for TPU ops' device durations (see ``op_events``).

    Returns:
        Columns ``worker, device, op_type, op_name`` (``kernel`` for by=kernel), ``occurrences,
        total_ps, self_ps, avg_ps, min_ps, max_ps, p50_ps, p95_ps, self_share, cumulative_share,
        eager_share, flops, bytes_accessed, flops_per_s, bytes_per_s, intensity``; for kernels
        also launch dimensions and ``tensor_core`` / ``tc_eligible``. Sorted by self time per
        worker and device.

    Raises:
        ValueError: ``by`` is not one of ``BY``.
    """
    if by not in BY:
        raise ValueError(f"by must be one of {BY}, not {by!r}")
    ops = op_events(events, _OP_STATS_COLUMNS, stats)
    if worker is not None:
        ops = ops[ops["worker"] == worker]
    if by == "kernel":
        ops = ops[matches(ops["plane"], "/device:", how="startswith")]
        # The filtered rows' own column: an empty frame given another frame's column takes
        # that column's index (all rows came back).
        ops = ops.assign(kernel=ops["name"])
    keys = ["worker", "device"] + {
        "op": ["op_type", "op_name"],
        "type": ["op_type"],
        "kernel": ["kernel", "op_name", "op_type"],
    }[by]
    # Keys stay categorical while grouping (a per-row str conversion cost more than the
    # whole aggregation); the table, one row per op, gets plain strings at the end.
    frame = ops.assign(
        op_type=_filled(ops["op_type"], "(device)"),
        op_name=_filled(ops["op_name"], ""),
        eager=ops["is_eager"].to_numpy(dtype=bool, na_value=False)
        | matches(ops["name"], "EagerLocalExecute: ", how="startswith"),
        flops_f=ops["flops"].to_numpy(dtype=np.float64, na_value=0.0),
        bytes_f=ops["bytes_accessed"].to_numpy(dtype=np.float64, na_value=0.0),
    )
    missing = np.zeros(len(frame), dtype=bool)
    for k in keys:
        missing |= frame[k].isna().to_numpy()
    if missing.any():  # as groupby(dropna=True): rows without a key are in no group
        frame = frame[~missing]
    gid, first_rows = _group_ids(frame, keys)
    g = frame.groupby(gid, sort=False)
    out = g.agg(
        occurrences=("dur_ps", "size"),
        total_ps=("dur_ps", "sum"),
        self_ps=("op_self_ps", "sum"),
        min_ps=("dur_ps", "min"),
        max_ps=("dur_ps", "max"),
        eager_share=("eager", "mean"),
        flops=("flops_f", "sum"),
        bytes_accessed=("bytes_f", "sum"),
    )
    q = g["dur_ps"].quantile([0.5, 0.95]).unstack().reindex(columns=[0.5, 0.95])
    out["p50_ps"], out["p95_ps"] = q[0.5].round().astype("int64"), q[0.95].round().astype("int64")
    out["avg_ps"] = (out["total_ps"] / out["occurrences"]).round().astype("int64")
    names = frame[keys].iloc[first_rows].reset_index(drop=True).astype(str)
    out = pd.concat([names, out.reset_index(drop=True)], axis=1)
    seconds = out["total_ps"] / 1e12
    out["flops_per_s"] = (out["flops"] / seconds).where(out["flops"] > 0)
    out["bytes_per_s"] = (out["bytes_accessed"] / seconds).where(out["bytes_accessed"] > 0)
    out["intensity"] = (out["flops"] / out["bytes_accessed"]).where(
        (out["flops"] > 0) & (out["bytes_accessed"] > 0)
    )
    out = out.sort_values(
        ["worker", "device", "self_ps"], ascending=[True, True, False], ignore_index=True
    )
    per_device = out.groupby(["worker", "device"])["self_ps"]
    out["self_share"] = out["self_ps"] / per_device.transform("sum").replace(0, np.nan)
    out["cumulative_share"] = per_device.cumsum() / per_device.transform("sum").replace(0, np.nan)
    if by == "kernel":
        first = frame.groupby(keys, sort=False, observed=True)["kernel_details"].first()
        dims = parse_kernel_details(first.astype("category").reset_index(drop=True))
        dims.index = first.index
        out = out.merge(dims.reset_index().astype(dict.fromkeys(keys, str)), on=keys, how="left")
        out["tensor_core"] = out["kernel"].str.contains(TENSOR_CORE_KERNEL, regex=True)
        out["tc_eligible"] = out["op_type"].isin(TENSOR_CORE_ELIGIBLE)
    lead = [
        *keys,
        "occurrences",
        "total_ps",
        "self_ps",
        "avg_ps",
        "min_ps",
        "max_ps",
        "p50_ps",
        "p95_ps",
        "self_share",
        "cumulative_share",
        "eager_share",
    ]
    return out[lead + [c for c in out.columns if c not in lead]]


def op_comparison(table: pd.DataFrame, top: int = 50) -> pd.DataFrame:
    """The same op across workers: self time per worker (columns) and the spread.

    Args:
        table: ``op_stats(..., by="op")``.
        top: keep the ``top`` ops with the largest spread.

    Returns:
        Index ``(op_type, op_name)``; one ``<worker>`` column of self ps each, then
        ``max_ps, min_ps, spread_ps, ratio`` (max / min), sorted by spread.
    """
    wide = table.pivot_table(
        index=["op_type", "op_name"],
        columns="worker",
        values="self_ps",
        aggfunc="sum",
        fill_value=0,
    )
    stats = pd.DataFrame({"max_ps": wide.max(axis=1), "min_ps": wide.min(axis=1)})
    stats["spread_ps"] = stats["max_ps"] - stats["min_ps"]
    stats["ratio"] = stats["max_ps"] / stats["min_ps"].replace(0, np.nan)
    return wide.join(stats).sort_values("spread_ps", ascending=False).head(top)


def memory_timeline(events: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """Bytes in use over time per worker and allocator, from TF's allocator events.

    Returns:
        Columns ``worker, allocator, t_ns, bytes_in_use, peak_bytes_in_use, event,
        requested_bytes, tf_op`` (one row per MemoryAllocation / MemoryDeallocation), empty if
        the capture has no allocator events (TF records them only with memory profiling).
    """
    mem = events[isin(events["name"], {"MemoryAllocation", "MemoryDeallocation"})]
    if mem.empty:
        return pd.DataFrame(
            columns=[
                "worker",
                "allocator",
                "t_ns",
                "bytes_in_use",
                "peak_bytes_in_use",
                "event",
                "requested_bytes",
                "tf_op",
            ]
        )
    s = stats[
        stats["event_row"].isin(mem.index)
        & isin(
            stats["key"],
            {"bytes_allocated", "peak_bytes_in_use", "requested_bytes", "allocator_name"},
        )
    ]
    nums = s.pivot_table(
        index="event_row", columns="key", values="int_value", aggfunc="first", observed=True
    )
    names = s[s["key"] == "allocator_name"].set_index("event_row")["str_value"].astype(str)
    out = pd.DataFrame(
        {
            "worker": mem["worker"].astype(str),
            "allocator": names.reindex(mem.index).fillna("?"),
            "t_ns": mem["start_ns"],
            "bytes_in_use": nums.reindex(mem.index).get("bytes_allocated"),
            "peak_bytes_in_use": nums.reindex(mem.index).get("peak_bytes_in_use"),
            "event": mem["name"].astype(str),
            "requested_bytes": nums.reindex(mem.index).get("requested_bytes"),
            "tf_op": mem["tf_op"].astype(str).where(mem["tf_op"].notna(), ""),
        }
    )
    return out.sort_values(["worker", "allocator", "t_ns"], ignore_index=True)


def memory_peak(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per worker and allocator: the peak bytes in use, when, and which ops allocated most up
    to then (requested bytes of allocations before the peak, by ``tf_op``, top 10)."""
    rows = []
    for (worker, allocator), g in timeline.groupby(["worker", "allocator"]):
        g = g.dropna(subset=["bytes_in_use"])
        if g.empty:
            continue
        at = g.loc[g["bytes_in_use"].astype(float).idxmax()]
        before = g[(g["t_ns"] <= at["t_ns"]) & (g["event"] == "MemoryAllocation")]
        top = before.groupby("tf_op")["requested_bytes"].sum().nlargest(10)
        rows.append(
            {
                "worker": worker,
                "allocator": allocator,
                "peak_bytes": int(at["bytes_in_use"]),
                "peak_t_ns": int(at["t_ns"]),
                "top_ops": "; ".join(f"{k or '(none)'}: {int(v):,} B" for k, v in top.items()),
            }
        )
    return pd.DataFrame(rows, columns=["worker", "allocator", "peak_bytes", "peak_t_ns", "top_ops"])


def ops_per_step(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Mean op executions per step, per worker and op type (ops that start inside a step;
    tf.data work excluded).

    Args:
        events: the ``events`` frame.
        steps: steps with ``worker, start_ns, end_ns`` (``analyzers.steps``).

    Returns:
        Columns ``worker, op_type, per_step`` sorted by count, highest first.
    """
    ops = op_events(events)
    # Input-pipeline work (tf.data iterators and map functions on tf_data threads) runs beside
    # the step, not in it.
    ops = ops[
        (ops["op_type"] != "Dataset").to_numpy()
        & ~matches(ops["line"], "tf_data", how="startswith")
    ]
    rows = []
    for worker, st in steps.groupby("worker"):
        st = st.sort_values("start_ns")
        w = ops[ops["worker"] == worker]
        k = np.searchsorted(st["start_ns"].to_numpy(), w["start_ns"].to_numpy(), side="right") - 1
        inside = (k >= 0) & (
            w["start_ns"].to_numpy() < st["end_ns"].to_numpy()[np.clip(k, 0, None)]
        )
        counts = w[inside].groupby(w["op_type"].astype(str)[inside]).size() / len(st)
        rows += [(worker, t, float(c)) for t, c in counts.items()]
    out = pd.DataFrame(rows, columns=["worker", "op_type", "per_step"])
    return out.sort_values(["worker", "per_step"], ascending=[True, False], ignore_index=True)
