"""XLA ops (HLO instructions) as XProf's ``hlo_stats`` counts them, and more: per device, per
execution of their program, on XLA:CPU captures too, and two sessions op by op.

**Occurrences**, as XProf counts them:

* a TPU plane's ``XLA Ops`` line: one per event, timed by its device span (the
  ``device_offset_ps`` / ``device_duration_ps`` stats); an op's self time leaves out the ops
  its span contains; program and instruction from the event type's ``program_id`` and name;
* device kernels (GPU, ROCm) and XLA:CPU thunks that carry ``hlo_op`` and ``program_id``
  stats: consecutive events of one line with the same instruction and step group are one
  occurrence (an instruction's kernels), timed by the sum of their durations.

**Costs** per occurrence: on a TPU the event type's own ``flops``, ``model_flops``,
``bytes_accessed`` and memory-space breakdown; elsewhere XLA's cost rules over the program
the trace carries (``trace_parsers.hlo_cost``), else the event's ``flops`` stat. Rates divide
the totals by the total time (XProf's rule: an op's FLOPs include its nested ops'), ``bound_by``
is the resource with the highest utilization against the device's peaks
(``analyzers.roofline``).

    >>> occ = xla_op_occurrences(frames.events, frames.stats, frames.metadata_stats)
    >>> table = hlo_stats(occ, frames.hlo_ops, frames.metadata_stats, device_peaks(frames.plane_stats))
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from podscope.analyzers._match import isin, matches
from podscope.analyzers.lines import DERIVED_LINES
from podscope.analyzers.roofline import GIB
from podscope.trace_parsers.nesting import self_times
from podscope.trace_parsers.schema import COSTED_BEYOND_XPROF, HOST_MEMORY_SPACE

OCCURRENCE_COLUMNS = [
    "worker",
    "device",
    "program_id",
    "hlo_op",
    "start_ns",
    "time_ps",
    "self_ps",
    "metadata_id",
]
HLO_COLUMNS = [
    "worker",
    "device",
    "program_id",
    "program",
    "hlo_op_name",
    "category",
    "expression",
    "framework_op",
    "occurrences",
    "total_time_us",
    "avg_time_us",
    "total_self_time_us",
    "avg_self_time_us",
    "self_time_percent",
    "cumulative_self_time_percent",
    "xla_time_share",
    "cumulative_xla_time_share",
    "model_flop_rate_gflops",
    "measured_flop_rate_gflops",
    "memory_bw_gibs",
    "hbm_bw_gibs",
    "operational_intensity",
    "bound_by",
    "roofline_efficiency",
    "above_peak",
    "source",
    "source_stack",
    "compute_dtype",
    "rematerialized",
    "flops",
    "bytes_accessed",
    "flops_source",
]
_XLA_OPS = "XLA Ops"
#: An expression calling a library PodScope costs by its shapes where XProf shows 0 FLOPs.
_BEYOND_XPROF = "|".join(
    re.escape(f'custom_call_target="{t}"') for t in sorted(COSTED_BEYOND_XPROF)
)
_U64 = 1 << 64
#: (peak column, utilization's bytes column, name) of the bandwidths bound_by compares.
_TPU_MEMORIES = (
    ("peak_cmem_read_bw_gibs", "cmem_read_bytes", "CMEM Read"),
    ("peak_cmem_write_bw_gibs", "cmem_write_bytes", "CMEM Write"),
    ("peak_vmem_read_bw_gibs", "vmem_read_bytes", "VMEM Read"),
    ("peak_vmem_write_bw_gibs", "vmem_write_bytes", "VMEM Write"),
)
_COSTS = ("flops", "device_flops", "bytes_accessed", "hbm_bytes", *(b for _, b, _ in _TPU_MEMORIES))


def unsigned_id(value: int) -> int:
    """A program id as XLA prints it: TPU ids are unsigned 64-bit, stored signed."""
    return int(value) % _U64


def _keyed_rows(events: pd.DataFrame, stats: pd.DataFrame, key: str) -> np.ndarray:
    """The rows of ``events`` with stat ``key``, sorted (``intersect1d`` with every event row
    sorted them all: 0.13 s a call on a batch of CPU hosts that have none)."""
    keyed = np.unique(stats[isin(stats["key"], {key})]["event_row"].to_numpy())
    return keyed[events.index.get_indexer(keyed) >= 0]


def _event_stat(stats: pd.DataFrame, key: str, rows: np.ndarray, column: str) -> np.ndarray:
    """Stat ``key``'s ``column`` per event row of ``rows`` (labels), NA where unset."""
    sel = stats[isin(stats["key"], {key})]
    sel = sel[np.isin(sel["event_row"].to_numpy(), rows)].drop_duplicates("event_row")
    return sel.set_index("event_row")[column].reindex(rows).to_numpy()


def _tpu_program_ids(ev: pd.DataFrame, metadata_stats: pd.DataFrame) -> Any:
    """Per TPU op event: the ``program_id`` its event type states (an Int64 array, NA where
    none: 64-bit ids do not survive a float)."""
    meta = metadata_stats[isin(metadata_stats["key"], {"program_id"})]
    key = ["worker", "plane", "metadata_id"]
    program = (
        meta.assign(worker=meta["worker"].astype(str), plane=meta["plane"].astype(str))
        .drop_duplicates(key)
        .set_index(key)["int_value"]
    )
    ids = pd.MultiIndex.from_arrays(
        [ev["worker"].astype(str), ev["plane"].astype(str), ev["metadata_id"].astype("int64")]
    )
    return pd.array(program.reindex(ids).to_numpy(), dtype="Int64")


