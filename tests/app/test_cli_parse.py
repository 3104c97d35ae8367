"""``podscope parse`` as a user runs it: a subprocess, with a timeout."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
from pyarrow import parquet

from podscope.trace_parsers.schema import SCHEMA_VERSION
from tests.xspace_builder import SpaceBuilder


def podscope(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from podscope.app.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PODSCOPE_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"},
    )


def make_run(root: Path) -> Path:
    run = root / "logdir" / "plugins" / "profile" / "2026_11_30_07_00_00"
    run.mkdir(parents=True)
    for port in (2222, 2223):
        b = SpaceBuilder()
        p = b.plane("/host:CPU")
        line = p.line(1, "python")
        for i in range(4):
            p.event(line, "train", i * 1_000_000, 900_000, step_num=i, _r=1)
        b.plane("Task Environment", profile_start_time=1_700_000_000_000_000_000)
        (run / f"localhost_{port}.xplane.pb").write_bytes(b.bytes())
    return root / "logdir"


def test_parse_json_summary_and_csv_frames(tmp_path: Path) -> None:
    logdir = make_run(tmp_path)
    out = tmp_path / "frames"
    r = podscope(
        "parse", str(logdir), "--json", "--out", str(out), "--format", "csv", cache=tmp_path / "c"
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert [w["worker"] for w in summary["workers"]] == ["localhost_2222", "localhost_2223"]
    assert [w["step_markers"] for w in summary["workers"]] == [4, 4]
    assert summary["events"] == 8
    shards = sorted((out / "events").iterdir())  # one file per worker, written by its task
    assert [p.name for p in shards] == ["localhost_2222.csv", "localhost_2223.csv"]
    events = pd.concat(map(pd.read_csv, shards))
    assert len(events) == 8 and {"worker", "start_ns", "dur_ps", "step_num"} <= set(events.columns)
    assert set(events["worker"]) == {"localhost_2222", "localhost_2223"}
    written = {p.name for p in out.iterdir()}
    assert {"aggregates", "event_metadata", "events", "counters", "sched"} <= written
    schema = json.loads((out / "schema.json").read_text())  # what a CSV reader needs
    assert schema["podscope_schema_version"] == SCHEMA_VERSION
    assert set(events.columns) == set(schema["frames"]["events"]) | {"event_row"}
    assert schema["export_columns"] == {
        "events": {"event_row": "int32"},
        "stats": {"worker": "category"},
    }


def test_parse_writes_parquet_and_prints_table(tmp_path: Path) -> None:
    logdir = make_run(tmp_path)
    r = podscope(
        "parse", str(logdir), "--out", str(tmp_path / "pq"), "--no-cache", cache=tmp_path / "c"
    )
    assert r.returncode == 0, r.stderr
    assert "localhost_2222" in r.stdout and "8 events" in r.stdout
    events = pd.read_parquet(tmp_path / "pq" / "events")  # the folder reads as one dataset
    assert len(events) == 8 and set(events["worker"]) == {"localhost_2222", "localhost_2223"}
    assert not (tmp_path / "c").exists()
    for shard in (tmp_path / "pq" / "events").iterdir():
        meta = parquet.read_schema(shard).metadata
        assert meta[b"podscope.schema_version"] == str(SCHEMA_VERSION).encode()
        assert meta[b"podscope.frame"] == b"events"


def test_parse_out_keeps_the_good_workers_of_a_folder_with_a_corrupt_one(tmp_path: Path) -> None:
    logdir = make_run(tmp_path)
    session = next((logdir / "plugins" / "profile").iterdir())
    (session / "localhost_2224.xplane.pb").write_bytes(b"\x0a\xff\xff")
    r = podscope(
        "parse", str(logdir), "--json", "--out", str(tmp_path / "pq"), cache=tmp_path / "c"
    )
    assert r.returncode == 0, r.stderr
    assert [w["worker"] for w in json.loads(r.stdout)["workers"]] == [
        "localhost_2222",
        "localhost_2223",
    ]
    assert "localhost_2224.xplane.pb" in r.stderr and "truncated" in r.stderr
    assert sorted(p.name for p in (tmp_path / "pq" / "events").iterdir()) == [
        "localhost_2222.parquet",
        "localhost_2223.parquet",
    ]


def test_exported_tables_name_their_worker_and_join_across_workers(tmp_path: Path) -> None:
    """Read back together, the workers' files still join: stats and parents name the row of
    their own worker's event (``schema.EXPORT_COLUMNS``)."""
    run = tmp_path / "logdir" / "plugins" / "profile" / "2026_11_30_07_00_00"
    run.mkdir(parents=True)
    for w, port in enumerate((2222, 2223)):
        b = SpaceBuilder()
        p = b.plane("/host:CPU")
        line = p.line(1, "python")
        for i in range(3 + w):  # workers of different sizes: rows restart at different counts
            p.event(line, "train", i * 1_000_000, 900_000, step_num=i, _r=1)
            p.event(line, "inner", i * 1_000_000 + 100, 1_000, tag=f"w{w}-{i}")
        (run / f"localhost_{port}.xplane.pb").write_bytes(b.bytes())
    out = tmp_path / "pq"
    r = podscope("parse", str(tmp_path / "logdir"), "--out", str(out), cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    tables = {name.name: pd.read_parquet(name) for name in out.iterdir() if name.is_dir()}
    assert all("worker" in t.columns for t in tables.values()), [
        n for n, t in tables.items() if "worker" not in t.columns
    ]
    events, stats = tables["events"], tables["stats"]
    tags = stats[stats["key"].astype(str) == "tag"].merge(
        events, on=["worker", "event_row"], suffixes=("", "_event")
    )
    assert len(tags) == 7 and set(tags["name"].astype(str)) == {"inner"}
    assert all(
        t.startswith(f"w{int(str(w).endswith('2223'))}-")
        for t, w in zip(tags["str_value"].astype(str), tags["worker"].astype(str), strict=True)
    )
    inner = events[events["name"].astype(str) == "inner"]
    parents = inner.merge(
        events, left_on=["worker", "parent"], right_on=["worker", "event_row"], suffixes=("", "_p")
    )
    assert len(parents) == 7 and set(parents["name_p"].astype(str)) == {"train"}


def test_parse_out_refuses_a_folder_of_frames_unless_told_to_replace_them(tmp_path: Path) -> None:
    logdir = make_run(tmp_path)
    session = next((logdir / "plugins" / "profile").iterdir())
    out = tmp_path / "pq"
    first = podscope("parse", str(logdir), "--out", str(out), cache=tmp_path / "c")
    assert first.returncode == 0, first.stderr
    (session / "localhost_2223.xplane.pb").unlink()  # the next capture has one worker
    again = podscope("parse", str(logdir), "--out", str(out), cache=tmp_path / "c")
    assert again.returncode == 2
    assert [line for line in again.stderr.splitlines() if "error" in line] == [
        f"podscope: error: {out} already holds exported frames (schema.json, events, stats, "
        "plane_stats): pass --replace to replace them whole, or choose another folder"
    ], again.stderr
    replaced = podscope("parse", str(logdir), "--out", str(out), "--replace", cache=tmp_path / "c")
    assert replaced.returncode == 0, replaced.stderr
    assert set(pd.read_parquet(out / "events")["worker"]) == {"localhost_2222"}
    assert [p.name for p in (out / "events").iterdir()] == ["localhost_2222.parquet"]


def test_parse_bad_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "w.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff")
    r = podscope("parse", str(bad), cache=tmp_path / "c")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert str(bad) in r.stderr and "truncated" in r.stderr


