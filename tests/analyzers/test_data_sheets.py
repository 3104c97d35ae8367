"""Device peaks from vendor data sheets (``analyzers.roofline.DATA_SHEETS``): a GPU plane is
matched to one product by vendor, architecture, cores and memory, never guessed; the sheet's
HBM figure is the peak where the trace's differs by more than 2 %, and the source says which.
The shared ROCm samples are checked against XProf in ``test_xla_ops.py``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from podscope.analyzers.roofline import DATA_SHEETS, GIB, device_peaks

DOCS = Path(__file__).resolve().parents[2] / "docs" / "xla.md"


def nvidia_plane(major: int, minor: int, sms: int, memory: int, hbm_bytes_s: float) -> pd.DataFrame:
    stats = {
        "device_vendor": "Nvidia",
        "clock_rate": 1_980_000,  # kHz
        "core_count": sms,
        "compute_cap_major": major,
        "compute_cap_minor": minor,
        "memory_size": memory,
        "memory_bandwidth": int(hbm_bytes_s),
    }
    return pd.DataFrame(
        [
            {
                "worker": "w",
                "plane": "/device:GPU:0",
                "key": k,
                "int_value": v if isinstance(v, int) else None,
                "float_value": None,
                "str_value": v if isinstance(v, str) else None,
            }
            for k, v in stats.items()
        ]
    ).astype({"int_value": "Int64", "float_value": "Float64"})


def test_a_trace_that_agrees_with_its_sheet_keeps_its_own_figure() -> None:
    """An H100 SXM (132 SMs, 80 GB: 79.6 GiB reported) stating 3.35 TB/s within 1 %."""
    p = device_peaks(nvidia_plane(9, 0, 132, 85_520_809_984, 3.33e12)).iloc[0]
    assert p["product"] == "NVIDIA H100 SXM"
    assert p["peak_hbm_bw_gibs"] == p["stated_hbm_bw_gibs"] == pytest.approx(3.33e12 / GIB)
    assert "the trace's plane, as XProf (the NVIDIA H100 data sheet: 3.35 TB/s)" in p["peak_source"]


def test_a_trace_that_states_less_yields_to_its_sheet() -> None:
    """An H200 (132 SMs, 141 GB) whose plane states 2.4 TB/s: the sheet's 4.8 TB/s is the peak,
    the ridge follows it, the trace's figure is kept beside it."""
    p = device_peaks(nvidia_plane(9, 0, 132, 150_000_000_000, 2.4e12)).iloc[0]
    assert p["product"] == "NVIDIA H200"
    assert p["peak_hbm_bw_gibs"] == pytest.approx(4.8e12 / GIB)
    assert p["stated_hbm_bw_gibs"] == pytest.approx(2.4e12 / GIB)
    assert p["ridge_point"] == pytest.approx(p["peak_flop_rate_gflops"] * 1e9 / 4.8e12)
    assert (
        "4.8 TB/s from the NVIDIA H200 data sheet: the trace states 2.40 TB/s" in p["peak_source"]
    )
    stated = device_peaks(nvidia_plane(9, 0, 132, 150_000_000_000, 2.4e12), data_sheets=False)
    assert stated["peak_hbm_bw_gibs"].iloc[0] == pytest.approx(2.4e12 / GIB)


@pytest.mark.parametrize(
    "plane, why",
    [
        (nvidia_plane(8, 0, 108, 85_899_345_920, 1.0e12), "A100 80 GB: SXM or PCIe, sheets differ"),
        (nvidia_plane(9, 0, 132, 0, 1.0e12), "no memory size stated"),
        (nvidia_plane(9, 0, 120, 85_520_809_984, 1.0e12), "no product with 120 SMs"),
    ],
)
def test_no_sheet_is_guessed(plane: pd.DataFrame, why: str) -> None:
    p = device_peaks(plane).iloc[0]
    assert p["product"] == "", why
    assert p["peak_hbm_bw_gibs"] == pytest.approx(1.0e12 / GIB), why


def test_the_docs_list_every_sheet() -> None:
    text = DOCS.read_text()
    for d in DATA_SHEETS:
        assert f"| {d.product} |" in text and f"| {d.hbm_tb_s:g} TB/s | {d.source} |" in text