def _tpu_op_names(ev: pd.DataFrame) -> np.ndarray:
    """A TPU op event's instruction: its display name, else the name its HLO text starts with."""
    shown = ev["display_name"].astype(str)
    text = ev["name"].astype(str).str.extract(r"^%?([^\s=]+)", expand=False)
    return shown.where(shown != "", text).to_numpy(dtype=object)


def event_instructions(
    events: pd.DataFrame, stats: pd.DataFrame, metadata_stats: pd.DataFrame | None
) -> pd.DataFrame:
    """The HLO instruction of every event that is an XLA op: a TPU's op-line events (program
    from their event type, instruction from their name), and events with ``hlo_op`` and
    ``program_id`` stats (GPU kernels, XLA:CPU thunks).

    Returns:
        Columns ``row`` (the event's label), ``worker``, ``program_id`` (int64), ``hlo_op``.
    """
    cols = ["row", "worker", "program_id", "hlo_op"]
    parts = []
    tpu = events[
        isin(events["line"], {_XLA_OPS, "Async XLA Ops"})
        & matches(events["plane"], "/device:TPU", how="startswith")
    ]
    if len(tpu) and metadata_stats is not None:
        parts.append(
            pd.DataFrame(
                {
                    "row": tpu.index.to_numpy(),
                    "worker": tpu["worker"].astype(str).to_numpy(),
                    "program_id": _tpu_program_ids(tpu, metadata_stats),
                    "hlo_op": _tpu_op_names(tpu),
                }
            )
        )
    rows = _keyed_rows(events, stats, "hlo_op")
    if len(rows):
        op = pd.Series(_event_stat(stats, "hlo_op", rows, "str_value"), dtype="object")
        parts.append(
            pd.DataFrame(
                {
                    "row": rows,
                    "worker": events.loc[rows, "worker"].astype(str).to_numpy(),
                    "program_id": pd.array(
                        _event_stat(stats, "program_id", rows, "int_value"), dtype="Int64"
                    ),
                    "hlo_op": op.astype(str).str.rsplit("::", n=1).str[-1].to_numpy(),
                }
            )
        )
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True).dropna(subset=["program_id"])
    return out.astype({"program_id": "int64"})[cols]


