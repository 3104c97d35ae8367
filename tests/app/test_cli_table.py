"""CLI tables fit an 80-column terminal: whole, with stacked number headers, abbreviated
worker labels and a legend, a cut name column, or one block per row; ``--wide`` keeps every
row on one line."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from podscope.app.cli_table import show_table

WORKERS = ["10.128.15.201_2222", "10.128.15.202_2222", "10.128.15.203_2222"]


def _printed(frame: pd.DataFrame, width: int = 80, **kw: object) -> list[str]:
    buf = io.StringIO()
    show_table(frame, "title", console=Console(width=width, file=buf), **kw)  # type: ignore[arg-type]
    return [line.rstrip() for line in buf.getvalue().splitlines()]


def _roles() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "worker": WORKERS,
            "steps": [30, 30, 30],
            "late_steps": [0, 0, 27],
            "mean_wait_ms": [4.1234567, 4.0, 0.0],
            "wait_share": [0.31, 0.3, 0.0],
            "own_delay_ms": [0.0, 0.0, 3.9],
            "role": ["victim", "victim", "culprit"],
        }
    )


def test_long_worker_labels_are_abbreviated_with_a_legend() -> None:
    frame = _roles().assign(input_ms=[1234.5, 1.0, 2.0], transfer_ms=[2345.25, 1.0, 2.0])
    assert max(map(len, _printed(frame, width=200))) > 80  # too wide as it is
    lines = _printed(frame)
    assert max(map(len, lines)) <= 80, lines
    assert "  w3 = 10.128.15.203_2222" in lines  # the legend names each worker
    row = next(line for line in lines if line.lstrip().startswith("w3"))
    assert "27" in row and "culprit" in row and "0.0%" in row  # one line per worker
    assert "4.123" in "\n".join(lines) and "4.1234567" not in "\n".join(lines)


def test_wide_keeps_every_column_and_name_on_one_line() -> None:
    lines = _printed(_roles(), wide=True)
    row = next(line for line in lines if "10.128.15.203_2222" in line)
    assert "culprit" in row and "late steps" in "\n".join(lines)
    assert not any(" = 10.128" in line for line in lines)  # no legend: nothing abbreviated


def test_a_table_too_wide_for_any_form_becomes_one_block_per_row() -> None:
    frame = _roles().assign(**{f"extra_text_column_{i}": ["some words here"] * 3 for i in range(4)})
    lines = _printed(frame)
    assert max(map(len, lines)) <= 80, lines
    assert "── worker 10.128.15.203_2222" in lines  # the full label, as the block's heading
    assert any(line.split() == ["role", "culprit"] for line in lines)


def test_a_long_op_name_is_cut_to_what_fits() -> None:
    frame = pd.DataFrame(
        {
            "worker": WORKERS,
            "device": ["GPU:0"] * 3,
            "op_name": ["replica_4/bert_span_labeler/bert_encoder_1/transformer/layer_11/" * 2] * 3,
            "calls": [1, 2, 3],
            "self_us": [12_345.678, 1.0, 2.0],
        }
    )
    lines = _printed(frame, cut="op_name")
    assert max(map(len, lines)) <= 80 and any("…" in line for line in lines)
    assert any(line.lstrip().startswith("w1") for line in lines)


def test_podscope_stragglers_fits_80_columns(tmp_path: Path) -> None:
    """The command as a person runs it, on a session whose worker labels are long."""
    from tests.analyzers.test_breakdown import worker_trace

    run = tmp_path / "plugins" / "profile" / "s1"
    run.mkdir(parents=True)
    for w, late in zip(WORKERS, (50, 50, 400), strict=True):
        (run / f"{w}.xplane.pb").write_bytes(worker_trace(w, 12, input_us=late))
    for command in (["stragglers"], ["input"], ["steps"], ["ops"], ["ops", "--by", "type"]):
        out = subprocess.run(
            [sys.executable, "-m", "podscope", *command, str(tmp_path), "--no-cache"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "80"},
            check=True,
        ).stdout
        table = [line for line in out.splitlines() if "bottleneck " not in line]
        assert max(map(len, table)) <= 80, (command, out)
        assert "10.128.15.203_2222" in out, (command, out)  # in the legend or a heading


def test_names_alike_up_to_their_ends_stay_distinct_when_cut() -> None:
    names = [f"RemoteCall____inference_train_function_{n}" for n in (2212, 2405, 2598, 2791)]
    frame = pd.DataFrame(
        {
            "worker": WORKERS[:1] * 4,
            "op_name": names,
            "calls": [1, 2, 3, 4],
            "self_time_us": [12_345.678, 1.0, 2.0, -0.0001],
            "self_share": [0.5, 0.2, 0.1, -0.00001],
        }
    )
    lines = _printed(frame, width=50, cut="op_name")
    assert max(map(len, lines)) <= 50, lines
    rows = [line for line in lines if "RemoteCall__" in line]
    assert len(rows) == 4 and len({r.split()[0] for r in rows}) == 4, rows  # four names, not one
    assert all("…" in r for r in rows) and any(r.split()[0].endswith("2598") for r in rows)
    # one worker: named in the title, no w1 column or legend
    assert lines[0].startswith("title · worker 10.128.15.201_2222"), lines
    assert not any("w1" in line for line in lines)
    text = "\n".join(lines)
    assert "-0.000" not in text and "-0.0%" not in text and "0.000" in text


def test_names_alike_but_in_their_middle_keep_where_they_differ() -> None:
    """The V100 sample's dropout ops of 24 BERT layers differ only in ``layer_N``: cut to
    the head and tail they were four identical ``r…t/random_uniform/RandomUniform`` rows."""
    names = [
        f"replica_4/bert_span_labeler/bert_encoder_1/transformer/layer_{n}/self_attention/"
        "dropout_3/dropout/random_uniform/RandomUniform"
        for n in (1, 10, 12, 22)
    ]
    frame = pd.DataFrame({"worker": WORKERS[:1] * 4, "op_name": names, "calls": [1, 2, 3, 4]})
    lines = _printed(frame, width=50, cut="op_name")
    rows = [line.split()[0] for line in lines if "…" in line]
    assert max(map(len, lines)) <= 50, lines
    assert len(rows) == 4 and len(set(rows)) == 4, rows
    for n, row in zip((1, 10, 12, 22), rows, strict=True):
        assert f"layer_{n}/" in row, rows


def test_prose_is_wrapped_to_the_terminal_with_hanging_lines() -> None:
    from click.testing import CliRunner

    from podscope.app.terminal import say

    @__import__("click").command()
    def cmd() -> None:
        say("HIGH      " + "word " * 30 + "\n          → " + "advice " * 20)
        say("podscope: note: " + "x" * 200, err=True)

    out = CliRunner().invoke(cmd, env={"COLUMNS": "60"}).output.splitlines()
    assert max(map(len, out)) <= 60, out
    assert out[1].startswith(" " * 10 + "word")  # under the title, past the label
    arrow = next(i for i, line in enumerate(out) if "→" in line)
    assert out[arrow + 1].startswith(" " * 12 + "advice")


FIXTURES = Path(__file__).parents[1] / "fixtures"
COMMANDS = [
    ["diagnose"],
    ["input"],
    ["input", "--iterators"],
    ["collectives"],
    ["stragglers"],
    ["stragglers", "--steps"],
    ["ops"],
    ["ops", "--by", "kernel"],
    ["steps"],
    ["memory"],
    ["ps"],
    ["parse"],
    ["hlo"],
    ["roofline"],
]


@pytest.mark.parametrize(
    "sample",
    [
        "xplane/gpu_tf_multiworker_v100",
        "xplane/tpu_xprof",
        "xplane/rocm_jax_tracelens/traces__mi300__jax08_attention__tw003.xplane.pb",
        "android/ms_test_trace.perfetto-trace",
        "ps_baseline",
        "regressions/straggler_python_traced",
    ],
)
def test_every_command_fits_80_columns_and_says_nothing_odd(sample: str, tmp_path: Path) -> None:
    """Every analysis command as a newcomer meets it at 80 columns: no line past the edge (an
    error or a warning is one line, whatever its length), no ``-0.000``, no empty
    parentheses, no ``w1`` legend for the only worker, and an empty table says why."""
    from click.testing import CliRunner

    from podscope.app.cli import cli
    from tests.conftest import SHARED_TRACES

    path = (
        FIXTURES / sample
        if not sample.startswith(("xplane/", "android/"))
        else SHARED_TRACES / sample
    )
    if not path.exists():
        pytest.skip(f"sample not present: {path}")
    env = {"COLUMNS": "80", "PODSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    for command in COMMANDS:
        result = CliRunner().invoke(cli, [*command, str(path)], env=env)
        assert result.exit_code == 0, (command, result.output)
        text = result.stdout + result.stderr
        lines = [
            ln
            for ln in text.splitlines()
            if not ln.startswith(("podscope: error", "podscope: warning"))
        ]
        assert max(map(len, lines), default=0) <= 80, (
            command,
            [ln for ln in lines if len(ln) > 80],
        )
        assert "-0.000" not in text, (command, text)
        assert not re.search(r"(?:^|\s)\(\s*\)", text), (command, text)  # `.numpy()` is fine
        assert not re.search(r"^\s*w1 = ", text, re.M) or re.search(r"^\s*w2 = ", text, re.M), (
            command,
            text,
        )
        assert result.stdout.strip() or result.stderr.strip(), (command, "prints nothing")
