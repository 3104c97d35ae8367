"""Device peaks for the roofline: FLOP rate, memory bandwidths and ridge point of each device,
read from the device plane as XProf reads them.

A TPU plane states its peaks (``peak_teraflops_per_second``, ``peak_hbm_bw_gigabytes_per_
second``, VMEM and CMEM bandwidths). A GPU plane states its vendor, clock, core count,
compute capability and memory bandwidth; the peak FLOP rate is cores × clock × the
architecture's FLOPs per core per cycle (the largest of its fp32/fp16 vector and matrix rates,
from the vendors' white papers, as XProf tabulates them), and the shared-memory bandwidth cores
× clock × the bytes its banks serve per cycle. Where the plane names no vendor (the public
V100 capture) or no table knows the architecture, the FLOP peak is unknown: 0 here, as in
XProf, and never a guess.

    >>> peaks = device_peaks(frames.plane_stats)
    >>> peaks[["worker", "device", "device_type", "peak_flop_rate_gflops", "ridge_point"]]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from podscope.analyzers._match import matches

GIB = 2**30
PEAK_COLUMNS = [
    "worker",
    "device",
    "device_type",
    "peak_flop_rate_gflops",
    "peak_hbm_bw_gibs",
    "ridge_point",
    "peak_shm_bw_gibs",
    "peak_vmem_read_bw_gibs",
    "peak_vmem_write_bw_gibs",
    "peak_cmem_read_bw_gibs",
    "peak_cmem_write_bw_gibs",
    "memory_size_bytes",
]
#: NVIDIA: FLOPs per SM per cycle (max of CUDA-core and Tensor-Core fp32/fp16), by the lowest
#: compute capability (major * 1000 + minor * 10) they hold from.
_NVIDIA_FLOPS_PER_SM_CYCLE = {
    10000: 8192,
    9000: 4096,
    8090: 1024,
    8060: 1024,
    8000: 2048,
    7050: 1024,
    7000: 1024,
    6010: 256,
    6000: 256,
    5000: 256,
    3000: 384,
    2000: 64,
}
#: AMD Instinct: (FLOPs per CU per cycle: max of vector and matrix fp32/fp16, LDS bytes per CU
#: per cycle), by gfx architecture (CDNA 1-4 white papers).
_AMD_PER_CU_CYCLE = {
    "gfx908": (1024, 128),
    "gfx90a": (1024, 128),
    "gfx942": (2048, 128),
    "gfx950": (4096, 256),
}
_AMD_GFX_BY_CAPABILITY = {(9, 4): "gfx942", (9, 5): "gfx950"}


def _nvidia_flops_per_cycle(major: int, minor: int) -> int:
    """The table's row for this capability: the highest at or below it, else the oldest."""
    cap = major * 1000 + minor * 10
    known = sorted(_NVIDIA_FLOPS_PER_SM_CYCLE)
    below = [k for k in known if k <= cap]
    return _NVIDIA_FLOPS_PER_SM_CYCLE[below[-1] if below else known[0]]


def _nvidia_name(major: int, minor: int) -> str:
    names = {2: "Fermi", 3: "Kepler", 5: "Maxwell", 6: "Pascal", 9: "Hopper", 10: "Blackwell"}
    if major == 7:
        return "Nvidia GPU (Volta)" if minor < 5 else "Nvidia GPU (Turing)"
    if major == 8:
        return "Nvidia GPU (Ampere)" if minor < 9 else "Nvidia GPU (Ada Lovelace)"
    return f"Nvidia GPU ({names[major]})" if major in names else "Nvidia GPU"


def _num(s: dict[str, Any], key: str) -> float:
    """A plane stat as a number (0 when the plane does not state it)."""
    value = s.get(key)
    return float(value) if isinstance(value, int | float | np.integer | np.floating) else 0.0