def _tpu_occurrences(
    events: pd.DataFrame, stats: pd.DataFrame, metadata_stats: pd.DataFrame
) -> pd.DataFrame:
    """One row per XLA Ops event of a device plane, timed by its device span."""
    ev = _tpu_op_events(events)
    if ev.empty:
        return pd.DataFrame(columns=OCCURRENCE_COLUMNS)
    rows = ev.index.to_numpy()
    offset = pd.array(_event_stat(stats, "device_offset_ps", rows, "int_value"), dtype="Int64")
    duration = pd.array(_event_stat(stats, "device_duration_ps", rows, "int_value"), dtype="Int64")
    start_ps = ((ev["start_ns"].to_numpy(np.int64) - ev["start_ns"].min()) * 1000).astype(np.int64)
    start_ps = np.where(offset.isna(), start_ps, offset.fillna(0).to_numpy(np.int64))
    dur_ps = np.where(
        duration.isna(), ev["dur_ps"].to_numpy(np.int64), duration.fillna(0).to_numpy(np.int64)
    )
    # Nesting by device span, in picoseconds: the nester reads start_ns and dur_ps // 1000, so
    # the spans go in scaled by 1000 (start in ps as "ns", duration in ps × 1000).
    spans = pd.DataFrame(
        {
            "worker": ev["worker"],
            "plane": ev["plane"],
            "line_id": ev["line_id"],
            "start_ns": start_ps,
            "dur_ps": dur_ps * 1000,
        }
    ).sort_values(["worker", "plane", "line_id", "start_ns"], kind="stable")
    self_ps = pd.Series(self_times(spans) // 1000, index=spans.index).reindex(ev.index)
    return pd.DataFrame(
        {
            "worker": ev["worker"].astype(str).to_numpy(),
            "device": ev["plane"].astype(str).to_numpy(),
            "program_id": _tpu_program_ids(ev, metadata_stats),
            "hlo_op": _tpu_op_names(ev),
            "start_ns": ev["start_ns"].to_numpy(np.int64),
            "time_ps": dur_ps,
            "self_ps": self_ps.to_numpy(np.int64),
            "metadata_id": ev["metadata_id"].astype("int64").to_numpy(),
        }
    ).dropna(subset=["program_id"])


def _tpu_op_events(events: pd.DataFrame) -> pd.DataFrame:
    """The XLA Ops events of the device planes (a TPU's ops)."""
    return events[
        isin(events["line"], {_XLA_OPS}) & matches(events["plane"], "/device:", how="startswith")
    ]


def _kernel_events(
    events: pd.DataFrame, stats: pd.DataFrame, skip: set[str]
) -> tuple[pd.DataFrame, np.ndarray]:
    """The device kernels of HLO instructions (else, on a worker without any, its XLA:CPU
    thunks), off the planes in ``skip``, and each one's instruction."""
    ev = events.loc[_keyed_rows(events, stats, "hlo_op")]
    ev = ev[~isin(ev["line"], DERIVED_LINES) & ~ev["plane"].astype(str).isin(skip).to_numpy()]
    on_device = matches(ev["plane"], "/device:", how="startswith")
    with_device = set(ev.loc[on_device, "worker"].astype(str))
    ev = ev[on_device | ~ev["worker"].astype(str).isin(with_device).to_numpy()]
    op = pd.Series(_event_stat(stats, "hlo_op", ev.index.to_numpy(), "str_value"), dtype="object")
    return ev, op.astype(str).str.rsplit("::", n=1).str[-1].to_numpy()  # "a::b": the innermost


def xla_op_events(
    events: pd.DataFrame, stats: pd.DataFrame, metadata_stats: pd.DataFrame
) -> pd.Series:
    """The events the XLA op tables count (``xla_op_occurrences``: a TPU's XLA Ops events, a
    GPU's kernels of an instruction, else XLA:CPU thunks), each one's instruction, indexed by
    event row: what a table's link to the Timeline shows (``TimelineIndex.matching``'s
    ``hlo:`` search)."""
    tpu = _tpu_op_events(events)
    tpu = tpu[pd.notna(pd.array(_tpu_program_ids(tpu, metadata_stats), dtype="Int64"))]
    kernels, op = _kernel_events(events, stats, set(tpu["plane"].astype(str)))
    return pd.concat(
        [
            pd.Series(_tpu_op_names(tpu), index=tpu.index, dtype=object),
            pd.Series(op, index=kernels.index, dtype=object),
        ]
    )


def _kernel_occurrences(events: pd.DataFrame, stats: pd.DataFrame, skip: set[str]) -> pd.DataFrame:
    """Device kernels (else, on a worker without any, XLA:CPU thunks) of an HLO instruction:
    one occurrence per event, or per run of consecutive events of one line with the same
    instruction and the same step group (XProf: a kernel without a group is its own
    occurrence)."""
    ev, op = _kernel_events(events, stats, skip)
    if ev.empty:
        return pd.DataFrame(columns=OCCURRENCE_COLUMNS)
    program = _event_stat(stats, "program_id", ev.index.to_numpy(), "int_value")
    group = ev["group_id"].astype("Float64").fillna(-1).to_numpy()
    line = (
        ev["worker"].astype(str) + "\0" + ev["plane"].astype(str) + "\0" + ev["line_id"].astype(str)
    )
    order = np.lexsort((ev["start_ns"].to_numpy(), line.to_numpy()))
    line, op, program, group = line.to_numpy()[order], op[order], program[order], group[order]
    ev = ev.iloc[order]
    new = np.ones(len(ev), dtype=bool)
    new[1:] = (line[1:] != line[:-1]) | (op[1:] != op[:-1]) | (group[1:] != group[:-1])
    new[1:] |= group[1:] < 0
    run = np.cumsum(new) - 1
    dur = ev["dur_ps"].to_numpy(np.int64)
    time_ps = np.bincount(run, weights=dur).astype(np.int64)
    first = np.flatnonzero(new)
    plane = ev["plane"].astype(str).to_numpy()
    return pd.DataFrame(
        {
            "worker": ev["worker"].astype(str).to_numpy()[first],
            "device": np.where(
                np.char.startswith(plane[first].astype(str), "/device:"), plane[first], "/host:CPU"
            ),
            "program_id": pd.array(program[first], dtype="Int64"),
            "hlo_op": op[first],
            "start_ns": ev["start_ns"].to_numpy(np.int64)[first],
            "time_ps": time_ps,
            "self_ps": time_ps,
            "metadata_id": -1,
        }
    ).dropna(subset=["program_id"])


def _occurrences(
    events: pd.DataFrame, stats: pd.DataFrame, metadata_stats: pd.DataFrame
) -> pd.DataFrame:
    """Every occurrence of an XLA op in the capture (rules in the module's docstring):
    ``OCCURRENCE_COLUMNS``, program_id signed as stored, metadata_id the TPU event type (-1
    elsewhere), sorted by worker, device and start."""
    tpu = _tpu_occurrences(events, stats, metadata_stats)
    kernels = _kernel_occurrences(events, stats, set(tpu["device"]))
    parts = [p for p in (tpu, kernels) if len(p)]
    if not parts:
        return pd.DataFrame(columns=OCCURRENCE_COLUMNS).astype(
            {"start_ns": "int64", "time_ps": "int64", "self_ps": "int64", "metadata_id": "int64"}
        )
    out = pd.concat(parts, ignore_index=True)
    out["program_id"] = out["program_id"].astype("int64")
    return out.sort_values(["worker", "device", "start_ns"], ignore_index=True)


def _metadata_costs(metadata_stats: pd.DataFrame) -> pd.DataFrame:
    """Per (worker, device, metadata_id) of a TPU plane: costs and descriptions its event type
    states (``flops`` as the device counts them, ``model_flops``, bytes per memory space,
    ``hlo_category``, ``tf_op``, ``source``)."""
    keys = {
        "flops",
        "model_flops",
        "bytes_accessed",
        "hbm_bytes",
        "hlo_category",
        "tf_op",
        "source",
        "source_stack",
    } | {b for _, b, _ in _TPU_MEMORIES}
    ms = metadata_stats[isin(metadata_stats["key"], keys)]
    if ms.empty:
        return pd.DataFrame(columns=["worker", "device", "metadata_id"])
    ms = ms.assign(
        worker=ms["worker"].astype(str),
        device=ms["plane"].astype(str),
        key=ms["key"].astype(str),
        value=ms["int_value"]
        .astype(object)
        .where(ms["int_value"].notna(), ms["str_value"].astype(object)),
    )
    wide = ms.pivot_table(
        index=["worker", "device", "metadata_id"], columns="key", values="value", aggfunc="first"
    )
    out = wide.reset_index()
    out.columns.name = None
    return out.rename(columns={"flops": "device_flops", "model_flops": "flops"})


def _descriptions(occ: pd.DataFrame, hlo_ops: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
    """The occurrences with their instruction's costs and descriptions (TPU metadata first,
    then the program's HLO module)."""
    h = hlo_ops.astype({c: object for c in hlo_ops.columns if c != "program_id"})
    h = h.assign(worker=h["worker"].astype(str), hlo_op=h["hlo_op"].astype(str))
    h = h.rename(columns={"module": "program", "op_name": "h_op_name", "op_type": "h_op_type"})
    out = occ.merge(
        h.drop(columns=["opcode"]),
        on=["worker", "program_id", "hlo_op"],
        how="left",
        suffixes=("", "_h"),
    )
    if len(meta):
        m = meta.add_prefix("m_").rename(
            columns={"m_worker": "worker", "m_device": "device", "m_metadata_id": "metadata_id"}
        )
        out = out.merge(m, on=["worker", "device", "metadata_id"], how="left")
    for col in _COSTS:
        mcol = f"m_{col}"
        base = pd.to_numeric(out.get(col, pd.Series(np.nan, index=out.index)), errors="coerce")
        if mcol in out:  # a TPU states its own costs (XProf reads them, not the HLO's)
            stated = pd.to_numeric(out[mcol], errors="coerce")
            base = stated.where(out["metadata_id"] >= 0, base)
        out[col] = base.astype(float)
    if "m_flops" in out:
        fill = (out["metadata_id"] >= 0) & out["flops"].isna()  # masks of one length: a
        out.loc[fill, "flops"] = out.loc[fill, "device_flops"]  # TPU beside others failed
    out["device_flops"] = out["device_flops"].fillna(out["flops"])
    if "m_hbm_bytes" in out:  # no breakdown stated: XProf counts every byte as HBM's
        tpu = out["metadata_id"] >= 0
        stated = pd.to_numeric(out["m_hbm_bytes"], errors="coerce")
        out.loc[tpu, "hbm_bytes"] = stated[tpu].fillna(out.loc[tpu, "bytes_accessed"])

    def text(col: str) -> pd.Series:
        """A text column of ``out`` as objects ("" where missing or absent)."""
        if col not in out:
            return pd.Series("", index=out.index, dtype=object)
        return out[col].astype(object).where(out[col].notna(), "").astype(str)

    for col, meta_col in (
        ("category", "m_hlo_category"),
        ("source", "m_source"),
        ("source_stack", "m_source_stack"),
    ):
        given = text(meta_col)  # a TPU event type's own words first
        out[col] = given.where(given != "", text(col))
    op_name, op_type = text("h_op_name"), text("h_op_type")
    framework = op_name.where(op_type == "", op_name + ":" + op_type)
    stated = text("m_tf_op")
    out["framework_op"] = stated.where(stated != "", framework)
    for col in ("expression", "program", "compute_dtype"):
        out[col] = out.get(col, pd.Series("", index=out.index)).fillna("").astype(str)
    return out


XLA_OP_COLUMNS = [
    "worker",
    "device",
    "program_id",
    "program",
    "hlo_op",
    "start_ns",
    "time_ps",
    "self_ps",
    "category",
    "expression",
    "framework_op",
    "source",
    "source_stack",
    "compute_dtype",
    *_COSTS,
    "copy_from",
    "copy_to",
]


def xla_op_occurrences(
    events: pd.DataFrame,
    stats: pd.DataFrame,
    metadata_stats: pd.DataFrame,
    hlo_ops: pd.DataFrame,
) -> pd.DataFrame:
    """Every occurrence of an XLA op with its instruction's description and costs.

    Args:
        events, stats, metadata_stats, hlo_ops: the session's frames.

    Returns:
        ``XLA_OP_COLUMNS``, one row per occurrence (rules in the module's docstring):
        ``program_id`` signed as stored (``unsigned_id`` prints it as XLA does), ``program``
        the module's name, costs per occurrence (0 where unknown), ``copy_from``/``copy_to``
        the memory spaces a copy moves between (NA for other ops); sorted by worker, device
        and start.
    """
    occ = _occurrences(events, stats, metadata_stats)
    if occ.empty:
        return pd.DataFrame(columns=XLA_OP_COLUMNS)
    rows = _descriptions(occ, hlo_ops, _metadata_costs(metadata_stats))
    for col in _COSTS:
        rows[col] = rows[col].fillna(0.0)
    for col in ("copy_from", "copy_to"):
        rows[col] = pd.array(pd.to_numeric(rows.get(col), errors="coerce"), dtype="Int64")
    for col in (
        "worker",
        "device",
        "program",
        "hlo_op",
        "category",
        "framework_op",
        "source",
        "source_stack",
        "compute_dtype",
        "expression",
    ):
        rows[col] = rows[col].astype(str).astype("category")
    return rows[XLA_OP_COLUMNS].reset_index(drop=True)


def _bound_by(rows: pd.DataFrame, peaks: pd.Series | None) -> tuple[np.ndarray, np.ndarray]:
    """(bound_by, roofline efficiency) per row: the resource with the highest utilization
    against the device's peaks, as XProf ranks them; efficiency is that utilization."""
    n = len(rows)
    if peaks is None:
        return np.full(n, "Unknown", dtype=object), np.full(n, np.nan)
    best = np.zeros(n)
    name = np.full(n, "Unknown", dtype=object)

    def consider(util: np.ndarray, label: str) -> None:
        win = util > best
        best[win], name[win] = util[win], label

    flops_peak = float(peaks["peak_flop_rate_gflops"])
    if flops_peak > 0:
        consider(rows["measured_flop_rate_gflops"].to_numpy(float) / flops_peak, "Compute")
    if float(peaks["peak_hbm_bw_gibs"]) > 0:
        consider(rows["hbm_bw_gibs"].to_numpy(float) / float(peaks["peak_hbm_bw_gibs"]), "HBM")
    seconds = rows["total_time_us"].to_numpy(float) / 1e6
    for peak_col, bytes_col, label in _TPU_MEMORIES:
        peak = float(peaks.get(peak_col, 0) or 0)
        if peak > 0 and bytes_col in rows:
            rate = rows[bytes_col].to_numpy(float) / np.where(seconds > 0, seconds, np.nan) / GIB
            consider(np.nan_to_num(rate / peak), label)
    shm = float(peaks.get("peak_shm_bw_gibs", 0) or 0)
    if shm > 0 and str(peaks.get("device_type", "")).find("GPU") >= 0:
        consider(rows["hbm_bw_gibs"].to_numpy(float) / shm, "Shm/L1")
    return name, np.where(name == "Unknown", np.nan, best)


def _device_ps(occurrences: pd.DataFrame) -> pd.Series:
    """Per worker and device, its time as XProf counts it: from its first op's start to its
    last op's end (ps)."""
    end = occurrences["start_ns"] + occurrences["time_ps"] // 1000
    g = pd.DataFrame(
        {
            "worker": occurrences["worker"].astype(str),
            "device": occurrences["device"].astype(str),
            "start": occurrences["start_ns"],
            "end": end,
        }
    ).groupby(["worker", "device"], sort=False)
    return (g["end"].max() - g["start"].min()).astype(float) * 1000


def _with_idle(out: pd.DataFrame, device_ps: pd.Series, group: list[str]) -> pd.DataFrame:
    """``out`` with an ``IDLE`` row per ``group``: its device time no op's self time covers
    (never below 0: ops of concurrent streams can overlap), in the order of self time."""
    busy = out.groupby(group, sort=False)["self_ps"].sum()
    time = device_ps.reindex(busy.index)
    idle_ps = (time - busy).clip(lower=0)
    rows = busy.index.to_frame(index=False).assign(
        program_id="",
        program="",
        hlo_op_name="IDLE",
        category="IDLE",
        expression="",
        framework_op="",
        occurrences=0,
        self_ps=idle_ps.to_numpy(),
        total_time_us=idle_ps.to_numpy() / 1e6,
        total_self_time_us=idle_ps.to_numpy() / 1e6,
        self_time_percent=(idle_ps / time * 100).to_numpy(),
        bound_by="",
        source="",
        source_stack="",
        compute_dtype="",
        rematerialized=False,
        above_peak=False,
        flops_source="",
    )
    if "device" not in group:
        rows["device"] = ""  # as the op rows of a table per worker
    both = pd.concat([out, rows], ignore_index=True)
    return both.sort_values(
        [*group, "self_ps"], ascending=[*([True] * len(group)), False], ignore_index=True
    )


def hlo_stats(
    occurrences: pd.DataFrame,
    peaks: pd.DataFrame,
    *,
    per_device: bool = False,
    device: str | None = None,
    idle: bool = False,
    device_time: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """XProf's HLO op table: one row per (program_id, hlo_op_name) over a worker's devices.

    Args:
        occurrences: ``xla_op_occurrences`` (with an ``execution`` column, the rows are
            split by it as well: ``executions``).
        peaks: ``analyzers.roofline.device_peaks``.
        per_device: one row per device as well (XProf merges a host's devices).
        device: only this device (a plane name, ``/device:GPU:0``).
        idle: a row ``IDLE`` per worker (or device): the device time no op ran, as XProf's
            op profile and framework op table have it (not per execution).
        device_time: ``SessionAnalysis.device_time`` (each device's first event to its last,
            XProf's denominator); else the span of the device's XLA ops.

    Returns:
        ``HLO_COLUMNS`` (+ ``execution`` when given), per worker the most self time first.
        ``program_id`` is the unsigned id XLA prints; times in µs; rates in GFLOP/s and GiB/s;
        ``self_time_percent`` (and its cumulative sum) of the device time, idle included, as
        XProf's ``total_self_time_percent``; ``xla_time_share`` of the XLA op time only;
        ``roofline_efficiency`` capped at 1, ``above_peak`` where the measured utilization was
        above the device's peak (the peak or the op's cost is wrong).
    """
    rows = occurrences
    if device is not None:
        rows = rows[rows["device"].astype(str) == device]
    if rows.empty:
        return pd.DataFrame(columns=HLO_COLUMNS)
    keys = ["worker"] + (["device"] if per_device or device else []) + ["program_id", "hlo_op"]
    if "execution" in rows:
        keys.append("execution")
    g = rows.groupby(keys, sort=False, dropna=False, observed=True)
    first = g[
        [
            "program",
            "category",
            "expression",
            "framework_op",
            "source",
            "source_stack",
            "compute_dtype",
        ]
    ].first()
    total = g[["time_ps", "self_ps", *_COSTS]].sum()
    out = first.join(total)
    out["occurrences"] = g.size()
    out = out.reset_index()
    for col in ("worker", "device", "hlo_op", *first.columns):  # one row per op: plain text
        if col in out:
            out[col] = out[col].astype(str)
    if "device" not in out:
        out["device"] = ""
    ns = out["time_ps"] / 1000
    safe = ns.where(ns > 0)
    out["total_time_us"] = out["time_ps"] / 1e6
    out["total_self_time_us"] = out["self_ps"] / 1e6
    out["avg_time_us"] = out["total_time_us"] / out["occurrences"]
    out["avg_self_time_us"] = out["total_self_time_us"] / out["occurrences"]
    out["model_flop_rate_gflops"] = (out["flops"] / safe).fillna(0.0)
    out["measured_flop_rate_gflops"] = (out["device_flops"] / safe).fillna(0.0)
    out["memory_bw_gibs"] = (out["bytes_accessed"] / safe * 1e9 / GIB).fillna(0.0)
    out["hbm_bw_gibs"] = (out["hbm_bytes"] / safe * 1e9 / GIB).fillna(0.0)
    out["operational_intensity"] = (
        out["device_flops"] / out["bytes_accessed"].where(out["bytes_accessed"] > 0)
    ).fillna(0.0)
    out["bound_by"], out["roofline_efficiency"] = "Unknown", np.nan
    for (worker, dev), part in out.groupby(["worker", "device"], sort=False):
        mine = peaks[peaks["worker"] == worker]
        if dev:
            mine = mine[mine["device"] == dev]
        bound, eff = _bound_by(part, mine.iloc[0] if len(mine) else None)
        out.loc[part.index, "bound_by"] = bound
        out.loc[part.index, "roofline_efficiency"] = eff
    # above 1, the peak or the op's cost is wrong (the TPU's async copy-starts: bytes in ns):
    # said, and never shown as a utilisation
    out["above_peak"] = (out["roofline_efficiency"] > 1).to_numpy(bool)
    out["roofline_efficiency"] = out["roofline_efficiency"].clip(upper=1.0)
    name = out["expression"].str.split("=", n=1).str[0]
    out["rematerialized"] = name.str.contains(".remat", regex=False) | out["framework_op"].astype(
        str
    ).str.contains("/rematted_computation/", regex=False)
    out["program_id"] = out["program_id"].map(unsigned_id).astype(str)
    # ``shapes``: a library call XProf has no FLOPs for, costed here by its operand shapes
    out["flops_source"] = np.where(
        out["expression"].astype(str).str.contains(_BEYOND_XPROF, regex=True), "shapes", "xla"
    )
    out = out.rename(columns={"hlo_op": "hlo_op_name"})
    group = ["worker", "device"] if per_device or device else ["worker"]
    out = out.sort_values(
        [*group, "self_ps", "hlo_op_name"],
        ascending=[*([True] * len(group)), False, True],
        ignore_index=True,
    )
    per = out.groupby(group, sort=False)["self_ps"]
    whole = per.transform("sum").replace(0, np.nan)
    out["xla_time_share"] = out["self_ps"] / whole
    out["cumulative_xla_time_share"] = per.cumsum() / whole
    # XProf's total_self_time_percent: of the device time, idle included (each device's time
    # from its first op's start to its last op's end, summed over the row's devices)
    device_ps = (
        _device_ps(rows)
        if device_time is None or device_time.empty
        else device_time.set_index(["worker", "device"])["time_ps"].astype(float)
    )
    if device is not None:
        device_ps = device_ps[device_ps.index.get_level_values("device") == device]
    device_ps = device_ps.groupby(level=group).sum()
    span = pd.MultiIndex.from_frame(out[group]) if len(group) > 1 else pd.Index(out[group[0]])
    time = device_ps.reindex(span).to_numpy(float)
    out["self_time_percent"] = out["self_ps"] / time * 100
    out["cumulative_self_time_percent"] = per.cumsum().to_numpy(float) / time * 100
    if idle and "execution" not in out:
        out = _with_idle(out, device_ps, group)
    extra = [
        c
        for c in ("execution", *(b for _, b, _ in _TPU_MEMORIES))
        if c in out and c not in HLO_COLUMNS
    ]
    return out[HLO_COLUMNS + [c for c in extra if c == "execution"]]


def with_executions(occurrences: pd.DataFrame, executions: pd.DataFrame) -> pd.DataFrame:
    """The occurrences with ``execution``: which execution of its program on its device (0
    for the first in the capture; ``analyzers.xla_programs.program_executions``) the op ran in,
    NA for an op outside every execution.

    Args:
        occurrences: ``xla_op_occurrences``.
        executions: ``program_executions`` of the same frames.
    """
    out = occurrences.copy()
    out["execution"] = pd.array([pd.NA] * len(out), dtype="Int64")
    if out.empty or executions.empty:
        return out
    # ids read exactly: to_numeric made floats of a signed id beside an unsigned one (a TPU
    # host's executions beside a GPU host's matched none of its ops)
    text = executions["program_id"].astype(str)
    has = text.str.fullmatch(r"-?\d+").to_numpy(dtype=bool)
    ex = executions[has].assign(
        pid=[unsigned_id(int(t)) for t in text[has]],
        device=executions["device"][has].astype(str),
        worker=executions["worker"][has].astype(str),
    )
    ex = ex.sort_values("start_ns", kind="stable")
    ex["execution"] = ex.groupby(["worker", "device", "pid"]).cumcount()
    occ = pd.DataFrame(
        {
            "row": np.arange(len(out)),
            "worker": out["worker"].astype(str).to_numpy(),
            "device": out["device"].astype(str).to_numpy(),
            "pid": out["program_id"].map(unsigned_id).to_numpy(),
            "start_ns": out["start_ns"].to_numpy(np.int64),
        }
    ).sort_values("start_ns", kind="stable")
    hit = pd.merge_asof(
        occ,
        ex[["worker", "device", "pid", "start_ns", "end_ns", "execution"]],
        on="start_ns",
        by=["worker", "device", "pid"],
        direction="backward",
    )
    inside = hit["end_ns"].notna() & (hit["start_ns"] <= hit["end_ns"])
    value = hit["execution"].where(inside)
    out.loc[out.index[hit["row"].to_numpy()], "execution"] = pd.array(value, dtype="Int64")
    return out


PROFILE_COLUMNS = [
    "id",
    "parent",
    "label",
    "level",
    "occurrences",
    "total_time_us",
    "self_time_us",
    "time_share",
    "flop_rate_gflops",
    "flops_utilization",
    "hbm_bw_gibs",
    "bandwidth_utilization",
    "above_peak",
]


def op_profile(table: pd.DataFrame, peaks: pd.DataFrame, by: str = "program") -> pd.DataFrame:
    """XProf's op profile: a tree of program → category → op (``by="program"``) or category
    → op (``by="category"``), each node with its time, share of all XLA op time (of the
    device time when ``table`` has its IDLE row: the root is then the device time and IDLE
    a node beside the programs, as in XProf), FLOP rate and HBM bandwidth, and their
    utilization of the device's peaks (capped at 1, as XProf's; ``above_peak`` where a
    measured rate was above the peak: the peak or the op's cost is wrong).

    Args:
        table: ``hlo_stats`` of one worker (or merged workers: nodes sum them), with
            ``idle=True`` for XProf's IDLE node.
        peaks: ``analyzers.roofline.device_peaks`` (the first device's peaks are the roof;
            utilization is NaN where the trace states none).
        by: ``program`` or ``category``.

    Returns:
        ``PROFILE_COLUMNS``, a root row (id ``""``) first; ``id`` is the path of labels joined
        by ``/`` (what the page keeps in its URL), ``parent`` its parent's id.

    Raises:
        ValueError: ``by`` is neither.
    """
    if by not in ("program", "category"):
        raise ValueError(f"by must be program or category, not {by!r}")
    idle = table["category"].astype(str).eq("IDLE").to_numpy()
    idle_us = float(table.loc[idle, "total_self_time_us"].sum())
    table = table[~idle]
    t = table.assign(
        _program=table["program"].astype(str) + "(" + table["program_id"].astype(str) + ")",
        _category=table["category"].astype(str),
        _op=table["hlo_op_name"].astype(str),
        _time=table["total_time_us"].astype(float),
        _self=table["total_self_time_us"].astype(float),
        _flops=table["measured_flop_rate_gflops"].astype(float) * table["total_time_us"] * 1e3,
        _hbm=table["hbm_bw_gibs"].astype(float) * GIB / 1e9 * table["total_time_us"] * 1e3,
    )
    levels = (["_program"] if by == "program" else []) + ["_category", "_op"]
    peak = peaks.iloc[0] if len(peaks) else None
    total_self = float(t["_self"].sum()) + idle_us or np.nan
    nodes = [_node("", "", "all XLA ops", "root", t, total_self, peak)]
    if idle.any():  # as XProf's: the root is the device time, IDLE the part no op ran
        root = nodes[0]
        root[2], root[5], root[6], root[7] = (
            "device time",
            float(t["_time"].sum()) + idle_us,
            total_self,
            1.0,
        )
        share = idle_us / total_self
        nodes.append(
            # no rate, nothing above a peak
            [
                "IDLE",
                "",
                "IDLE",
                "idle",
                0,
                idle_us,
                idle_us,
                share,
                0.0,
                np.nan,
                0.0,
                np.nan,
                False,
            ]
        )
    for depth in range(1, len(levels) + 1):
        keys = levels[:depth]
        for values, g in t.groupby(keys, sort=False):
            values = values if isinstance(values, tuple) else (values,)
            path = "/".join(str(v).replace("/", "∕") for v in values)
            parent = path.rsplit("/", 1)[0] if depth > 1 else ""
            level = keys[-1].lstrip("_")
            nodes.append(_node(path, parent, str(values[-1]), level, g, total_self, peak))
    out = pd.DataFrame(nodes, columns=PROFILE_COLUMNS)
    return out.sort_values(
        ["parent", "self_time_us"], ascending=[True, False], kind="stable", ignore_index=True
    )


def _node(
    path: str,
    parent: str,
    label: str,
    level: str,
    g: pd.DataFrame,
    total: float,
    peak: pd.Series | None,
) -> list[object]:
    time_us = float(g["_time"].sum())
    seconds = time_us / 1e6
    flop_rate = float(g["_flops"].sum()) / seconds / 1e9 if seconds > 0 else 0.0
    hbm = float(g["_hbm"].sum()) / seconds / GIB if seconds > 0 else 0.0
    peak_flops = float(peak["peak_flop_rate_gflops"]) if peak is not None else 0.0
    peak_hbm = float(peak["peak_hbm_bw_gibs"]) if peak is not None else 0.0
    flops_util = flop_rate / peak_flops if peak_flops > 0 else np.nan
    hbm_util = hbm / peak_hbm if peak_hbm > 0 else np.nan
    return [
        path,
        parent,
        label,
        level,
        int(g["occurrences"].sum()),
        time_us,
        float(g["_self"].sum()),
        float(g["_self"].sum()) / total,
        flop_rate,
        min(flops_util, 1.0),  # XProf caps its op profile at 100 % too
        hbm,
        min(hbm_util, 1.0),
        bool(flops_util > 1 or hbm_util > 1),
    ]


COMPARE_COLUMNS = [
    "program",
    "hlo_op_name",
    "category",
    "base_occurrences",
    "new_occurrences",
    "base_avg_us",
    "new_avg_us",
    "delta_avg_us",
    "change",
    "base_total_us",
    "new_total_us",
    "delta_total_us",
    "status",
]


def compare_hlo(base: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Two sessions' XLA ops side by side: which HLO op got slower, and by how much.

    Ops are matched by program name and instruction name (program ids are not stable across
    runs on GPUs); a program compiled several times in one session (same name, other ids)
    adds up. Per op: time per occurrence and in all, both sessions, and the change.

    Args:
        base, new: ``hlo_stats`` of each session (one worker or the session's workers:
            rows are summed per program and op).

    Returns:
        ``COMPARE_COLUMNS``, the change that costs the new session most first (the change
        per occurrence times its occurrences there; a new or gone op: its whole time):
        captures of different lengths compare per occurrence. ``status`` says ``slower``,
        ``faster``, ``same`` (within 2 %), ``new`` or ``gone``.
    """
    key = ["program", "hlo_op_name"]

    def per_op(t: pd.DataFrame) -> pd.DataFrame:
        g = t.groupby(key, sort=False)
        out = g.agg(
            category=("category", "first"),
            occurrences=("occurrences", "sum"),
            total_us=("total_time_us", "sum"),
        )
        out["avg_us"] = out["total_us"] / out["occurrences"].where(out["occurrences"] > 0)
        return out

    b, n = per_op(base), per_op(new)
    out = b.add_prefix("base_").join(n.add_prefix("new_"), how="outer").reset_index()
    out["category"] = out["new_category"].fillna(out["base_category"])
    for side in ("base", "new"):
        out[f"{side}_occurrences"] = out[f"{side}_occurrences"].fillna(0).astype("int64")
        out[f"{side}_total_us"] = out[f"{side}_total_us"].fillna(0.0)
    out["delta_avg_us"] = out["new_avg_us"] - out["base_avg_us"]
    out["change"] = out["delta_avg_us"] / out["base_avg_us"].where(out["base_avg_us"] > 0)
    out["delta_total_us"] = out["new_total_us"] - out["base_total_us"]
    status = np.where(
        out["change"] > 0.02, "slower", np.where(out["change"] < -0.02, "faster", "same")
    )
    status = np.where(out["base_occurrences"] == 0, "new", status)
    out["status"] = np.where(out["new_occurrences"] == 0, "gone", status)
    impact = (out["delta_avg_us"] * out[["new_occurrences", "base_occurrences"]].max(axis=1)).abs()
    impact = impact.fillna(out["delta_total_us"].abs())
    out = out.reindex(impact.sort_values(ascending=False, kind="stable").index)
    return out[COMPARE_COLUMNS].reset_index(drop=True)


def host_copies(ops: pd.DataFrame) -> np.ndarray:
    """Which rows of an ``hlo_ops``-shaped frame (``copy_from``, ``copy_to``) move data between
    host memory and a device: host memory at one end only."""
    spaces = ops[["copy_from", "copy_to"]].astype("Float64").fillna(-1).to_numpy(float)
    return np.asarray((spaces == HOST_MEMORY_SPACE).any(axis=1) & (spaces[:, 0] != spaces[:, 1]))
