"""XLA programs on the command line: ``podscope hlo`` (XProf's HLO op table, per device or per
execution as well) and ``podscope roofline`` (each device's peaks), as a table or ``--csv``."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import pandas as pd

from podscope.app.cli_analyze import _analysis_or_exit
from podscope.app.cli_options import analysis_options, csv_option, wide_option
from podscope.app.cli_table import show_table
from podscope.app.terminal import say


@click.command("hlo")
@csv_option
@wide_option
@click.option("--device", help="Only this device (/device:GPU:0, GPU:0 or TPU:1).")
@click.option("--per-device", is_flag=True, help="One row per device (XProf merges a host's).")
@click.option(
    "--by-execution",
    is_flag=True,
    help="One row per execution of each op's program (the k-th step of a JAX loop).",
)
@click.option("--top", type=int, default=20, help="Rows in the table view.")
@analysis_options
def hlo_command(
    path: Path,
    csv: bool,
    wide: bool,
    device: str | None,
    per_device: bool,
    by_execution: bool,
    top: int,
    session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """XLA ops of PATH (a trace file, a run folder or a logdir), one row per program and HLO
    instruction: occurrences, time, FLOP rate, memory bandwidth, operational intensity, what
    bounds it and its Python line (XProf's hlo_stats; XLA:CPU captures too)."""
    a = _analysis_or_exit(path, session, no_cache, frozenset({"xla_ops"}), scheduler)
    if device and not device.startswith("/"):
        device = f"/device:{device}"
    if device:
        known = sorted(
            set(a.device_peaks["device"].astype(str))
            | set(a.xla_ops["device"].astype(str))  # the devices the table would show
        )
        if device not in known:
            raise click.BadParameter(
                f"no device {device} in this capture"
                + (
                    f"; its devices: {', '.join(d.removeprefix('/device:') for d in known)}"
                    if known
                    else " (it has no XLA ops)"
                ),
                param_hint="'--device'",
            )
    table = a.hlo_table(
        per_device=per_device, device=device, by_execution=by_execution, idle=not by_execution
    )
    if table.empty:
        reason = (
            f"no XLA op ran on {device}"
            if device
            else "this capture has no XLA ops (no device kernel or XLA:CPU thunk names an HLO "
            "instruction: a TensorFlow graph without jit_compile, or an Android trace)"
        )
        say(f"podscope: {reason}; nothing to show.", err=True)
    if csv:
        table.to_csv(sys.stdout, index=False)
        return
    if table.empty:
        return
    cols = ["worker"] if table["worker"].nunique() > 1 else []
    cols += ["device"] if per_device else []
    cols += ["execution"] if by_execution else []
    cols += ["hlo_op_name", "occurrences", "total_self_time_us", "device_share"]
    # An instruction's name is unique in its program only, and a program's name in a capture
    # only per compilation: repeated names get their program, with its id where needed.
    # (Counted over distinct ops: --by-execution repeats each op once per execution.)
    ops = table[["program_id", "program", "hlo_op_name"]].drop_duplicates()
    programs_of = ops.groupby("hlo_op_name")["program_id"].nunique()
    repeated = (table["hlo_op_name"].map(programs_of) > 1) & (table["program"] != "")
    ids_of = ops.groupby(["program", "hlo_op_name"])["program_id"].nunique()
    same_name = pd.Series(
        ids_of.reindex(pd.MultiIndex.from_frame(table[["program", "hlo_op_name"]])).to_numpy() > 1,
        index=table.index,
    )
    program = table["program"].where(~same_name, table["program"] + "(" + table["program_id"] + ")")
    table = table.assign(
        # a rate above the device's peak is flagged where it is shown, never read as a use
        bound_by=table["bound_by"].where(
            ~table["above_peak"].astype(bool), table["bound_by"] + "!"
        ),
        device_share=table["self_time_percent"] / 100,  # XProf's: of device time, idle too
        hlo_op_name=table["hlo_op_name"].where(~repeated, program + "/" + table["hlo_op_name"]),
        device=table["device"].str.removeprefix("/device:"),
    )
    cols += ["model_flop_rate_gflops", "memory_bw_gibs", "bound_by"]
    shown = table.head(top)[cols].rename(
        columns={
            "hlo_op_name": "XLA op",
            "total_self_time_us": "self_ms",
            "model_flop_rate_gflops": "GFLOP/s",
            "memory_bw_gibs": "GiB/s",
            "occurrences": "n",
            "bound_by": "bound",
        }
    )
    shown["self_ms"] = shown["self_ms"] / 1000
    for col in ("GFLOP/s", "GiB/s"):  # (none on the IDLE row)
        shown[col] = shown[col].round().astype("Int64")
    worker = "" if cols[0] == "worker" else f" of {table['worker'].iloc[0]}"
    show_table(shown, f"top {top} XLA ops{worker} by self time", wide=wide, cut="XLA op")
    above = table.head(top)["above_peak"].astype(bool)
    if above.any():
        say(
            f"{int(above.sum())} rows (bound by …!) measured above the device's peak: the "
            "peak or the op's cost is wrong (an async copy's bytes over its start's few ns, "
            "a peak the trace states too low)."
        )
    beyond = table.head(top)["flops_source"] == "shapes"
    if beyond.any():
        say(
            f"{int(beyond.sum())} of these rows are library GEMMs (__cublas$gemm) XProf shows "
            "no FLOPs for: PodScope counts 2·M·N·K from their operand shapes "
            "(flops_source=shapes in --csv)."
        )


@click.command("roofline")
@csv_option
@wide_option
@analysis_options
def roofline_command(
    path: Path,
    csv: bool,
    wide: bool,
    session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """Each GPU/TPU of PATH (a trace file, a run folder or a logdir): its type, peak FLOP rate
    and memory bandwidth, and the ridge point, read from the device plane as XProf reads
    them; 0 where the trace does not say (never a guess)."""
    a = _analysis_or_exit(path, session, no_cache, frozenset(), scheduler)
    peaks = a.device_peaks
    if peaks.empty:
        say(
            "podscope: this capture has no GPU or TPU plane: no device peaks to read (a CPU "
            "has no roofline here).",
            err=True,
        )
    if csv:
        peaks.to_csv(sys.stdout, index=False)
        return
    shown = peaks[
        [
            "worker",
            "device",
            "device_type",
            "peak_flop_rate_gflops",
            "peak_hbm_bw_gibs",
            "ridge_point",
        ]
    ].rename(columns={"peak_flop_rate_gflops": "peak_GFLOP/s", "peak_hbm_bw_gibs": "HBM_GiB/s"})
    unknown = peaks["peak_flop_rate_gflops"] == 0
    title = "device peaks" + (
        " (0: the trace does not say, e.g. no vendor on the GPU plane)" if unknown.any() else ""
    )
    shown = shown.assign(
        device=shown["device"].str.removeprefix("/device:"),
        device_type=peaks["product"].where(peaks["product"] != "", peaks["device_type"]),
    )
    show_table(shown, title, wide=wide)
    for source, devices in peaks.groupby("peak_source", sort=False)["device"]:
        one = devices.iloc[0].removeprefix("/device:")
        where = one if len(devices) == 1 else f"{one} and {len(devices) - 1} more"
        say(f"{where}: {source}.")


@click.command("hlo-memory")
@csv_option
@wide_option
@click.option("--program", help="Only this program: its id or name (jit_step).")
@click.option(
    "--memory-space",
    type=click.IntRange(0, None),
    default=0,
    show_default=True,
    help="XLA's memory space (buffer color): 0 is the device's main memory (HBM).",
)
@click.option(
    "--view",
    type=click.Choice(["buffers", "heap", "programs"]),
    default="buffers",
    show_default=True,
    help="buffers: each program's buffers alive at its peak; heap: its heap over program "
    "order; programs: one row per program.",
)
@click.option("--top", type=int, default=20, help="Rows in the table view.")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--session", help="Session of a logdir (default: newest).")
def hlo_memory_command(
    path: Path,
    csv: bool,
    wide: bool,
    program: str | None,
    memory_space: int,
    view: str,
    top: int,
    session: str | None,
) -> None:
    """XProf's memory viewer for the XLA programs of PATH (a trace file, a run folder or a
    logdir): each program's peak heap, the buffers alive at the peak (instruction, size,
    shape, opcode, kind, source line) and the heap over the program's order, from the buffer
    assignment XLA compiled into the capture."""
    from podscope.app.cli import fail
    from podscope.trace_parsers.errors import TraceParseError
    from podscope.trace_parsers.hlo_memory import memory_views_of

    try:
        views = memory_views_of(path, session, memory_space)
    except TraceParseError as e:
        raise fail(f"podscope: error: {e}") from None
    programs = views.programs
    if program is not None:
        chosen = (programs["program"] == program) | (programs["program_id"].astype(str) == program)
        if not chosen.any():
            known = ", ".join(sorted(set(programs["program"]))) or "none: no XLA programs"
            raise click.BadParameter(
                f"no program {program}; known: {known}", param_hint="'--program'"
            )
        ids = set(programs.loc[chosen, "program_id"])
        views = type(views)(*(f[f["program_id"].isin(ids)] for f in views))
        programs = views.programs
    if programs.empty:
        say(
            "podscope: this capture carries no XLA program (no HLO module in its metadata "
            "plane: a TensorFlow graph without jit_compile, PyTorch or Android); nothing to show.",
            err=True,
        )
    frame = {"buffers": views.buffers, "heap": views.heap, "programs": programs}[view]
    if csv:
        frame.to_csv(sys.stdout, index=False)
        return
    if programs.empty:
        return
    refused = programs[programs["error"] != ""]
    for r in refused.itertuples():
        say(f"podscope: {r.program} ({r.program_id}) of {r.worker}: not replayed: {r.error}")
    if view == "programs":
        cols = ["worker"] if programs["worker"].nunique() > 1 else []
        cols += ["program", "program_id", "peak_heap_mib", "buffers_at_peak"]
        shown = programs.sort_values("peak_heap_mib", ascending=False).head(top)[cols]
        shown = shown.astype({"program_id": str}).rename(
            columns={"program_id": "id", "peak_heap_mib": "peak MiB", "buffers_at_peak": "buffers"}
        )
        show_table(shown, f"XLA programs by peak heap (memory space {memory_space})", wide=wide)
        return
    # One program: the chosen one, else the largest peak (its name says which).
    peak = programs.dropna(subset=["peak_heap_mib"]).sort_values("peak_heap_mib").tail(1)
    if peak.empty:
        return
    one = peak.iloc[0]
    rows = frame[(frame["program_id"] == one["program_id"]) & (frame["worker"] == one["worker"])]
    title = (
        f"{one['program']}: peak {one['peak_heap_mib']:,.1f} MiB at heap position "
        f"{one['peak_position']}"
    )
    if view == "heap":
        shown = rows[["position", "instruction", "heap_mib"]].head(top)
        show_table(
            shown.rename(columns={"heap_mib": "heap MiB after"}),
            f"{title} · heap over program order",
            wide=wide,
            cut="instruction",
        )
        return
    rows = rows.sort_values("size_mib", ascending=False, kind="stable")
    shown = rows[["instruction", "size_mib", "kind", "shape", "source"]].head(top)
    shown = shown.assign(  # the file's name and line: its folder is in --csv
        source=shown["source"].fillna("").str.rsplit("/", n=1).str[-1]
    ).rename(columns={"size_mib": "MiB"})
    show_table(shown, f"{title} · buffers alive there", wide=wide, cut="instruction")
    if len(programs) > 1 and program is None:
        say(f"{len(programs)} programs; --program NAME for another, --view programs for all.")
