"""Workers named as their job names them (``worker:1``, ``ps:0``, ``rank 3``), from the
capture's ``capture.json``, with the address beside it: in findings, the CLI's tables, the
Pod Viewer, the Workers page and History. A kept capture of a 3-worker MWMS job whose
worker:1 slept 60 ms per step (``tests/fixtures/regressions``)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from podscope.analyzers.history import named, what_changed
from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers import layout

CASE = Path(__file__).parents[1] / "fixtures" / "regressions" / "straggler_judged_by_step_ends"
#: The worker that slept, as the capture recorded it (``capture.json``: role worker, index 1).
CULPRIT, ADDRESS = "127.0.0.1_57585", "127.0.0.1:57585"


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory) -> SessionAnalysis:
    cache = tmp_path_factory.mktemp("cache")
    return SessionAnalysis.from_path(CASE, cache_dir=str(cache))


def test_task_names_as_jobs_write_them() -> None:
    assert layout.task_name("worker", 1) == "worker:1"
    assert layout.task_name("ps", 0) == "ps:0"
    assert layout.task_name("rank", 3) == "rank 3"
    assert layout.task_name("process", 2) == "process 2"
    # no role, a negative or missing index, a role no job writes: no name (the label stays)
    for role, index in (("", 0), ("worker", -1), ("worker", None), ("Worker <b>", 1)):
        assert layout.task_name(role, index) == ""


def test_a_manifest_whose_tasks_collide_names_none(tmp_path: Path) -> None:
    one = {"status": "ok", "role": "worker", "index": 0}
    layout.write_manifest(tmp_path, "s", 1, {}, [{"label": "a_1", **one}, {"label": "b_2", **one}])
    assert layout.tasks_of([tmp_path]) == {}  # two worker:0s: naming either would mislead
    layout.write_manifest(
        tmp_path,
        "s",
        1,
        {},
        [{"label": "a_1", **one, "address": "a:1"}, {"label": "b_2", "status": "ok"}],
    )
    assert layout.tasks_of([tmp_path]) == {"a_1": ("worker:0", "a:1")}
    (tmp_path / layout.MANIFEST_NAME).write_text("{not json")
    assert layout.tasks_of([tmp_path]) == {}  # unreadable: nothing named, nothing raised


def test_the_analysis_names_every_worker_by_its_task(analysis: SessionAnalysis) -> None:
    assert analysis.tasks == {
        "127.0.0.1_59681": ("worker:0", "127.0.0.1:59681"),
        CULPRIT: ("worker:1", ADDRESS),
        "127.0.0.1_51221": ("worker:2", "127.0.0.1:51221"),
    }
    assert analysis.named(CULPRIT) == f"worker:1 ({ADDRESS})"
    assert analysis.named("elsewhere") == "elsewhere"
    table = analysis.with_task(analysis.roles)
    assert list(table.columns[:2]) == ["task", "worker"]
    assert table.set_index("worker").loc[CULPRIT, "task"] == "worker:1"


def test_findings_name_the_culprit_by_its_task(analysis: SessionAnalysis) -> None:
    found = {f.rule_id: f for f in analysis.findings}
    assert found["straggler"].title == f"Straggler: worker:1 ({ADDRESS}) holds the others back"
    assert found["straggler"].evidence["tasks"] == {CULPRIT: "worker:1"}
    cause = found["straggler_cause"]
    assert cause.recommendation.startswith(f"worker:1 ({ADDRESS}) is the culprit")
    assert cause.evidence["culprit"] == CULPRIT and cause.evidence["task"] == "worker:1"


def test_an_upload_keeps_its_labels(tmp_path: Path) -> None:
    """Without a manifest (an upload, a copied run) nothing is named: no column of blanks."""
    for f in CASE.glob("*.xplane.pb.gz"):
        shutil.copy(f, tmp_path)
    a = SessionAnalysis.from_path(tmp_path, cache_dir=str(tmp_path / "cache"))
    assert a.tasks == {} and "task" not in a.with_task(a.roles)
    assert a.named(CULPRIT) == CULPRIT


def test_stragglers_cli_shows_the_task_before_the_address(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from podscope.app.cli import cli

    env = {"PODSCOPE_CACHE_DIR": str(tmp_path), "COLUMNS": "100"}
    out = CliRunner().invoke(cli, ["stragglers", "--csv", str(CASE)], env=env)
    assert out.exit_code == 0, out.output
    table = pd.read_csv(io.StringIO(out.stdout))
    assert list(table.columns[:2]) == ["task", "worker"]
    culprit = table[table["role"] == "culprit"]
    assert culprit[["task", "worker"]].values.tolist() == [["worker:1", CULPRIT]]
    shown = CliRunner().invoke(cli, ["stragglers", str(CASE)], env=env)
    line = next(ln for ln in shown.stdout.splitlines() if "culprit" in ln and CULPRIT in ln)
    assert line.split()[:2] == ["worker:1", CULPRIT]


def test_pod_viewer_names_the_straggler_by_its_task(analysis: SessionAnalysis) -> None:
    """What the Pod Viewer draws (its badges and heat map; the page in test_browser)."""
    from podscope.app.figures.pod import step_heatmap_figure, straggler_evidence

    badges, _ = straggler_evidence(analysis.shown(analysis.stragglers))
    assert badges[0].startswith(f"straggler: worker:1 ({ADDRESS}) (arrives")
    rows = step_heatmap_figure(analysis.shown(analysis.lateness)).data[0].y
    assert sorted(rows) == [
        "worker:0 (127.0.0.1:59681)",
        f"worker:1 ({ADDRESS})",
        "worker:2 (127.0.0.1:51221)",
    ]


def test_history_follows_a_task_across_a_restart(analysis: SessionAnalysis) -> None:
    """A restarted job's workers listen on new ports: worker:1 late again is the same
    straggler, not a new one; a different task late is."""
    from podscope.analyzers.history import checked_summary, summarize

    before = checked_summary(json.loads(json.dumps(summarize(analysis, "s1"))))
    assert before is not None and before["culprits"] == [CULPRIT]
    assert before["tasks"][CULPRIT] == "worker:1"
    # as the pages and findings name it (its address, not its file label)
    assert named(before, CULPRIT) == f"worker:1 ({ADDRESS})" == analysis.named(CULPRIT)
    assert named({**before, "addresses": {}}, CULPRIT) == f"worker:1 ({CULPRIT})"  # older
    moved = {
        **before,
        "session": "s2",
        "culprits": ["127.0.0.1_6001"],
        "causes": {"127.0.0.1_6001": "host_compute"},
        "tasks": {"127.0.0.1_6001": "worker:1", "127.0.0.1_6002": "worker:2"},
    }
    assert [c.kind for c in what_changed(before, moved)] == []
    other = {**moved, "tasks": {"127.0.0.1_6001": "worker:2"}}
    titles = [c.title for c in what_changed(before, other)]
    assert "New straggler worker:2 (127.0.0.1_6001): host_compute" in titles
    assert f"worker:1 ({ADDRESS}) is no longer a straggler" in titles
