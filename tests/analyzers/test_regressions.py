"""Kept captures that were once explained wrongly (``tests/fixtures/regressions``): each gets
the verdict its ``expected.json`` names — the top finding and the culprits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podscope.analyzers.attribution import straggler_verdict
from podscope.analyzers.diagnostics import diagnose
from podscope.analyzers.pod import anchored
from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers import load

CASES = sorted(
    p.parent
    for p in (Path(__file__).parents[1] / "fixtures" / "regressions").glob("*/expected.json")
)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_kept_capture_gets_its_verdict(case: Path, tmp_path: Path) -> None:
    expected = json.loads((case / "expected.json").read_text())
    a = SessionAnalysis(load(case, cache_dir=tmp_path))
    fired = [f for f in diagnose(a) if f.applies and f.severity != "none"]
    assert fired and fired[0].rule_id == expected["top"], [f.rule_id for f in fired]
    tasks = {
        w["label"]: f"{w['role']}:{w['index']}"
        for w in json.loads((case / "capture.json").read_text())["workers"]
    }
    named = sorted(tasks[w] for w in a.roles.loc[a.roles["role"] == "culprit", "worker"])
    assert named == expected["culprits"], a.roles
    # The library path from a pod view makes the same decision when told what SessionAnalysis
    # knows: whether collectives tie the steps.
    verdict = straggler_verdict(a.pod, synchronous=anchored(a.aligned) or None)
    assert sorted(tasks[w] for w in verdict.loc[verdict["straggler"], "worker"]) == named