def test_compare_two_runs(tmp_path: Path) -> None:
    from tests.analyzers.test_breakdown import worker_trace

    files = []
    for name, input_us in (("base", 50), ("new", 200)):
        files.append(tmp_path / f"{name}_6000.xplane.pb")
        files[-1].write_bytes(worker_trace(name, 5, input_us=input_us))
    r = podscope("compare", *map(str, files), "--csv", "steps", cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    steps = pd.read_csv(io.StringIO(r.stdout)).set_index("metric")
    assert steps.loc["input", ["base_ms", "new_ms"]].tolist() == [0.05, 0.2]
    r = podscope("compare", *map(str, files), cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert "ms per traced worker-step" in r.stdout
    assert "+300.0%" in r.stdout and "MatMul" in r.stdout
    r = podscope("compare", str(files[0]), str(tmp_path / "missing"), cache=tmp_path / "c")
    assert r.returncode == 2 and r.stderr.count("\n") == 1


def test_a_tensorboard_logdir_with_a_stray_file_parses(tmp_path: Path) -> None:
    """Keras' TensorBoard(profile_batch=…) writes logdir/train/plugins/profile/<session>/;
    a notes.json beside it is not a capture."""
    logdir = make_run(tmp_path / "tb")  # tb/logdir/plugins/profile/2026_11_30_07_00_00
    train = tmp_path / "keras"
    (train / "logs").mkdir(parents=True)
    (logdir).rename(train / "logs" / "train")
    (train / "logs" / "notes.json").write_text('{"note": "lr 1e-3"}')
    out = podscope("parse", str(train / "logs"), "--json", cache=tmp_path / "cache")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert sorted(w["worker"] for w in summary["workers"]) == ["localhost_2222", "localhost_2223"]
    out = podscope(
        "steps",
        str(train / "logs"),
        "--session",
        "2026_11_30_07_00_00",
        "--csv",
        cache=tmp_path / "cache",
    )
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip().splitlines()) == 1 + 2 * 4


def test_version_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    from click.testing import CliRunner

    from podscope.app.cli import cli

    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"podscope {version('podscope')}"
