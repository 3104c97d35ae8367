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

Where the device is a product whose vendor data sheet this module holds (``DATA_SHEETS``,
identified by vendor, architecture, core count and memory size, never by a guess) and the
trace's HBM bandwidth differs from the sheet's by more than 2 %, the sheet's is the peak and
``peak_source`` says so, with the trace's figure in ``stated_hbm_bw_gibs``: the MI300X's
ROCm plane states 2,479.6 GiB/s (2.66 TB/s, which XProf shows), its data sheet 5.3 TB/s.

    >>> peaks = device_peaks(frames.plane_stats)
    >>> peaks[["worker", "device", "device_type", "peak_flop_rate_gflops", "ridge_point"]]
"""

from __future__ import annotations

from typing import Any, NamedTuple

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
    "stated_hbm_bw_gibs",
    "product",
    "peak_source",
]


class DataSheet(NamedTuple):
    """A product's HBM bandwidth from its vendor's data sheet, and how a trace's device plane
    identifies it: vendor, architecture (NVIDIA compute capability ``major.minor``, AMD
    ``gfx…``), cores (SMs, CUs: one GCD's for a multi-die card) and memory (GB as sold)."""

    product: str
    vendor: str
    arch: str
    cores: int
    memory_gb: float
    hbm_tb_s: float
    source: str


#: Products whose data sheet is known here. Two products one key could name are left out
#: unless their sheets agree (A100 80 GB SXM 2.04 TB/s and PCIe 1.94 TB/s: both 108 SMs).
DATA_SHEETS = (
    DataSheet("AMD Instinct MI300X", "AMD", "gfx942", 304, 192, 5.3, "AMD Instinct MI300X data sheet"),
    DataSheet("AMD Instinct MI300A", "AMD", "gfx942", 228, 128, 5.3, "AMD Instinct MI300A data sheet"),
    DataSheet("AMD Instinct MI325X", "AMD", "gfx942", 304, 256, 6.0, "AMD Instinct MI325X data sheet"),
    DataSheet("AMD Instinct MI350X / MI355X", "AMD", "gfx950", 256, 288, 8.0, "AMD Instinct MI350 series data sheet"),
    DataSheet("NVIDIA V100 16 GB", "nvidia", "7.0", 80, 16, 0.9, "NVIDIA V100 data sheet"),
    DataSheet("NVIDIA T4", "nvidia", "7.5", 40, 16, 0.32, "NVIDIA T4 data sheet"),
    DataSheet("NVIDIA A100 40 GB", "nvidia", "8.0", 108, 40, 1.555, "NVIDIA A100 data sheet"),
    DataSheet("NVIDIA A10", "nvidia", "8.6", 72, 24, 0.6, "NVIDIA A10 data sheet"),
    DataSheet("NVIDIA L4", "nvidia", "8.9", 58, 24, 0.3, "NVIDIA L4 data sheet"),
    DataSheet("NVIDIA H100 SXM", "nvidia", "9.0", 132, 80, 3.35, "NVIDIA H100 data sheet"),
    DataSheet("NVIDIA H100 PCIe", "nvidia", "9.0", 114, 80, 2.0, "NVIDIA H100 data sheet"),
    DataSheet("NVIDIA H200", "nvidia", "9.0", 132, 141, 4.8, "NVIDIA H200 data sheet"),
)  # fmt: skip
#: The trace's HBM figure is kept within this of the data sheet's.
SHEET_TOLERANCE = 0.02
#: A device's memory matches a sheet's within this (the runtime reports less than is sold:
#: a 16 GB V100 has 15.8 GiB for programs).
MEMORY_TOLERANCE = 0.1
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


def _gpu_peaks(s: dict[str, Any], data_sheets: bool) -> dict[str, object]:
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
    arch = gfx if vendor == "AMD" else f"{major}.{minor}"
    unit = "CUs" if vendor == "AMD" else "SMs"
    flops_how = (
        f"{cores:.0f} {unit} × {ghz:.2f} GHz × {flops_cycle:.0f} FLOPs per cycle (the "
        "architecture's white paper, as XProf)"
        if flops_cycle
        else "unknown (the plane names no vendor or architecture PodScope knows)"
    )
    peaks: dict[str, object] = {
        "device_type": name,
        "peak_flop_rate_gflops": cores * flops_cycle * ghz,
        "peak_hbm_bw_gibs": hbm,
        "peak_shm_bw_gibs": cores * shm_cycle * ghz * 1e9 / GIB,
        "memory_size_bytes": s.get("memory_size"),
        "stated_hbm_bw_gibs": hbm,
        "product": "",
        "peak_source": f"FLOP/s: {flops_how}; HBM: the trace's plane, as XProf",
    }
    sheet = data_sheet(vendor, arch, int(cores), _num(s, "memory_size")) if data_sheets else None
    if sheet is None:
        return peaks
    sheet_gibs = sheet.hbm_tb_s * 1e12 / GIB
    peaks["product"] = sheet.product
    if hbm > 0 and abs(hbm / sheet_gibs - 1) <= SHEET_TOLERANCE:
        peaks["peak_source"] = (
            f"FLOP/s: {flops_how}; HBM: the trace's plane, as XProf (the {sheet.source}: "
            f"{sheet.hbm_tb_s:g} TB/s)"
        )
        return peaks
    peaks["peak_hbm_bw_gibs"] = sheet_gibs
    peaks["peak_source"] = (
        f"FLOP/s: {flops_how}; HBM: {sheet.hbm_tb_s:g} TB/s from the {sheet.source}: the "
        f"trace states {hbm * GIB / 1e12:.2f} TB/s" + (", which XProf shows" if hbm > 0 else "")
    )
    return peaks


def data_sheet(vendor: str, arch: str, cores: int, memory_bytes: float) -> DataSheet | None:
    """The product a GPU plane describes, when ``DATA_SHEETS`` holds exactly one that fits
    (or several whose HBM figures agree), else None."""
    fits = [
        d
        for d in DATA_SHEETS
        if d.vendor.lower() == vendor.lower()
        and d.arch == arch
        and d.cores == cores
        and memory_bytes > 0
        # sold in GB, which a runtime reports as GB or GiB
        and min(abs(memory_bytes / (d.memory_gb * unit) - 1) for unit in (1e9, GIB))
        <= MEMORY_TOLERANCE
    ]
    if not fits or len({d.hbm_tb_s for d in fits}) > 1:
        return None
    return fits[0]


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
        "stated_hbm_bw_gibs": gib("peak_hbm_bw_gigabytes_per_second"),
        "product": "",
        "peak_source": "stated by the TPU's plane, as XProf reads them",
    }


