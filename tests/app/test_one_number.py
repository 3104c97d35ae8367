"""One number everywhere: each number a user may act on — the mean step, the step count, the
tasks, which devices are busy, a worker's lateness — read from the Pod Viewer as it renders and
from every command that shows it, on the shared samples and kept engine captures, is the same
number, and every breakdown row sums to its step."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from podscope.analyzers.pod import CATEGORY_NAMES
from podscope.app.cli import cli
from podscope.app.main import create_app
from podscope.app.settings import AppSettings
from podscope.app.units import fmt_duration
from tests.conftest import SHARED_TRACES

FIXTURES = Path(__file__).parents[1] / "fixtures"
XPLANE = SHARED_TRACES / "xplane"
SESSIONS = {  # name: where its files are
    "v100": XPLANE / "gpu_tf_multiworker_v100",
    "tpu": XPLANE / "tpu_xprof",
    # (the gemm sample is a benchmark sweep: no steps)
    "rocm_attention": XPLANE
    / "rocm_jax_tracelens"
    / "traces__mi300__jax08_attention__tw003.xplane.pb",
    "ps": FIXTURES / "ps_baseline",
    "straggler": FIXTURES / "regressions" / "straggler_python_traced",
}


def cli_out(*args: str, cache: Path) -> str:
    result = CliRunner().invoke(cli, list(args), env={"PODSCOPE_CACHE_DIR": str(cache)})
    assert result.exit_code == 0, result.output
    return result.stdout


def components(tree: Any) -> list[Any]:
    """Every Dash component under ``tree``, depth first."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (list, tuple)):
            todo.extend(node)
        elif hasattr(node, "to_plotly_json"):
            out.append(node)
            todo.append(getattr(node, "children", None))
    return out


def text_of(component: Any) -> str:
    return " ".join(
        str(c) for c in re.findall(r"'children': '([^']*)'", str(component.to_plotly_json()))
    ) + "".join(
        str(getattr(c, "children", ""))
        for c in components(component)
        if isinstance(getattr(c, "children", None), str)
    )


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("one_number")
    for name, src in SESSIONS.items():
        if not src.exists():
            continue
        dst = root / "plugins" / "profile" / name
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            dst.mkdir(parents=True)
            shutil.copy(src, dst / src.name)
    return root


@pytest.mark.parametrize("name", list(SESSIONS))
def test_each_number_is_the_same_on_the_page_and_in_every_command(
    name: str, logdir: Path, tmp_path: Path
) -> None:
    if not SESSIONS[name].exists():
        pytest.skip(f"sample not present: {SESSIONS[name]}")
    path = logdir / "plugins" / "profile" / name
    cache = tmp_path / "cache"
    app = create_app(AppSettings(logdir=logdir, cache_dir=cache))
    with app.server.test_request_context("/pod"):
        page = sys.modules["pages.pod_viewer"].layout(session=name)
    parts = {c.id: c for c in components(page) if getattr(c, "id", None)}
    header = text_of(parts["pod-badges"])
    m = re.search(r"· (.+?) · (\d+) steps? · mean step ([\d.]+ [µm]?s)( \((.+?)\))?", header)
    assert m, header
    tasks, n_steps, mean_step, definition = m.group(1), int(m.group(2)), m.group(3), m.group(5)

    # the steps command: rows sum to their step; its steps and mean step are the header's
    steps = pd.read_csv(io.StringIO(cli_out("steps", str(path), "--csv", cache=cache)))
    known = steps[steps["host_compute_us"].notna()]
    cats = known[[f"{c}_us" for c in CATEGORY_NAMES]].sum(axis=1)
    assert (cats - known["step_time_us"]).abs().max() < 0.01, known
    assert steps.groupby("worker")["step"].nunique().eq(n_steps).all()
    slowest = known if len(known) else steps
    per_step = slowest.groupby(["worker", "step"])["step_time_us"].max()
    assert fmt_duration(per_step.mean() * 1000) == mean_step, header
    several = steps.groupby("worker")["device"].nunique().max() > 1
    assert (definition or "").startswith("each step's slowest device") == several, header
    if several:  # and each device's own mean, in the table below, is another number: said so
        own = steps.groupby(["worker", "device"])["step_time_us"].mean()
        assert own.max() * 1000 < per_step.mean() * 1000 + 1

    # the tasks: the header's, and the notes name each parameter server and coordinator
    notes = text_of(parts["pod-notes"])
    expected = {"ps": "2 workers · 1 parameter server · 1 coordinator"}.get(name)
    if expected:
        assert tasks == expected
        assert "parameter server: it holds variables" in notes and "coordinator:" in notes
        assert "no XLA program executed twice" not in notes
    else:
        assert "parameter server" not in tasks
    if n_steps > 1 and name in ("tpu", "ps", "straggler"):
        assert "left out as partial" in notes

    # busy devices: one rule on the page and in the devices finding
    findings = json.loads(cli_out("diagnose", str(path), "--json", cache=cache))
    by_rule = {f["rule_id"]: f for f in findings}
    if "devices" in parts:
        busy = int(re.search(r"(\d+) busy:", text_of(parts["devices"])).group(1))  # type: ignore[union-attr]
        assert by_rule["cpu_only"]["title"].split(": ")[1].startswith(f"{busy} busy"), by_rule[
            "cpu_only"
        ]["title"]
    if name == "v100":  # GPU:1 ran 19 events outside the one step: idle in the steps
        assert "GPU:1 (19 events" in text_of(parts["devices"])

    # lateness: the heat map's row mean is the badge's "late per step" and the command's
    heat = parts["pod-heatmap"]
    if name == "straggler":
        fig = heat.figure
        row = dict(zip(fig.data[0].y, fig.data[0].z, strict=True))
        # named by its task (capture.json), its address beside it
        badge = re.search(r"straggler: ((\S+) \(\S+\)) \(arrives (.+?) late per step", header)
        assert badge, header
        shown, task, late = badge.groups()
        assert fmt_duration(pd.Series(row[shown]).mean() * 1e6) == late
        table = pd.read_csv(io.StringIO(cli_out("stragglers", str(path), "--csv", cache=cache)))
        worker, cli_late = table.set_index("task").loc[task, ["worker", "late_ms"]]
        assert fmt_duration(cli_late * 1e6) == late
        assert by_rule["straggler"]["evidence"]["late_ms_by_worker"][worker] == pytest.approx(
            cli_late, abs=0.001
        )