def _gpu_peaks(s: dict[str, Any]) -> dict[str, object]:
    vendor = str(s.get("device_vendor") or "")
    ghz = _num(s, "clock_rate") / 1e6  # the stat is in kHz
    cores = _num(s, "core_count")
    major, minor = int(_num(s, "compute_cap_major")), int(_num(s, "compute_cap_minor"))
    flops_cycle, shm_cycle, name = 0.0, 0.0, "GPU"
    if vendor.lower() == "nvidia":
        flops_cycle = _nvidia_flops_per_cycle(major, minor)
        shm_cycle = 64 if major <= 2 else 256
        name = _nvidia_name(major, minor)
    elif vendor == "AMD":
        gfx = _AMD_GFX_BY_CAPABILITY.get((major, minor), "")
        flops_cycle, shm_cycle = _AMD_PER_CU_CYCLE.get(gfx, (0, 0))
        name = f"AMD GPU - {gfx}" if gfx else "AMD GPU"
    hbm = _num(s, "memory_bandwidth") / GIB
    return {
        "device_type": name,
        "peak_flop_rate_gflops": cores * flops_cycle * ghz,
        "peak_hbm_bw_gibs": hbm,
        "peak_shm_bw_gibs": cores * shm_cycle * ghz * 1e9 / GIB,
        "memory_size_bytes": s.get("memory_size"),
    }


def _tpu_peaks(s: dict[str, Any]) -> dict[str, object]:
    def gib(key: str) -> float:
        return _num(s, key) * 1e9 / GIB

    return {
        "device_type": str(s.get("device_type_string") or "TPU"),
        "peak_flop_rate_gflops": _num(s, "peak_teraflops_per_second") * 1000,
        "peak_hbm_bw_gibs": gib("peak_hbm_bw_gigabytes_per_second"),
        "peak_vmem_read_bw_gibs": gib("peak_vmem_rd_bw_gigabytes_per_second"),
        "peak_vmem_write_bw_gibs": gib("peak_vmem_wr_bw_gigabytes_per_second"),
        "peak_cmem_read_bw_gibs": gib("peak_cmem_rd_bw_gigabytes_per_second"),
        "peak_cmem_write_bw_gibs": gib("peak_cmem_wr_bw_gigabytes_per_second"),
        "memory_size_bytes": s.get("memory_size") or s.get("hbm_capacity_bytes"),
    }


def device_peaks(plane_stats: pd.DataFrame) -> pd.DataFrame:
    """Per worker and GPU/TPU plane: device type and peaks (GFLOP/s, GiB/s).

    Args:
        plane_stats: the ``plane_stats`` frame.

    Returns:
        ``PEAK_COLUMNS``; ``ridge_point`` (FLOP/byte) is the peak FLOP rate over the HBM
        bandwidth (0 when either is unknown), bandwidths a plane does not state are 0, and
        ``memory_size_bytes`` NA where the plane does not say.
    """
    ps = plane_stats[matches(plane_stats["plane"], "/device:(?:GPU|TPU)", how="match")]
    rows = []
    for (worker, plane), g in ps.groupby(["worker", "plane"], observed=True, sort=True):
        s = {
            str(k): (v if not pd.isna(v) else f if not pd.isna(f) else t)
            for k, v, f, t in zip(
                g["key"], g["int_value"], g["float_value"], g["str_value"], strict=True
            )
        }
        peaks = _tpu_peaks(s) if str(plane).startswith("/device:TPU") else _gpu_peaks(s)
        rows.append({"worker": str(worker), "device": str(plane), **peaks})
    out = pd.DataFrame(rows, columns=PEAK_COLUMNS)
    for c in PEAK_COLUMNS[3:-1]:
        out[c] = out[c].astype(float).fillna(0.0)
    flops, hbm = out["peak_flop_rate_gflops"], out["peak_hbm_bw_gibs"] * GIB / 1e9
    out["ridge_point"] = np.where((flops > 0) & (hbm > 0), flops / hbm.where(hbm > 0), 0.0)
    out["memory_size_bytes"] = pd.array(
        pd.to_numeric(out["memory_size_bytes"], errors="coerce"), dtype="Int64"
    )
    return out
