"""The façade: each derived frame computed once; rules declare what they need."""

from __future__ import annotations

import pandas as pd
import pytest

import podscope.analyzers.session as session_module
from podscope.analyzers.diagnostics import RULES, Severity, Thresholds, Verdict, diagnose, prepare
from podscope.analyzers.diagnostics.base import DEVICE, Need, Rule
from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers.xplane import parse_xplane
from tests.xspace_builder import SpaceBuilder


def _frames():
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "python")
    ops = p.line(2, "tf_Compute")
    for i in range(3):
        p.event(line, "train", i * 1000, 900, step_num=i, _r=1)
        p.event(ops, "dense/MatMul:MatMul", i * 1000 + 10, 500, tf_op="dense/MatMul:MatMul")
    return parse_xplane(b.bytes(), worker="w")


def test_each_derived_frame_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"find_steps": 0, "op_stats": 0}

    def counted(name: str):
        real = getattr(session_module, name)

        def wrapper(*a, **k):
            calls[name] += 1
            return real(*a, **k)

        return wrapper

    for name in calls:
        monkeypatch.setattr(session_module, name, counted(name))
    a = SessionAnalysis(_frames())
    assert len(a.breakdown) == 3 and len(a.pod) == 3 and len(a.stragglers) == 1
    a.step_rows(None), a.pod_summary, a.aligned, a.missing, a.methods
    pd.testing.assert_frame_equal(a.op_table, a.op_table_for("op", None))
    one = a.op_table_for("op", "w")
    pd.testing.assert_frame_equal(one, a.op_table_for("op", "w"))
    # one worker's table is the whole table's rows of that worker: no second op_stats
    assert calls == {"find_steps": 1, "op_stats": 1}
    pd.testing.assert_frame_equal(one, session_module.op_stats(a.frames.events, worker="w"))


def test_rule_requirements_write_the_not_applicable_finding() -> None:
    a = prepare(_frames())
    f = RULES["tensor_cores"](a, Thresholds())
    assert not f.applies and f.reason == DEVICE.reason and f.rule_id == "tensor_cores"
    assert f.title == "Tensor Cores unused by eligible ops"
    judged = []
    never = Need(lambda _: False, "needs something this trace lacks")
    r = Rule("x", "X", (never,), lambda a, t: judged.append(1) or Verdict(Severity.HIGH))
    assert r(a, Thresholds()).reason == "needs something this trace lacks" and not judged
    ok = Rule("y", "Y", (), lambda a, t: Verdict(Severity.HIGH, value=2.0))(a, Thresholds())
    assert (ok.rule_id, ok.title, ok.severity, ok.value) == ("y", "Y", "high", 2.0)


def test_findings_are_ranked_by_severity_enum() -> None:
    findings = diagnose(prepare(_frames()))
    assert all(isinstance(f.severity, Severity) for f in findings)
    ranks = [f.severity.rank for f in findings]
    assert ranks == sorted(ranks, reverse=True)
    with pytest.raises(KeyError, match="known"):
        diagnose(prepare(_frames()), only=["nope"])


FIXTURE = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "ps_baseline"


def test_a_path_is_analysed_as_from_path_does_and_a_missing_one_is_file_not_found(
    tmp_path,
) -> None:
    from podscope.trace_parsers import TraceParseError, load

    by_path = SessionAnalysis(str(FIXTURE))
    by_frames = SessionAnalysis(load(FIXTURE))
    pd.testing.assert_frame_equal(
        by_path.breakdown.sort_values(["worker", "step"]).reset_index(drop=True),
        by_frames.breakdown.sort_values(["worker", "step"]).reset_index(drop=True),
        check_like=True,
        check_categorical=False,
    )
    assert SessionAnalysis(FIXTURE).worker_names == by_frames.worker_names  # a Path too
    for call in (lambda: load(tmp_path / "gone.xplane.pb"), lambda: SessionAnalysis("gone")):
        with pytest.raises(FileNotFoundError, match="no such file or folder") as err:
            call()
        assert isinstance(err.value, TraceParseError)  # what the CLI and pages catch


def test_what_a_caller_does_to_a_returned_frame_changes_no_later_answer() -> None:
    a = SessionAnalysis(_frames())
    before = [(f.rule_id, f.severity) for f in a.findings]
    taken = a.breakdown
    columns, values = list(taken.columns), a.breakdown[a.breakdown.columns[-1]].tolist()
    del taken[columns[-1]]
    taken[columns[0]] = "changed"
    taken.columns = [f"x{i}" for i in range(len(taken.columns))]
    a.steps.pop("start_ns")
    a.findings.clear()
    assert list(a.breakdown.columns) == columns
    assert a.breakdown[columns[-1]].tolist() == values
    assert "changed" not in set(a.breakdown[columns[0]].astype(str))
    assert "start_ns" in a.steps.columns
    a.__dict__.pop("findings", None)  # computed again from the held frames
    assert [(f.rule_id, f.severity) for f in a.findings] == before
    table = a.op_table_for("op", None)
    for column in list(table.columns):
        del table[column]
    assert len(a.op_table_for("op", None).columns) > 0
