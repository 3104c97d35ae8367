"""CLI tables fit an 80-column terminal: whole, with stacked number headers, abbreviated
worker labels and a legend, a cut name column, or one block per row; ``--wide`` keeps every
row on one line."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
from rich.console import Console

from app.cli_table import show_table

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
            [sys.executable, "-m", "app", *command, str(tmp_path), "--no-cache"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "80"},
            check=True,
        ).stdout
        table = [line for line in out.splitlines() if "bottleneck " not in line]
        assert max(map(len, table)) <= 80, (command, out)
        assert "10.128.15.203_2222" in out, (command, out)  # in the legend or a heading
