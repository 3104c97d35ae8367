"""XLA programs on the command line: ``podscope hlo`` (XProf's HLO op table, per device or per
execution as well) and ``podscope roofline`` (each device's peaks), as a table or ``--csv``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from podscope.app.cli_analyze import _analysis_or_exit, analysis_options, csv_option
from podscope.app.cli_table import show_table, wide_option
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
    repeated = table["hlo_op_name"].duplicated(keep=False) & (table["program"] != "")
    program = table["program"].where(
        ~table.duplicated(["program", "hlo_op_name"], keep=False),
        table["program"] + "(" + table["program_id"] + ")",
    )
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
    show_table(shown.assign(device=shown["device"].str.removeprefix("/device:")), title, wide=wide)