def device_peaks(plane_stats: pd.DataFrame, data_sheets: bool = True) -> pd.DataFrame:
    """Per worker and GPU/TPU plane: device type and peaks (GFLOP/s, GiB/s).

    Args:
        plane_stats: the ``plane_stats`` frame.
        data_sheets: a known product's data sheet overrules the trace's HBM figure (the
            module's docstring); False: the trace's figures alone, as XProf reads them.

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
        tpu = str(plane).startswith("/device:TPU")
        peaks = _tpu_peaks(s) if tpu else _gpu_peaks(s, data_sheets)
        rows.append({"worker": str(worker), "device": str(plane), **peaks})
    out = pd.DataFrame(rows, columns=PEAK_COLUMNS)
    for c in [*PEAK_COLUMNS[3:11], "stated_hbm_bw_gibs"]:
        out[c] = out[c].astype(float).fillna(0.0)
    for c in ("product", "peak_source"):
        out[c] = out[c].fillna("").astype(str)
    flops, hbm = out["peak_flop_rate_gflops"], out["peak_hbm_bw_gibs"] * GIB / 1e9
    out["ridge_point"] = np.where((flops > 0) & (hbm > 0), flops / hbm.where(hbm > 0), 0.0)
    out["memory_size_bytes"] = pd.array(
        pd.to_numeric(out["memory_size_bytes"], errors="coerce"), dtype="Int64"
    )
    return out
