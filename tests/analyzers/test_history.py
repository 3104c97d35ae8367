"""History summaries and "what changed" between consecutive captures, and the index."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from podscope.analyzers.history import (
    SUMMARY_VERSION,
    named,
    summarize,
    what_changed,
    with_changes,
)
from podscope.analyzers.session import SessionAnalysis
from podscope.app.history import SLACK, HistoryIndex
from podscope.trace_parsers import layout, load

FIXTURES = Path(__file__).parents[1] / "fixtures"
STRAGGLER = FIXTURES / "regressions" / "straggler_judged_by_step_ends"


def entry(session: str, t: float, **kw: object) -> dict:
    base = {
        "version": SUMMARY_VERSION,
        "session": session,
        "start_unix_s": t,
        "culprits": [],
        "causes": {},
        "metrics": {"step_time (p50)": 100.0, "host_compute": 60.0, "input": 5.0},
        "ops": {"MatMul|dense/MatMul": 30_000.0, "Relu|relu": 2_000.0},
        "per": "step",
        "top": None,
    }
    return {**base, **kw}


def test_summary_of_a_real_straggler_capture() -> None:
    manifest = layout.read_manifest(STRAGGLER)
    e = summarize(
        SessionAnalysis(load(STRAGGLER, cache=False)),
        "s1",
        statuses={w.label: w.status for w in manifest.workers},
    )
    tasks = {w.label: f"{w.role}:{w.index}" for w in manifest.workers}
    assert [tasks[w] for w in e["culprits"]] == ["worker:1"]  # expected.json's verdict
    assert e["causes"][e["culprits"][0]]  # with its cause
    assert e["top"]["rule_id"] == "straggler" and e["reason"] == "manual"
    assert e["metrics"]["step_time (p50)"] > 0 and len(e["step_ms"]) == 3
    assert set(e["statuses"]) == set(e["step_ms"])
    assert e["ops"] and all(v is None or v >= 0 for v in e["ops"].values())
    json.dumps(e)  # one line of the index


def test_what_changed_names_the_culprit_then_the_growth() -> None:
    before = entry("a", 1.0)
    after = entry(
        "b",
        2.0,
        culprits=["w2"],
        causes={"w2": "host_compute"},
        metrics={"step_time (p50)": 160.0, "host_compute": 115.0, "input": 6.0},
        ops={"MatMul|dense/MatMul": 85_000.0, "Relu|relu": 2_100.0},
        top={"rule_id": "straggler", "title": "Straggler: w2 holds the others back"},
    )
    changes = what_changed(before, after)
    assert [c.kind for c in changes] == ["culprit", "step_time", "category", "op", "finding"]
    assert changes[0].title == "New straggler w2: host_compute"
    assert "rose 60%" in changes[1].title and changes[1].delta_ms == pytest.approx(60)
    assert changes[2].title.startswith("host compute grew 55.0 ms")
    assert "dense/MatMul grew 55.00 ms" in changes[3].title
    # Back to normal: the recovery is said, as an improvement.
    back = what_changed(after, entry("c", 3.0))
    assert {c.kind: c.severity for c in back}["recovered"] == "none"
    assert {c.kind: c.severity for c in back}["step_time"] == "none"
    # Noise is not a change.
    same = entry("d", 4.0, metrics={"step_time (p50)": 104.0, "host_compute": 61.0, "input": 5.2})
    assert what_changed(before, same) == []


def test_index_keeps_the_last_line_per_session_and_skips_broken_ones(tmp_path: Path) -> None:
    index = HistoryIndex(tmp_path)
    index.add(entry("b", 2.0))
    index.add(entry("a", 1.0))
    index.add(entry("b", 2.0, culprits=["w1"]))
    index.add({**entry("c", 3.0), "version": 1})  # an older format: analysed again, not read
    with index.path.open("a") as f:
        f.write(f'{{"version": {SUMMARY_VERSION}, "session": "cut sh')  # a crash mid-line
    got = index.entries()
    assert [e["session"] for e in got] == ["a", "b"] and got[1]["culprits"] == ["w1"]
    assert [e["session"] for e in index.entries(["b"])] == ["b"]
    pairs = with_changes(got)
    assert pairs[0][1] == [] and pairs[1][1][0].kind == "culprit"
    # Retention deleted "a": its line and the redone ones go once enough are stale.
    for i in range(SLACK):
        index.add(entry("b", 2.0, culprits=[f"w{i}"]))
    assert index.compact(["b"]) == SLACK + 4  # "a", the older "b" lines, "c"'s and the cut one
    assert index.path.read_text().count("\n") == 1
    assert [e["culprits"] for e in index.entries()] == [[f"w{SLACK - 1}"]]
    assert index.compact(["b"]) == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"start_unix_s": 10**30},  # no capture starts then (it broke /history for good)
        {"start_unix_s": "yesterday"},
        {"start_unix_s": float("nan")},
        {"culprits": "w1"},
        {"metrics": {"step_time (p50)": "slow"}},
        {"ops": [1, 2]},
        {"top": "straggler"},
        {"window": [1]},
        {"session": None},
    ],
    ids=lambda b: ",".join(b),
)
def test_one_bad_index_line_is_left_out_and_the_rest_read(tmp_path: Path, bad: dict) -> None:
    index = HistoryIndex(tmp_path)
    index.add(entry("a", 1.0))
    index.add({**entry("b", 2.0), **bad})
    index.add(entry("c", 3.0))
    assert [e["session"] for e in index.entries()] == ["a", "c"]


def test_a_hostile_index_is_read_within_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Millions of lines, or one line of hundreds of MB: the reader parses only the newest
    lines of the newest bytes, and no line past the longest a summary can be."""
    import podscope.app.history as history

    monkeypatch.setattr(history, "MAX_LINES", 1000)
    monkeypatch.setattr(history, "MAX_LINE_BYTES", 4096)
    index = HistoryIndex(tmp_path)
    index.add(entry("early", 1.0))
    with index.path.open("a") as f:
        f.write(json.dumps(entry("huge", 2.0, label="x" * 100_000)) + "\n")  # over the line cap
        f.write("[" * 100_000 + "\n")  # nested past the parser's depth
        for i in range(5000):
            f.write(json.dumps(entry(f"s{i}", 10.0 + i)) + "\n")
    got = [e["session"] for e in index.entries()]
    assert got == [f"s{i}" for i in range(4000, 5000)]  # the newest thousand lines only
    big = tmp_path / "big"
    monkeypatch.setattr(history, "MAX_INDEX_BYTES", 1 << 20)
    one_line = HistoryIndex(big)
    one_line.path.parent.mkdir(parents=True)
    one_line.path.write_bytes(b'{"version": 2, "label": "' + b"y" * (8 << 20) + b'"}\n')
    one_line.add(entry("after", 5.0))
    assert [e["session"] for e in one_line.entries()] == ["after"]


