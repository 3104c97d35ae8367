"""Rules of XLA programs: host offload (copies between host memory and the device's)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from podscope.analyzers.diagnostics.base import (
    SPLIT,
    Thresholds,
    Verdict,
    rule,
    severity_of,
    skip,
    worst_step,
)
from podscope.analyzers.hlo_stats import host_copies, unsigned_id
from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers.schema import HOST_MEMORY_SPACE

_SHAPE = r"^%?[^\s=]+ = (\S+\[[^\]]*\])"


def offload_copies(inp: SessionAnalysis) -> pd.DataFrame:
    """The XLA copies between host memory (memory space 5) and a device's, per instruction:
    direction, shape, bytes per copy, copies, time, bandwidth; the longest first."""
    ops = inp.xla_ops
    cols = ["hlo_op", "program", "direction", "shape", "bytes", "copies", "time_us", "gib_per_s"]
    if ops.empty:
        return pd.DataFrame(columns=cols)
    copies = ops[
        host_copies(ops)
        & ops["category"]
        .astype(str)
        .isin(["copy-start", "copy-done", "data formatting"])
        .to_numpy()
    ]
    if copies.empty:
        return pd.DataFrame(columns=cols)
    done = copies[copies["category"].astype(str) != "copy-start"]  # a copy's wait, once
    g = done.groupby(["program", "program_id", "hlo_op"], observed=True, sort=False)
    out = g.agg(
        copies=("time_ps", "size"),
        time_ps=("time_ps", "sum"),
        bytes=("bytes_accessed", "first"),
        to_host=("copy_to", "first"),
        expression=("expression", "first"),
    ).reset_index()
    out["direction"] = np.where(
        out["to_host"] == HOST_MEMORY_SPACE, "device → host (offload)", "host → device (prefetch)"
    )
    shape = out["expression"].astype(str).str.extract(_SHAPE, expand=False)
    out["shape"] = shape.fillna("")
    out["time_us"] = out["time_ps"] / 1e6
    # A copy whose done did not wait (it finished under compute) has no measured bandwidth.
    waited = out["time_ps"] / out["copies"] >= 10_000_000  # 10 µs per copy
    seconds = (out["time_ps"] / 1e12).where(waited)
    out["gib_per_s"] = (out["bytes"] * out["copies"] / seconds / 2**30).round(2)
    out["program"] = (
        out["program"].astype(str) + "(" + out["program_id"].map(unsigned_id).astype(str) + ")"
    )
    return out.sort_values("time_us", ascending=False, ignore_index=True)[cols]


@rule(
    "host_offload",
    "Host offload: steps wait for copies between host memory and the device",
    needs=(SPLIT,),
    levels="host_offload",
)
def host_offload(inp: SessionAnalysis, t: Thresholds) -> Verdict:
    """The share of step time in XLA copies between host memory (``S(5)``) and the device's
    (the breakdown's host offload category), with the buffers moved."""
    b = inp.split
    if "host_offload_ns" not in b or not b["host_offload_ns"].astype(float).any():
        return skip("no XLA copy between host memory (memory space 5) and a device in the steps")
    value = float(b["host_offload_ns"].astype(float).sum() / b["step_time_ns"].astype(float).sum())
    copies = offload_copies(inp)
    steps = max(1, inp.capture_steps["step"].nunique())
    per_step_bytes = (
        float((copies["bytes"] * copies["copies"]).sum()) / steps / max(1, b["device"].nunique())
    )
    worker, _ = worst_step(b, "host_offload_ns")
    return Verdict(
        severity_of(value, t.host_offload),
        value=value,
        expression="(lambda b: b.host_offload_ns.sum() / b.step_time_ns.sum())(prepare(frames).split)",
        evidence={
            "bytes_per_step_per_device": round(per_step_bytes),
            "buffers": [
                {
                    "op": f"{r.program}/{r.hlo_op}",
                    "direction": r.direction,
                    "shape": r.shape,
                    "bytes": int(r.bytes),
                    "copies": int(r.copies),
                    "time_us": round(float(r.time_us), 1),
                    "gib_per_s": None if pd.isna(r.gib_per_s) else float(r.gib_per_s),
                }
                for r in copies.head(6).itertuples()
            ],
        },
        recommendation=f"The steps wait {value:.0%} of their time for host-offload copies "
        f"({per_step_bytes / 2**30:,.2f} GiB per step per device). Keep the buffers in device "
        "memory if they fit (drop the host memory kind or the offload policy); else offload "
        "fewer or smaller buffers (rematerialize with jax.checkpoint instead of offloading), and "
        "start the copies earlier so they overlap compute.",
        at_stake_ns=float(b["host_offload_ns"].astype(float).mean()),
        page=f"/xla?{'&'.join(f'{k}={v}' for k, v in (('worker', worker), ('q', 'copy')) if v)}",
        unit="share",
    )
