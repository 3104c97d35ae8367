"""``podscope hlo``, ``podscope roofline`` and ``podscope compare --csv xla`` as a user runs
them (a subprocess) on the public TPU, ROCm and V100 captures; skipped when absent."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from tests.app.test_cli_parse import podscope
from tests.conftest import SHARED_TRACES

XPLANE = SHARED_TRACES / "xplane"
TPU = XPLANE / "tpu_xprof" / "tpu_inference_2.xplane.pb"
CONV = XPLANE / "rocm_jax_tracelens" / "traces__mi300__jax_conv_minimal_08__tw003.xplane.pb"
LEGACY = next(iter(sorted(XPLANE.glob("rocm_jax_tracelens/*legacy*.xplane.pb"))), None)
V100 = XPLANE / "gpu_tf_multiworker_v100" / "34.83.195.179_6003.xplane.pb"
pytestmark = pytest.mark.skipif(not TPU.exists(), reason="../shared/traces/xplane absent")


def test_hlo_and_roofline_of_the_tpu_sample(tmp_path: Path) -> None:
    out = podscope("hlo", str(TPU), "--csv", cache=tmp_path)
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(io.StringIO(out.stdout), dtype={"program_id": str})
    assert len(table) == 18 and table.iloc[0]["hlo_op_name"] == "copy-done.4"
    assert table.iloc[0]["bound_by"] == "HBM" and table.iloc[0]["occurrences"] == 400
    # XProf's percentages, of the device time idle included, and the IDLE row that completes
    # them (the TPU's four cores wait 13.4 % of their time)
    idle = table.set_index("hlo_op_name").loc["IDLE"]
    assert idle["self_time_percent"] == pytest.approx(13.37, abs=0.01)  # XProf: 13.365
    assert table["self_time_percent"].sum() == pytest.approx(100)
    per_device = pd.read_csv(
        io.StringIO(podscope("hlo", str(TPU), "--csv", "--device", "TPU:2", cache=tmp_path).stdout)
    )
    assert set(per_device["device"]) == {"/device:TPU:2"}
    shown = podscope("hlo", str(TPU), "--top", "3", cache=tmp_path).stdout
    assert "copy-done.4" in shown and max(len(line) for line in shown.splitlines()) <= 80
    # the copy-starts' rates (bytes over a few ns) are flagged, not shown as a utilisation
    every = podscope("hlo", str(TPU), "--top", "30", cache=tmp_path).stdout
    starts = [line for line in every.splitlines() if line.split()[:1] == ["copy-start.4"]]
    assert starts and starts[0].rstrip().endswith("HBM!"), every
    assert "measured above the device's peak: the peak or the op's cost is wrong" in " ".join(
        every.split()
    )
    assert table.loc[table["hlo_op_name"].str.startswith("copy-start"), "above_peak"].all()
    assert table["roofline_efficiency"].max() <= 1
    peaks = pd.read_csv(io.StringIO(podscope("roofline", str(TPU), "--csv", cache=tmp_path).stdout))
    assert len(peaks) == 4 and (peaks["peak_flop_rate_gflops"] == 918000).all()


def test_a_tensorflow_gpu_capture_says_why_it_has_no_xla_table(tmp_path: Path) -> None:
    out = podscope("hlo", str(V100), cache=tmp_path)
    said = " ".join(out.stderr.split())  # wrapped at 80 columns, wherever the path ends
    assert out.returncode == 0 and "no XLA ops" in said and out.stdout == ""
    peaks = pd.read_csv(
        io.StringIO(podscope("roofline", str(V100), "--csv", cache=tmp_path).stdout)
    )
    assert (peaks["peak_flop_rate_gflops"] == 0).all()  # no vendor on the plane: unknown


@pytest.mark.skipif(LEGACY is None, reason="the legacy ROCm sample is absent")
def test_compare_two_rocm_captures_op_by_op(tmp_path: Path) -> None:
    out = podscope("compare", str(CONV), str(LEGACY), "--csv", "xla", cache=tmp_path)
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(io.StringIO(out.stdout))
    row = table.set_index("hlo_op_name").loc["input_transpose_fusion"]
    assert row["status"] == "slower" and row["new_avg_us"] > row["base_avg_us"]
    assert {"new", "gone"} <= set(table["status"])  # the conv is renamed between the builds


GEMM = XPLANE / "rocm_jax_tracelens" / "traces__mi300__jax08_gemm__tw003.xplane.pb"


@pytest.mark.skipif(not GEMM.exists(), reason="the ROCm gemm sample is absent")
def test_at_80_columns_rows_stay_distinct_and_units_keep_their_slash(tmp_path: Path) -> None:
    """The gemm sample runs each jitted GEMM three times: ``--by-execution`` shows which
    execution each row is (the rows were identical); the roofline's units read GFLOP/s and
    GiB/s (they read "gflop s"); an unknown ``--device`` is a usage error naming the
    capture's devices (it exited 0)."""
    out = podscope("hlo", str(GEMM), "--by-execution", "--top", "9", cache=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    rule = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"})
    assert "execution" in " ".join(lines[:rule]).split()
    body = lines[rule + 1 :]
    rows = [line.split() for line in body[: next(i for i, x in enumerate(body) if not x.strip())]]
    assert len(rows) == 9 and len({(r[0], r[1]) for r in rows}) == 9  # execution, op
    assert {r[0] for r in rows} == {"0", "1", "2"}
    # the GEMMs XProf gives no FLOPs are costed, and the table says so
    assert "library GEMMs (__cublas$gemm) XProf shows no FLOPs for" in " ".join(out.stdout.split())
    peaks = podscope("roofline", str(GEMM), cache=tmp_path).stdout
    header = " ".join(peaks.split("─")[0].split())
    assert "GFLOP/s" in header and "GiB/s" in header and "gflop s" not in header.lower()
    bad = podscope("hlo", str(GEMM), "--device", "TPU:9", cache=tmp_path)
    said = " ".join(bad.stderr.split())
    assert bad.returncode == 2 and bad.stdout == ""
    assert "no device /device:TPU:9 in this capture; its devices: GPU:0, GPU:1" in said


def test_input_of_a_jax_capture_says_why_there_is_no_table(tmp_path: Path) -> None:
    """It printed a tf.data table of zeros for the TPU's JAX program."""
    out = podscope("input", str(TPU), cache=tmp_path)
    said = " ".join(out.stderr.split())
    assert out.returncode == 0 and out.stdout == "", out.stdout
    assert "no tf.data input pipeline: JAX feeds its programs from Python" in said
    csv = podscope("input", str(TPU), "--csv", cache=tmp_path)
    assert csv.returncode == 0 and len(csv.stdout.strip().splitlines()) == 1  # the header
    assert "worker" in csv.stdout


def test_collectives_the_text_counts_are_rows_of_the_csv(tmp_path: Path) -> None:
    """The TPU's 12 all-reduces ran in a jit__psum program before the loop: the text says
    so, and --calls --csv carries each of them with in_step (its CSV had no row)."""
    out = podscope("collectives", str(TPU), cache=tmp_path)
    said = " ".join(out.stderr.split())
    assert out.returncode == 0 and "12 collective calls (all-reduce)" in said, said
    assert "0 inside a step" in said and "--calls lists them" in said
    calls = pd.read_csv(
        io.StringIO(podscope("collectives", str(TPU), "--calls", "--csv", cache=tmp_path).stdout)
    )
    assert len(calls) == 12 and set(calls["kind"]) == {"all-reduce"}
    assert not calls["in_step"].any()
    assert set(calls["device"]) == {f"/device:TPU:{i}" for i in range(4)}


def test_collective_calls_inside_steps_say_so(tmp_path: Path) -> None:
    """The sampled PyTorch ranks' NCCL all-reduces run in their ProfilerSteps: every call is
    in_step, and as many as the per-worker summary counts."""
    ranks = SHARED_TRACES / "kineto" / "gpu_sampled_2of128"
    if not ranks.exists():
        pytest.skip("the sampled PyTorch ranks are absent")
    calls = pd.read_csv(
        io.StringIO(podscope("collectives", str(ranks), "--calls", "--csv", cache=tmp_path).stdout)
    )
    summary = pd.read_csv(
        io.StringIO(podscope("collectives", str(ranks), "--csv", cache=tmp_path).stdout)
    )
    assert len(calls) > 0 and calls["in_step"].all()
    assert calls.groupby("worker").size().sum() == len(calls)
    assert set(calls["worker"]) == set(summary["worker"])


def test_kernels_show_their_launch_geometry(tmp_path: Path) -> None:
    """``ops --by kernel --launch``: each kernel's registers, shared memory, grid and block,
    as the CSV's columns (the trace's kernel_details) say them."""
    csv = pd.read_csv(
        io.StringIO(podscope("ops", str(V100), "--by", "kernel", "--csv", cache=tmp_path).stdout)
    )
    top = csv.sort_values("self_time_us", ascending=False).iloc[0]
    out = podscope("ops", str(V100), "--by", "kernel", "--launch", "--top", "1", cache=tmp_path)
    assert out.returncode == 0, out.stderr
    said = dict(
        line.split(None, 1)
        for line in out.stdout.splitlines()
        if line.strip().split(None, 1)[:1] in (["regs"], ["shm"], ["grid"], ["block"])
        for line in [line.strip()]
    )
    assert said["regs"] == str(int(top["regs"])) and said["shm"] == str(int(top["shm"]))
    assert said["grid"] == f"{int(top['grid_x'])},{int(top['grid_y'])},{int(top['grid_z'])}"
    assert said["block"] == f"{int(top['block_x'])},{int(top['block_y'])},{int(top['block_z'])}"


@pytest.mark.skipif(not TPU.exists(), reason="the TPU sample is absent")
def test_by_execution_names_an_op_by_its_program_only_when_two_programs_share_it(
    tmp_path: Path,
) -> None:
    """Each op of the TPU's jit_f repeats once per execution, in one program: its rows read
    ``copy-done.4`` (they read ``jit_f(12190760917235803885)/copy-done.4``, cut to
    ``jit_f(121907609…y-done.4``)."""
    out = podscope("hlo", str(TPU), "--by-execution", "--top", "4", cache=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "copy-done" in out.stdout and "jit_f(" not in out.stdout
