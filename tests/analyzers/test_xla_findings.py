"""Findings on XLA devices hold on the public captures and speak their terms.

* Every rule that fires on a shared ROCm or TPU sample is checked against a number read from
  the raw trace or from XProf on the same file.
* No finding of a TPU, JAX or Android capture names another framework's or vendor's feature
  (``analyzers.diagnostics.speech.FOREIGN_WORDS``); rules that do not apply say why in the
  capture's own terms.
* The engine's JAX workload in bfloat16 and float32 gets the matching precision verdict, and
  its host-offload variant no offload finding: XLA:CPU accepts the memory kinds but moves
  nothing (its program has no copy to or from memory space 5). (XLA:CPU also converts bf16
  matmul operands to f32 for its dot: the verdict counts what the program computes in, op by
  op.)
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from podscope.analyzers.diagnostics.speech import FOREIGN_WORDS, audience
from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers import load
from tests.analyzers.test_xprof_samples import table, xprof
from tests.conftest import SHARED_TRACES, real_xplanes

pytestmark = pytest.mark.slow
XLA = [p for p in real_xplanes() if "v100" not in str(p)]
ANDROID = (
    sorted(
        p
        for p in (SHARED_TRACES / "android").rglob("*")
        if p.is_file() and p.suffix not in (".md",)
    )
    if (SHARED_TRACES / "android").exists()
    else []
)


def ids(p: Any) -> str:
    return p.name[-40:] if isinstance(p, Path) else "absent"


def analysis_of(path: Path, tmp_path: Path) -> SessionAnalysis:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(path, run / path.name)
    return SessionAnalysis(load(run / path.name, cache=False))


@pytest.mark.parametrize("path", XLA + ANDROID or [None], ids=ids)
def test_findings_speak_the_captures_own_terms(path: Path | None, tmp_path: Path) -> None:
    if path is None:
        pytest.skip("../shared/traces absent")
    try:
        a = analysis_of(path, tmp_path)
    except Exception as e:  # an Android sample the parsers refuse is another test's subject
        pytest.skip(f"not parsed: {e}")
    kind = audience(a)
    assert kind in FOREIGN_WORDS, kind  # the samples are TPU, JAX and Android captures
    for f in a.findings:
        for text in (f.title, f.reason, f.recommendation):
            said = [w for w in FOREIGN_WORDS[kind] if w in text]
            assert not said, f"{f.rule_id} on a {kind} capture says {said}: {text}"
        # its guide link is its framework's (they all led to TensorFlow's GPU guide)
        assert not (f.applies and "tensorflow.org" in f.doc), (f.rule_id, f.doc)


def _union_ns(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> int:
    """Nanoseconds in [lo, hi) covered by any of the intervals."""
    s, e = np.clip(start, lo, hi), np.clip(end, lo, hi)
    order = np.argsort(s)
    covered, reach = 0, lo
    for a, b in zip(s[order], e[order], strict=True):
        if b > reach:
            covered += b - max(a, reach)
            reach = b
    return int(covered)


@pytest.mark.parametrize("path", XLA or [None], ids=ids)
def test_every_rule_that_fires_on_an_xla_sample_is_true(path: Path | None, tmp_path: Path) -> None:
    if path is None:
        pytest.skip("../shared/traces/xplane absent")
    a = analysis_of(path, tmp_path)
    fired = [f for f in a.findings if f.applies and f.severity != "none"]
    assert fired
    theirs = None
    for f in fired:
        if f.rule_id == "no_step_markers":
            # the raw trace has no step marker: no event carries a step number
            assert a.frames.events["step_num"].isna().all()
        elif f.rule_id == "device_idle":
            # the devices' busy time in the steps, from the raw kernel intervals
            b = a.split
            ev = a.frames.events
            for (_, device), rows in b.groupby(["worker", "device"]):
                mine = ev[(ev["plane"] == device) & ev["line"].astype(str).str.startswith("Stream")]
                start = mine["start_ns"].to_numpy()
                end = start + mine["dur_ps"].to_numpy() // 1000
                busy = sum(
                    _union_ns(start, end, int(r.start_ns), int(r.start_ns + r.step_time_ns))
                    for r in rows.itertuples()
                )
                idle = 1 - busy / rows["step_time_ns"].sum()
                ours = rows["device_idle_ns"].sum() / rows["step_time_ns"].sum()
                assert ours == pytest.approx(idle, abs=0.02), device
            assert f.value == pytest.approx(
                b["device_idle_ns"].sum() / b["step_time_ns"].sum(), abs=1e-9
            )
        elif f.rule_id == "host_offload":
            theirs = (
                theirs
                if theirs is not None
                else table(xprof(tmp_path / "run" / path.name, "hlo_stats"))
            )
            body = theirs[theirs["program_id"] == theirs["program_id"].iloc[0]]
            copies = body[body["hlo_op_expression"].str.contains(r"copy-(?:start|done).*S\(5\)")]
            share = copies["total_self_time"].sum() / body["total_self_time"].sum()
            assert f.value == pytest.approx(share, abs=0.02)
        elif f.rule_id == "mixed_precision":
            theirs = (
                theirs
                if theirs is not None
                else table(xprof(tmp_path / "run" / path.name, "hlo_stats"))
            )
            compute = theirs[theirs["category"].str.contains("fusion|elementwise|convolution|dot")]
            half = compute["hlo_op_expression"].str.contains(r"\b(?:bf16|f16)\[")
            assert f.value == pytest.approx(
                compute.loc[half, "total_self_time"].sum() / compute["total_self_time"].sum(),
                abs=0.02,
            )
        else:
            pytest.fail(
                f"{f.rule_id} fires on {path.name} with no check against the raw trace or XProf"
            )


@pytest.mark.cluster
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
@pytest.mark.parametrize(
    ("variant", "half"),
    [({"dtype": "bf16"}, True), ({"dtype": "f32"}, False), ({"offload": True}, False)],
)
def test_engine_precision_and_offload_verdicts(
    variant: dict[str, Any], half: bool, tmp_path: Path
) -> None:
    from podscope.app.cli_cluster import capture_jax
    from podscope.reference_engine.jax_workload import JaxConfig

    session = capture_jax(JaxConfig(workers=1, steps=4, **variant), tmp_path / "run", tmp_path)
    a = SessionAnalysis(load(session / "jax-worker-0.xplane.pb", cache=False))
    findings = {f.rule_id: f for f in a.findings}
    precision = findings["mixed_precision"]
    assert precision.applies and (precision.value >= 0.1) == half, precision
    # the step's ops read and write bf16 in the bf16 run, never in the others (XLA:CPU runs
    # the matmuls themselves in f32 either way: it converts bf16 operands for its dot)
    types = set(a.hlo_table()["compute_dtype"])
    assert ("bf16" in types) == half, types
    offload = findings["host_offload"]
    assert not offload.applies and "no XLA copy between host memory" in offload.reason


def test_the_findings_that_misled_on_the_tpu_sample(tmp_path: Path) -> None:
    """Its program adds and broadcasts (no matmul, no convolution): "Mixed precision off" was
    MODERATE; its 2,400 copies are host offload (HIGH): "Host↔device copies every step" said
    ok beside it; "Step markers missing" showed a bare 1."""
    from podscope.app.units import fmt_value

    tpu = next((p for p in XLA if p.name == "tpu_inference_2.xplane.pb"), None)
    if tpu is None:
        pytest.skip("the TPU sample is absent")
    by = {f.rule_id: f for f in analysis_of(tpu, tmp_path).findings}
    precision = by["mixed_precision"]
    assert not precision.applies and "no matmul or convolution" in precision.reason
    assert "broadcast_add_fusion" in precision.reason  # its largest ops, named
    assert by["host_offload"].severity == "high"
    assert not by["host_device_copies"].applies
    assert "host-offload finding" in by["host_device_copies"].reason
    markers = by["no_step_markers"]
    assert fmt_value(markers.value, markers.unit) == "1 worker"
