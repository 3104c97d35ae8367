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

from podscope.analyzers._match import group_ids, isin, matches
from podscope.analyzers.host_ops import BY, LEAD_COLUMNS, group_percentiles
from podscope.analyzers.lines import DERIVED_LINES
from podscope.analyzers.rule_inputs import op_counts, per_aligned_step
from podscope.trace_parsers.nesting import _column_kernels as kernels
from podscope.trace_parsers.nesting import self_times
from podscope.trace_parsers.tfop import parse_tf_op

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
#: The stats the op tables read from the ``stats`` frame: TPU ops' device time, and the HLO
#: instruction (and its program) of XLA kernels. ``podscope ops`` parses only these.
DEVICE_DURATION, HLO_OP, PROGRAM_ID = "device_duration_ps", "hlo_op", "program_id"
OP_STATS_KEYS = frozenset({DEVICE_DURATION, HLO_OP, PROGRAM_ID})


def op_events(
    events: pd.DataFrame,
    columns: list[str] | None = None,
    stats: pd.DataFrame | None = None,
    hlo_ops: pd.DataFrame | None = None,
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
        stats: the ``stats`` frame of the same frames (for device durations of XLA ops, and
            the ``hlo_op`` / ``program_id`` of XLA kernels).
        hlo_ops: the ``hlo_ops`` frame of the same frames: XLA kernels are named by the
            framework op of their HLO instruction (see ``_xla_kernels``).
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
    self_ps = self_times(ops)
    if xla_ops.any():  # XLA ops run one after another: overlaps are clock artifacts, not nesting
        self_ps = np.where(xla_ops[is_op], ops["dur_ps"].to_numpy(), self_ps)
    ops = ops.assign(op_self_ps=self_ps, device=ops["plane"])
    if xla_ops.any():
        ops = _hlo_ops(ops, xla_ops[is_op])
    if stats is not None:
        ops = _xla_kernels(ops, stats, hlo_ops, on_device[is_op])
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
    st = stats[isin(stats["key"], {DEVICE_DURATION}) & stats["int_value"].notna().to_numpy()]
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


def _row_stats(ops: pd.DataFrame, stats: pd.DataFrame, keys: set[str]) -> dict[str, np.ndarray]:
    """Per row of ``ops`` (labels of the events frame) the value of each stat in ``keys``:
    strings as objects (None where absent), integer stats as float (NaN where absent)."""
    st = stats[isin(stats["key"], keys)]
    pos = ops.index.get_indexer(st["event_row"].to_numpy())
    st, pos = st[pos >= 0], pos[pos >= 0]
    out: dict[str, np.ndarray] = {}
    for key in keys:
        one = (st["key"] == key).to_numpy()
        text = st["str_value"].astype(object).to_numpy()[one]
        if pd.isna(text).all():  # an integer stat
            col = np.full(len(ops), np.nan)
            col[pos[one]] = st["int_value"].to_numpy(dtype=np.float64, na_value=np.nan)[one]
        else:
            col = np.full(len(ops), None, dtype=object)
            col[pos[one]] = text
        out[key] = col
    return out


def _xla_kernels(
    ops: pd.DataFrame, stats: pd.DataFrame, hlo: pd.DataFrame | None, on_device: np.ndarray
) -> pd.DataFrame:
    """Device kernels of XLA programs (an ``hlo_op`` stat) named as XProf's framework_op_stats
    names them: by the framework op their HLO instruction was lowered from (its metadata in
    the ``hlo_ops`` frame: ``jit(_mean)/reduce_sum``), else by the instruction itself (op
    ``copy.1``, type its opcode ``copy``; XProf: type ``Unknown``). Their ``tf_op``
    (``XlaModule:``) names the launch, not the op.

    Adds ``device_op``, the op as the device ran it: ``program_id/hlo_op`` for XLA kernels,
    the kernel name for other device events. XProf counts an op's occurrences as the most
    times any one of its device ops ran (``op_stats`` does the same)."""
    if not on_device.any():  # a host-only capture: an op's occurrences are its events
        return ops
    name = ops["name"]
    # Kernel names by code (host rows -1): no per-row strings for the common case.
    codes = np.where(on_device, name.cat.codes.to_numpy(), -1)
    plain = pd.Categorical.from_codes(codes, categories=name.cat.categories)
    if HLO_OP not in stats["key"].cat.categories:
        return ops.assign(device_op=plain)
    got = _row_stats(ops, stats, {HLO_OP, PROGRAM_ID})
    rows = np.flatnonzero(on_device & pd.notna(got["hlo_op"]))
    if not len(rows):
        return ops.assign(device_op=plain)
    device_op = np.asarray(plain, dtype=object)
    program = np.nan_to_num(got["program_id"][rows], nan=-1).astype(np.int64)
    worker = ops["worker"].astype(str).to_numpy()[rows]
    keys = pd.DataFrame({"worker": worker, "program_id": program, "hlo_op": got["hlo_op"][rows]})
    distinct = keys.drop_duplicates()
    if hlo is not None and len(hlo):
        meta = hlo[["worker", "program_id", "hlo_op", "opcode", "op_name", "op_type"]].astype(
            {"worker": str, "hlo_op": str, "opcode": str, "op_name": str, "op_type": str}
        )
        distinct = distinct.merge(meta, on=["worker", "program_id", "hlo_op"], how="left")
    named = []
    for d in distinct.itertuples(index=False):
        hlo_op = str(d.hlo_op)
        opcode = getattr(d, "opcode", None)
        if not isinstance(opcode, str):  # no HLO module for this program: the name's stem
            opcode = hlo_op.rsplit(".", 1)[0] if hlo_op[-1:].isdigit() else hlo_op
        provenance = (
            f"{d.op_name}:{d.op_type}" if isinstance(getattr(d, "op_name", None), str) else ":"
        )
        if provenance == ":":  # no framework op: the HLO instruction (XProf's rule)
            named.append((hlo_op, opcode))
        else:
            named.append(parse_tf_op(provenance) or (provenance, "Unknown"))
    distinct["n_name"], distinct["n_type"] = zip(*named, strict=True)
    found = keys.merge(distinct, on=["worker", "program_id", "hlo_op"], how="left")
    op_name = ops["op_name"].astype(object).to_numpy().copy()
    op_type = ops["op_type"].astype(object).to_numpy().copy()
    op_name[rows], op_type[rows] = found["n_name"].to_numpy(), found["n_type"].to_numpy()
    device_op[rows] = [f"{p}/{h}" for p, h in zip(program, keys["hlo_op"], strict=True)]
    return ops.assign(
        op_name=pd.Categorical(op_name),
        op_type=pd.Categorical(op_type),
        device_op=pd.Categorical(device_op),
    )


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


def _aggregate(frame: pd.DataFrame, gid: np.ndarray, groups: int) -> pd.DataFrame:
    """Per group id (0..groups-1): occurrences, total, self, min, max, eager share, flops,
    bytes and the p50/p95 of ``dur_ps`` (linear interpolation, as pandas' ``quantile``).

    One C pass (``group_stats``): sums in row order, exact for integers, and each group's
    percentile ranks found by selection rather than a sort. pandas' ``groupby.agg`` and its
    ``quantile`` took 0.1 s per table on a 1.2 M-event worker, and numpy's sort of the
    durations by group 0.04 s; the pass takes a few ms."""
    ints = np.zeros((10, groups), dtype=np.int64)
    floats = np.zeros((4, groups), dtype=np.float64)
    kernels.group_stats(
        np.ascontiguousarray(gid, dtype=np.int64),
        np.ascontiguousarray(frame["dur_ps"].to_numpy(dtype=np.int64)),
        np.ascontiguousarray(frame["op_self_ps"].to_numpy(dtype=np.int64)),
        np.ascontiguousarray(frame["eager"].to_numpy(dtype=bool)).view(np.int8),
        np.ascontiguousarray(frame["flops_f"].to_numpy(dtype=np.float64)),
        np.ascontiguousarray(frame["bytes_f"].to_numpy(dtype=np.float64)),
        ints,
        floats,
    )
    count = ints[0]
    out = pd.DataFrame(
        {
            "occurrences": count,
            "total_ps": ints[1],
            "self_ps": ints[2],
            "min_ps": ints[3],
            "max_ps": ints[4],
            "eager_share": ints[5] / count,
            "flops": floats[0],
            "bytes_accessed": floats[1],
        }
    )
    out["p50_ps"], out["p95_ps"] = group_percentiles(ints, floats)
    return out


def _executions(frame: pd.DataFrame, gid: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """An op's device events as its executions, where one execution launches several device
    ops (kernels, or XLA instructions): the k-th event of each of its device ops in time order
    make its k-th execution (XProf's rule: an op runs as often as its most frequent device op).
    Statistics are then over executions, one unit for all of them (an average above the
    maximum came from averaging per execution and taking extremes per kernel). Ops with one
    device op are left as they are."""
    sub = frame["device_op"].cat.codes.to_numpy()
    several = pd.Series(sub).groupby(gid).nunique().to_numpy()[gid] > 1
    if not several.any():
        return frame, gid
    order = np.lexsort((frame["start_ns"].to_numpy(), sub, gid))
    k = np.empty(len(frame), dtype=np.int64)
    k[order] = pd.Series(sub[order]).groupby([gid[order], sub[order]]).cumcount().to_numpy()
    k[~several] = -1 - np.arange(int((~several).sum()))  # one device op: its events as they are
    parts = pd.DataFrame(
        {
            "gid": gid,
            "k": k,
            "dur_ps": frame["dur_ps"].to_numpy(np.int64),
            "op_self_ps": frame["op_self_ps"].to_numpy(np.int64),
            "eager": frame["eager"].to_numpy(bool),
            "flops_f": frame["flops_f"].to_numpy(np.float64),
            "bytes_f": frame["bytes_f"].to_numpy(np.float64),
        }
    )
    runs = parts.groupby(["gid", "k"], sort=False).agg(
        dur_ps=("dur_ps", "sum"),
        op_self_ps=("op_self_ps", "sum"),
        eager=("eager", "max"),
        flops_f=("flops_f", "sum"),
        bytes_f=("bytes_f", "sum"),
    )
    return runs.reset_index(drop=True), runs.index.get_level_values("gid").to_numpy(np.int64)


def op_stats(
    events: pd.DataFrame,
    *,
    by: str = "op",
    worker: str | None = None,
    stats: pd.DataFrame | None = None,
    hlo_ops: pd.DataFrame | None = None,
    ops: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per worker × device × op (``by``: op name+type, op type, or kernel name).

    Args:
        events: the ``events`` frame.
        by: ``op`` (op_type + op_name), ``type`` (op_type) or ``kernel`` (kernel name, device
            events only).
        worker: only this worker.
        stats: the ``stats`` frame, for TPU ops' device durations and XLA kernels' HLO
            instructions (see ``op_events``).
        hlo_ops: the ``hlo_ops`` frame, for XLA kernels' framework ops.
        ops: ``op_events`` of the same arguments when the caller has them (computed once for
            every table instead of once per table).

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
    if ops is None:
        ops = op_events(events, _OP_STATS_COLUMNS, stats, hlo_ops)
    if worker is not None:
        ops = ops[ops["worker"] == worker]
    if by == "kernel":  # GPU kernels: launched with dimensions (not copies, not TPU ops)
        ops = ops[
            matches(ops["plane"], "/device:GPU", how="startswith")
            & ops["kernel_details"].notna().to_numpy()
        ]
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
    gid, first_rows = group_ids(frame, keys)
    runs, run_gid = _executions(frame, gid) if by == "op" and "device_op" in frame else (frame, gid)
    out = _aggregate(runs, run_gid, len(first_rows))
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
    lead = [*keys, *LEAD_COLUMNS]
    return out[lead + [c for c in out.columns if c not in lead]]


def op_comparison(table: pd.DataFrame, top: int = 50) -> pd.DataFrame:
    """The same op across workers: self time per worker (columns) and the spread.

    Args:
        table: ``op_stats(..., by="op")``.
        top: keep the ``top`` ops with the largest spread.

    Returns:
        Index ``(op_type, op_name)``; one ``<worker>`` column of self ps each, then
        ``max_ps, min_ps, spread_ps, ratio`` (max / min), ``median_ps`` and ``slowest`` (the
        worker of ``max_ps``: what a pod's page shows instead of hundreds of columns), sorted
        by spread.
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
    stats["median_ps"] = wide.median(axis=1)
    stats["slowest"] = wide.idxmax(axis=1).astype(str) if wide.shape[1] else ""
    return wide.join(stats).sort_values("spread_ps", ascending=False).head(top)


ACROSS_COLUMNS = [
    "device",
    "op_type",
    "op_name",
    "workers",
    "occurrences",
    "total_ps",
    "self_ps",
    "self_per_worker_ps",
    "self_per_step_ps",
    "avg_ps",
    "median_worker_ps",
    "max_worker_ps",
    "spread",
    "slowest_worker",
    "self_share",
]


def across_workers(table: pd.DataFrame) -> pd.DataFrame:
    """A pod's op table: each op once, across the workers that ran it, instead of one row
    per worker and op (512 hosts made 51,712 rows whose names looked alike, and a "top 20" of
    one all-reduce twenty times).

    Args:
        table: ``op_stats`` rows per worker (``by`` op or type), with ``self_per_step_ps``
            (``analyzers.compare.with_per_step``) when there are steps.

    Returns:
        Columns ``ACROSS_COLUMNS``, most self time first: ``workers`` that ran it; the sums of
        ``occurrences``, ``total_ps``, ``self_ps``; ``self_per_worker_ps`` their mean per
        worker; ``self_per_step_ps`` the workers' mean per step; ``avg_ps`` per occurrence;
        the spread across workers of each one's self time (``median_worker_ps``,
        ``max_worker_ps``, ``spread`` = max / median) and the ``slowest_worker``;
        ``self_share`` of all self time.
    """
    keys = ["device", "op_type", "op_name"]
    if table.empty:
        return pd.DataFrame(columns=ACROSS_COLUMNS)
    t = table.assign(**{k: table[k].astype(str) for k in [*keys, "worker"]})
    per_worker = t.groupby([*keys, "worker"], sort=False, observed=True)["self_ps"].sum()
    by_op = per_worker.groupby(level=keys, sort=False)
    g = t.groupby(keys, sort=False, observed=True)
    out = pd.DataFrame(
        {
            "workers": g["worker"].nunique(),
            "occurrences": g["occurrences"].sum(),
            "total_ps": g["total_ps"].sum(),
            "self_ps": g["self_ps"].sum(),
            "self_per_step_ps": g["self_per_step_ps"].mean() if "self_per_step_ps" in t else np.nan,
            "median_worker_ps": by_op.median(),
            "max_worker_ps": by_op.max(),
            "slowest_worker": by_op.idxmax().map(lambda k: k[-1]),
        }
    )
    out["self_per_worker_ps"] = out["self_ps"] / out["workers"]
    out["avg_ps"] = out["total_ps"] / out["occurrences"].where(out["occurrences"] > 0)
    out["spread"] = out["max_worker_ps"] / out["median_worker_ps"].where(
        out["median_worker_ps"] > 0
    )
    total = float(out["self_ps"].sum())
    out["self_share"] = out["self_ps"] / total if total > 0 else 0.0
    out = out.reset_index()
    return out.sort_values("self_ps", ascending=False, ignore_index=True)[ACROSS_COLUMNS]


KERNEL_GROUP_COLUMNS = [
    "worker",
    "device",
    "kernel",
    "ops",
    "occurrences",
    "total_ps",
    "self_ps",
    "avg_ps",
    "max_ps",
    "self_share",
    "tensor_core",
]


def kernel_groups(kernels: pd.DataFrame) -> pd.DataFrame:
    """GPU kernels grouped by name per worker and device: one row per kernel whatever ops
    launched it (``op_stats(by="kernel")`` has one row per kernel × op).

    Args:
        kernels: ``op_stats(..., by="kernel")``.

    Returns:
        ``worker, device, kernel, ops`` (how many ops launched it), ``occurrences, total_ps,
        self_ps, avg_ps, max_ps, self_share`` (of the worker's kernel time), ``tensor_core``,
        most self time first.

        ======  ==========  ========  ===  ===========  ========
        worker  device      kernel    ops  occurrences  self_ps
        ======  ==========  ========  ===  ===========  ========
        w0      GPU:0       gemm_128  3    300          9e9
        ======  ==========  ========  ===  ===========  ========
    """
    keys = ["worker", "device", "kernel"]
    if kernels.empty:
        return pd.DataFrame(columns=KERNEL_GROUP_COLUMNS)
    g = kernels.groupby(keys, observed=True, sort=False)
    out = g.agg(
        ops=("op_name", "nunique"),
        occurrences=("occurrences", "sum"),
        total_ps=("total_ps", "sum"),
        self_ps=("self_ps", "sum"),
        max_ps=("max_ps", "max"),
        tensor_core=("tensor_core", "any"),
    ).reset_index()
    out["avg_ps"] = out["total_ps"] // out["occurrences"].clip(lower=1)
    per_worker = out.groupby("worker", observed=True)["self_ps"].transform("sum")
    out["self_share"] = out["self_ps"] / per_worker.where(per_worker > 0)
    cols = KERNEL_GROUP_COLUMNS
    return out[cols].sort_values("self_ps", ascending=False, kind="stable").reset_index(drop=True)


MEMORY_COLUMNS = [
    "worker",
    "allocator",
    "t_ns",
    "bytes_in_use",
    "peak_bytes_in_use",
    "event",
    "requested_bytes",
    "tf_op",
    "addr",
    "allocation_bytes",
    "fragmentation",
    "bytes_available",
    "data_type",
    "shape",
    "region_type",
    "seq",
]


#: The allocator event stats read: the columns' own, plus what bytes in use and the
#: allocator's name are made of.
_MEMORY_STATS = frozenset(MEMORY_COLUMNS[4:]) - {"event", "tf_op", "seq"} | {
    "bytes_allocated",
    "bytes_reserved",
    "allocator_name",
    "index_on_host",
}


def _row_in_worker(worker: pd.Series, rows: np.ndarray) -> np.ndarray:
    """Positions ``rows`` (of a frame whose workers' rows follow each other, as ``merge`` puts
    them), counted from the first row of their worker."""
    codes = pd.Categorical(worker).codes if not hasattr(worker, "cat") else worker.cat.codes
    codes = np.asarray(codes)
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    first = pd.Series(starts).groupby(codes[starts]).min()  # a worker's first run of rows
    return rows - first.reindex(codes[rows]).to_numpy(dtype=np.int64)


def memory_timeline(events: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """Bytes in use over time per worker and allocator, from TF's allocator events.

    Returns:
        Columns ``MEMORY_COLUMNS`` (one row per MemoryAllocation / MemoryDeallocation: bytes in
        use after it, the request, the op, the block's address and size, the allocator's
        fragmentation and free bytes then, the tensor's dtype enum, shape and region, and
        ``seq``, the event's place in its file), empty if the capture has no allocator events
        (TF records them only for BFC allocators: GPU hosts, or CPU with
        ``TF_CPU_ALLOCATOR_USE_BFC=true``). Sorted by worker, allocator and time.
    """
    is_mem = isin(events["name"], {"MemoryAllocation", "MemoryDeallocation"})
    mem = events[is_mem]
    if mem.empty:
        return pd.DataFrame(columns=MEMORY_COLUMNS)
    s = stats[stats["event_row"].isin(mem.index) & isin(stats["key"], _MEMORY_STATS)]
    nums = s.pivot_table(
        index="event_row", columns="key", values="int_value", aggfunc="first", observed=True
    ).reindex(mem.index)
    floats = s[s["key"] == "fragmentation"].drop_duplicates("event_row").set_index("event_row")
    text = s[s["key"].isin(["shape", "region_type"])].pivot_table(
        index="event_row", columns="key", values="str_value", aggfunc="first", observed=True
    )
    text = text.reindex(index=mem.index, columns=["shape", "region_type"])
    names = s[s["key"] == "allocator_name"].set_index("event_row")["str_value"].astype(str)
    # XProf's memory id: the allocator's name, else the device index (TPU runtimes).
    index = nums.get("index_on_host", pd.Series(np.nan, index=mem.index))
    allocator = names.reindex(mem.index).fillna(index.astype("Int64").astype(str)).fillna("?")
    # In use: heap allocated plus stack reserved (XProf's peakBytesInUse; GPUs reserve none).
    reserved = nums.get("bytes_reserved", pd.Series(0, index=mem.index)).fillna(0)
    out = pd.DataFrame(
        {
            "worker": mem["worker"].astype(str),
            "allocator": allocator.replace("<NA>", "?"),
            "t_ns": mem["start_ns"],
            "bytes_in_use": nums.get("bytes_allocated") + reserved
            if "bytes_allocated" in nums
            else None,
            "peak_bytes_in_use": nums.get("peak_bytes_in_use"),
            "event": mem["name"].astype(str),
            "requested_bytes": nums.get("requested_bytes"),
            "tf_op": mem["tf_op"].astype(str).where(mem["tf_op"].notna(), ""),
            "addr": nums.get("addr"),
            "allocation_bytes": nums.get("allocation_bytes"),
            # a double, or an int 0 when the allocator has no free chunk
            "fragmentation": floats["float_value"]
            .astype("Float64")
            .fillna(floats["int_value"].astype("Float64"))
            .reindex(mem.index)
            .astype("float64")
            if len(floats)
            else np.nan,
            "bytes_available": nums.get("bytes_available"),
            "data_type": nums.get("data_type"),
            "shape": text["shape"].astype(object),
            "region_type": text["region_type"].astype(object),
            # file order: the rows of its worker's events, as the parser read them (line by
            # line), from its first: the same whichever workers were parsed with it
            "seq": _row_in_worker(events["worker"], np.flatnonzero(is_mem)),
        },
        columns=MEMORY_COLUMNS,
    )
    return out.sort_values(["worker", "allocator", "t_ns", "seq"], ignore_index=True)


def ops_per_step(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Mean op executions per step, per worker and op type (ops that start inside a step;
    tf.data work excluded: it runs beside the step).

    Args:
        events: the ``events`` frame.
        steps: steps with ``worker, start_ns, end_ns`` (``analyzers.steps``).

    Returns:
        Columns ``worker, op_type, per_step`` sorted by count, highest first.
    """
    return per_aligned_step(op_counts(op_events(events), steps), steps)
