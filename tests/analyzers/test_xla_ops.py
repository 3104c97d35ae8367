"""XLA ops against XProf on the public ROCm and TPU captures: the HLO op table equals XProf's
``hlo_stats`` row for row (occurrences exact, self time within 1 %, FLOP rate and bandwidths
within 2 %, ``bound_by``, category and source line identical; a legacy cuBLAS GEMM, which
XProf gives no cost, has 2·M·N·K FLOPs from its text instead), and the device peaks equal
the ``roofline_model`` tool's within 1 %. Each sample is copied into a folder of its own and
XProf runs with ``use_saved_result: False`` (it caches one answer per folder otherwise).
Skipped with a reason when ``../shared/traces/xplane`` or XProf is absent."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from podscope.analyzers.hlo_stats import compare_hlo, hlo_stats, op_profile
from podscope.analyzers.roofline import device_peaks
from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers import load
from tests.analyzers.test_xprof_samples import table, xprof
from tests.conftest import real_xplanes

pytestmark = pytest.mark.slow
XLA_SAMPLES = [p for p in real_xplanes() if "v100" not in str(p)]
if not XLA_SAMPLES:
    XLA_SAMPLES = [
        pytest.param(None, marks=pytest.mark.skip(reason="../shared/traces/xplane absent"))
    ]


def ids(p: Any) -> str:
    return p.name.split(".xplane")[0][-28:] if isinstance(p, Path) else "absent"


def own_folder(path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("xla")
    shutil.copy(path, run / path.name)
    return run / path.name


def close(ours: float, theirs: float, rel: float) -> bool:
    return abs(ours - theirs) <= rel * abs(theirs) + 1e-6


def as_xprof(a: SessionAnalysis, idle: bool = False, per_device: bool = False) -> pd.DataFrame:
    """``a.hlo_table`` with the device peaks the trace states, as XProf reads them (ours
    take an MI300X's HBM bandwidth from its data sheet: test_data_sheets_overrule_a_trace_
    that_states_less)."""
    return hlo_stats(
        a.xla_ops.drop(columns=["execution"], errors="ignore"),
        device_peaks(a.meta.plane_stats, data_sheets=False),
        per_device=per_device,
        idle=idle,
        device_time=a.device_time,
    )


@pytest.mark.parametrize("sample", XLA_SAMPLES, ids=ids)
def test_hlo_table_equals_xprof_hlo_stats(
    sample: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = own_folder(sample, tmp_path_factory)
    theirs = table(xprof(path, "hlo_stats"))
    a = SessionAnalysis(load(path, cache=False))
    ours = as_xprof(a).set_index(["program_id", "hlo_op_name"])
    assert len(theirs) > 0 and len(ours) == len(theirs)
    # the IDLE row is the device time the ops leave: XProf's percentages sum with it to 100
    idle = as_xprof(a, idle=True).set_index("hlo_op_name").loc["IDLE"]
    assert close(idle["self_time_percent"], 100 - theirs["total_self_time_percent"].sum(), 0.01)
    for r in theirs.itertuples(index=False):
        o = ours.loc[(str(r.program_id), r.hlo_op_name)]
        where = f"{r.program_id}/{r.hlo_op_name}"
        assert o["occurrences"] == r.occurrences, where
        assert close(o["total_self_time_us"], r.total_self_time, 0.01), where
        # of the device time, idle included (the share of XLA op time was shown as XProf's)
        assert close(o["self_time_percent"], r.total_self_time_percent, 0.01), where
        assert close(
            o["cumulative_self_time_percent"], r.cumulative_total_self_time_percent, 0.01
        ), where
        assert o["category"] == r.category, where
        assert o["source"] == re.sub(r"<[^>]*>", "", str(r.source_info)), where
        if o["flops_source"] == "shapes":  # a GEMM XProf has no cost for: 0 there
            assert r.model_flop_rate == 0 and r.bound_by == "Unknown", where
            n = o["occurrences"]
            assert o["flops"] == n * gemm_flops(o["expression"]), where
            assert o["bytes_accessed"] == n * gemm_bytes(o["expression"]), where
            continue
        assert close(o["model_flop_rate_gflops"], r.model_flop_rate, 0.02), where
        assert close(o["memory_bw_gibs"], r.measured_memory_bw, 0.02), where
        assert close(o["hbm_bw_gibs"], r.hbm_bw, 0.02), where
        assert close(o["operational_intensity"], r.operational_intensity, 0.02), where
        assert o["bound_by"] == r.bound_by, where


_SHAPE = re.compile(r"(bf16|f16|f32|f64|s8)\[([\d,]*)\]")
_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "s8": 1}


def _shapes(expression: str) -> list[tuple[str, list[int]]]:
    """The array shapes of an HLO expression in order: the results', then the operands'."""
    return [(t, [int(d) for d in dims.split(",") if d]) for t, dims in _SHAPE.findall(expression)]


def gemm_flops(expression: str) -> int:
    """2·M·N·K (the batch included) of a GEMM custom call, read from its text: the result
    [B.., M, N] (its first tuple element; the second is the library's scratch) and operands
    of B·M·K and B·K·N elements (in any layout), so K² = lhs · rhs / (result · B)."""
    (_, out), _, (_, lhs), (_, rhs) = _shapes(expression)[:4]
    batch = math.prod(out[:-2])
    k = math.isqrt(math.prod(lhs) * math.prod(rhs) // (math.prod(out) * batch))
    assert k * k * math.prod(out) * batch == math.prod(lhs) * math.prod(rhs), expression
    return 2 * math.prod(out) * k


def gemm_bytes(expression: str) -> int:
    """The operands' and the result's bytes (not the scratch buffer)."""
    (t0, out), _, (t1, lhs), (t2, rhs) = _shapes(expression)[:4]
    size = 0
    for t, dims in ((t0, out), (t1, lhs), (t2, rhs)):
        n = _BYTES[t]
        for d in dims:
            n *= d
        size += n
    return size


@pytest.mark.parametrize("sample", real_xplanes() or XLA_SAMPLES, ids=ids)
def test_device_peaks_equal_xprof_roofline(
    sample: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The V100 sample's plane names no vendor: its peak FLOP rate is unknown, 0 in both."""
    path = own_folder(sample, tmp_path_factory)
    props = xprof(path, "roofline_model")[0]["p"]
    a = SessionAnalysis(load(path, cache=False))
    peaks = device_peaks(a.meta.plane_stats, data_sheets=False).iloc[0]
    assert close(peaks["peak_flop_rate_gflops"], float(props["peak_flop_rate"]), 0.01)
    assert close(peaks["peak_hbm_bw_gibs"], float(props["peak_hbm_bw"]), 0.01)
    assert close(peaks["ridge_point"], float(props["hbm_ridge_point"]), 0.01)
    assert peaks["device_type"] == props["device_type"]
    # what the trace states stays beside the peak a data sheet may set
    assert close(a.device_peaks.iloc[0]["stated_hbm_bw_gibs"], float(props["peak_hbm_bw"]), 0.01)


@pytest.mark.parametrize("sample", XLA_SAMPLES, ids=ids)
def test_data_sheets_overrule_a_trace_that_states_less(
    sample: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Five ROCm samples are MI300X (gfx942, 304 CUs, 192 GB): their planes state 2.66 TB/s of
    HBM, XProf's figure; the data sheet says 5.3 TB/s, which is the peak, its source said.
    The sixth is an MI355X (gfx950, 256 CUs, 288 GB: 4.10 TB/s stated, 8 TB/s on the sheet);
    its other seven GPU planes state nothing (no sheet, no guess). The ROCm conv's
    input_transpose_fusion, 117 % of the stated peak, is then 59 % of the device's, under its
    roof. The TPU states its own peaks: no sheet."""
    a = SessionAnalysis(load(own_folder(sample, tmp_path_factory), cache=False))
    peaks = a.device_peaks
    if "tpu" in sample.name:
        assert (peaks["product"] == "").all()
        assert (peaks["peak_hbm_bw_gibs"] == peaks["stated_hbm_bw_gibs"]).all()
        assert peaks["peak_source"].str.startswith("stated by the TPU's plane").all()
        return
    mi355 = "te_fused_attn" in sample.name
    product, sheet, stated = (
        ("AMD Instinct MI350X / MI355X", 8.0, "4.10")
        if mi355
        else ("AMD Instinct MI300X", 5.3, "2.66")
    )
    known = peaks[peaks["stated_hbm_bw_gibs"] > 0]
    assert len(known) == (1 if mi355 else 8)
    assert (peaks.loc[peaks["stated_hbm_bw_gibs"] == 0, "product"] == "").all()
    assert (known["product"] == product).all()
    assert known["peak_hbm_bw_gibs"].to_numpy() == pytest.approx(sheet * 1e12 / 2**30)
    assert known["ridge_point"].to_numpy() == pytest.approx(
        known["peak_flop_rate_gflops"].to_numpy() * 1e9 / (sheet * 1e12)
    )
    said = f"{sheet:g} TB/s from the AMD Instinct MI3"
    assert known["peak_source"].str.contains(said, regex=False).all()
    assert known["peak_source"].str.contains(f"the trace states {stated} TB/s").all()
    if "conv_minimal_08" in sample.name:
        t = a.hlo_table(per_device=True)
        row = t[t["hlo_op_name"] == "input_transpose_fusion"]
        share = row["hbm_bw_gibs"].max() / peaks["peak_hbm_bw_gibs"].iloc[0]
        assert 0.5 < share < 0.65 and not row["above_peak"].any()


def test_xla_tables_of_the_tpu_sample_hold_together(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Per device and per execution, the rows add up to the whole table; the op profile's
    root holds all the time and its shares sum to 1; the TPU's host-offload copies are
    copies between memory space 5 (host) and HBM, as the HLO text says."""
    sample = next((p for p in real_xplanes() if "tpu" in p.name), None)
    if sample is None:
        pytest.skip("../shared/traces/xplane absent")
    a = SessionAnalysis(load(own_folder(sample, tmp_path_factory), cache=False))
    whole = a.hlo_table().set_index(["program_id", "hlo_op_name"])
    per_device = a.hlo_table(per_device=True)
    assert per_device["device"].nunique() == 4
    summed = per_device.groupby(["program_id", "hlo_op_name"])[
        ["occurrences", "total_self_time_us"]
    ].sum()
    pd.testing.assert_series_equal(
        summed["occurrences"].sort_index(), whole["occurrences"].sort_index(), check_names=False
    )
    by_exec = a.hlo_table(by_execution=True)
    body = by_exec[by_exec["program"] == "jit_f"]
    assert body["execution"].nunique() == 100  # jit_f ran 100 times on each core
    profile = op_profile(a.hlo_table(), a.device_peaks)
    root = profile[profile["level"] == "root"].iloc[0]
    assert root["self_time_us"] == pytest.approx(whole["total_self_time_us"].sum())
    assert profile[profile["level"] == "op"]["time_share"].sum() == pytest.approx(1.0)
    copies = a.xla_ops[a.xla_ops["hlo_op"].astype(str).str.startswith("copy-done")]
    spaces = set(zip(copies["copy_from"].astype(int), copies["copy_to"].astype(int), strict=True))
    assert spaces == {(5, 0), (0, 5)}


@pytest.mark.parametrize("sample", XLA_SAMPLES, ids=ids)
def test_op_profile_has_xprofs_device_time_and_idle(
    sample: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """XProf's op profile by program: its root is the device time, IDLE a node beside the
    programs; each program's time and share of it equal XProf's within 1 % (the shares were
    of the XLA op time: the TPU's jit_f 99.5 % where XProf says 86.2 %)."""
    path = own_folder(sample, tmp_path_factory)
    theirs = xprof(path, "op_profile")["byProgram"]
    a = SessionAnalysis(load(path, cache=False))
    ours = op_profile(a.hlo_table(idle=True), a.device_peaks).set_index("id")
    root_ps = theirs["metrics"]["rawTime"]
    assert close(ours.loc["", "self_time_us"] * 1e6, root_ps, 0.01)
    assert ours.loc["", "time_share"] == 1.0
    for child in theirs["children"]:
        name, ps = child["name"], child["metrics"]["rawTime"]
        node = ours.loc[name.replace("/", "∕")]
        assert node["level"] == ("idle" if name == "IDLE" else "program"), name
        assert close(node["self_time_us"] * 1e6, ps, 0.01), name
        assert node["time_share"] == pytest.approx(ps / root_ps, abs=0.005), name


@pytest.mark.parametrize("sample", XLA_SAMPLES, ids=ids)
def test_no_utilisation_above_the_device(
    sample: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A rate above its device's peak is flagged, never shown as a utilisation: the TPU's
    copy-starts (bytes over a start of a few ns: 833,333,333 GiB/s, "% peak HBM 87585507"
    in the op profile), the ROCm conv's input_transpose_fusion (117 % of the HBM peak the
    plane states). Efficiencies and the op profile's utilisations stay at most 1."""
    a = SessionAnalysis(load(own_folder(sample, tmp_path_factory), cache=False))
    table = a.hlo_table(per_device=True)
    peaks = a.device_peaks.set_index("device")
    peak_hbm = table["device"].map(peaks["peak_hbm_bw_gibs"]).astype(float)
    peak_flops = table["device"].map(peaks["peak_flop_rate_gflops"]).astype(float)
    over = ((peak_hbm > 0) & (table["hbm_bw_gibs"] > peak_hbm)) | (
        (peak_flops > 0) & (table["measured_flop_rate_gflops"] > peak_flops)
    )
    flagged = table["above_peak"].astype(bool)
    assert not (over & ~flagged).any(), table.loc[over & ~flagged, "hlo_op_name"].tolist()
    assert (table["roofline_efficiency"].dropna() <= 1).all()
    profile = op_profile(a.hlo_table(idle=True), a.device_peaks)
    for col in ("flops_utilization", "bandwidth_utilization"):
        assert (profile[col].dropna() <= 1).all(), col
    if "tpu" in sample.name:
        starts = table[table["hlo_op_name"].str.startswith("copy-start")]
        assert len(starts) and starts["above_peak"].all()
        assert profile["above_peak"].any()
    if "conv_minimal_08" in sample.name:  # over the peak its plane states (XProf's)
        xprof_peaks = as_xprof(a, per_device=True)
        assert xprof_peaks.loc[
            xprof_peaks["hlo_op_name"] == "input_transpose_fusion", "above_peak"
        ].all()


def test_compare_names_the_op_that_got_slower() -> None:
    """Two synthetic hlo_stats tables: the op whose time per occurrence grew is first and
    says by how much; captures of different lengths compare per occurrence."""

    def t(rows: list[tuple[str, int, float]]) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "program": "jit_step",
                    "hlo_op_name": n,
                    "category": "loop fusion",
                    "occurrences": k,
                    "total_time_us": us,
                }
                for n, k, us in rows
            ]
        )

    base = t([("fusion.1", 10, 1000.0), ("dot.2", 10, 5000.0), ("gone.3", 10, 10.0)])
    new = t([("fusion.1", 20, 2000.0), ("dot.2", 20, 16000.0), ("added.4", 20, 40.0)])
    c = compare_hlo(base, new).set_index("hlo_op_name")
    assert c.index[0] == "dot.2"
    assert c.loc["dot.2", "delta_avg_us"] == pytest.approx(300.0)
    assert c.loc["dot.2", "change"] == pytest.approx(0.6)
    assert c.loc["fusion.1", "status"] == "same"
    assert (c.loc["gone.3", "status"], c.loc["added.4", "status"]) == ("gone", "new")


@pytest.mark.parametrize("sample", XLA_SAMPLES, ids=ids)
def test_each_ops_timeline_link_shows_the_events_the_table_counted(sample: Path) -> None:
    """A table row's link opens the Timeline on ``hlo:NAME``: exactly the events counted as
    that op's occurrences. A name search found 40 host thunks for conv's ``cudnn-conv.1`` (79
    GPU occurrences) and twice the TPU's ``copy-done.4``."""
    a = SessionAnalysis(load(sample, cache=False))
    table = a.hlo_table()
    table = table[table["hlo_op_name"].astype(str) != "IDLE"]
    counted = table.groupby(["worker", "hlo_op_name"], observed=True)["occurrences"].sum()
    assert len(counted)
    shown = {
        (w, op): int(a.timeline(str(w)).matching(f"hlo:{op}").sum()) for w, op in counted.index
    }
    assert shown == counted.astype(int).to_dict()