WATCHED = FIXTURES / "watched_straggler"


def test_a_real_watched_run_reads_as_its_ground_truth(tmp_path: Path) -> None:
    """The committed watched engine run: the capture before the onset names no one, the
    triggered one names worker:2 with its trigger window over the onset, and what changed
    starts with the new straggler."""
    from podscope.app.history import Historian

    expected = json.loads((WATCHED / "expected.json").read_text())
    logdir = tmp_path / "logdir"
    shutil.copytree(WATCHED, logdir)
    historian = Historian(logdir, cache_dir=tmp_path / "cache")
    for session in expected["sessions"]:
        assert historian.summarize_now(session) is not None
    entries = historian.index.entries()
    assert [e["session"] for e in entries] == list(expected["sessions"])
    for e in entries:
        want = expected["sessions"][e["session"]]
        assert e["reason"] == want["reason"] and e["culprits"] == want["culprits"]
        assert e["start_unix_s"] > 1.7e9  # dated by the capture, not the trace's own clock
    triggered = entries[1]
    assert triggered["top"]["rule_id"] == "straggler"
    assert triggered["window"][0] <= expected["onset_ns"] <= triggered["window"][1]
    changes = what_changed(entries[0], triggered)
    assert (
        changes[0].kind == "culprit" and named(triggered, expected["culprit"]) in changes[0].title
    )
    # each step's heartbeat before the trigger: the onset at one step, not a minute's ramp
    beats = triggered["beats"][expected["culprit"]]
    assert len(beats) == 120
    onset_s = expected["onset_ns"] / 1e9
    before = [ms for t, ms in beats if t < onset_s - 0.5]
    after = [ms for t, ms in beats if t > onset_s + 0.5]
    assert before and after and max(before) < 20 < 50 < min(after), (before[-3:], after[:3])
    from podscope.app.figures.history import history_figure

    fig = history_figure(entries, pd.DataFrame(), {})
    steps = [t for t in fig.data if t.name and "each step before" in t.name]
    assert len(steps) == 3 + 3  # every worker of both watched captures
    culprit = next(t for t in steps if t.showlegend)
    assert culprit.line.color == "#dc3545" and len(culprit.y) == 120
    assert changes[1].kind == "step_time" and changes[1].delta_ms > 40


def test_sessions_without_a_capture_start_sit_at_their_traces_time(tmp_path: Path) -> None:
    """Uploads and copied runs have no manifest and no XProf name: each is dated by its
    trace's own wall clock (an XPlane's Unix ns), not by its folder's mtime, which a logdir
    copied at once gives every session alike (four sat within 8 ms). A trace whose clock is
    not wall time falls back to the mtime."""
    import os

    from podscope.app.history import Historian
    from tests.xspace_builder import SpaceBuilder

    def trace(start_ns: int | None) -> bytes:
        b = SpaceBuilder()
        host = b.plane("/host:CPU")
        line = host.line(1, "python")
        for i in range(4):
            host.event(line, "train", i * 1_000_000, 900_000, step_num=i)
        if start_ns is not None:
            b.plane("Task Environment", profile_start_time=start_ns)
        return b.bytes()

    logdir = tmp_path / "logdir"
    starts = {"upload_a": 1_780_000_000 * 10**9, "upload_b": 1_790_000_000 * 10**9, "copy": None}
    for name, start in starts.items():
        folder = layout.session_dir(logdir, name)
        folder.mkdir(parents=True)
        (folder / "w.xplane.pb").write_bytes(trace(start))
        os.utime(folder, ns=(1_700_000_000 * 10**9, 1_700_000_000 * 10**9))  # copied at once
    historian = Historian(logdir, cache_dir=tmp_path / "cache")
    dated = {name: historian.summarize_now(name)["start_unix_s"] for name in starts}  # type: ignore[index]
    assert dated == {"upload_a": 1.78e9, "upload_b": 1.79e9, "copy": 1.7e9}
