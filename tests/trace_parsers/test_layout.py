"""The capture layout: one make/parse pair, and capture.json written by collectors and read
back by the loader's side."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from podscope.analyzers.session import SessionAnalysis
from podscope.collectors.capture import CaptureOptions, CaptureResult, WorkerResult
from podscope.collectors.status import Status
from podscope.trace_parsers import layout
from podscope.trace_parsers.loader import load, resolve, sessions, worker_label


def test_make_and_parse_pair(tmp_path: Path) -> None:
    d = layout.session_dir(tmp_path, "2026_12_01_10_00_00")
    assert d == tmp_path / "plugins" / "profile" / "2026_12_01_10_00_00"
    f = d / layout.xplane_name("10.0.0.1_6009")
    assert layout.worker_label(f.name) == "10.0.0.1_6009" == worker_label(f)
    assert layout.worker_label("h_1.xplane.pb.gz") == "h_1"
    d.mkdir(parents=True)
    f.write_bytes(b"x")
    assert sessions(tmp_path) == ["2026_12_01_10_00_00"]
    assert resolve(tmp_path) == [f]
    assert layout.tf_trace_path(Path("/r"), "s", "host:6009") == Path("/r/s/host_6009.xplane.pb")


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a\\b", "a\x00b"])
def test_names_that_leave_their_folder_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(layout.LayoutError):
        layout.check_plain_name(bad)
    with pytest.raises(layout.LayoutError):
        layout.confined(tmp_path, bad or "x", bad)


@pytest.mark.parametrize(
    "bad",
    ["", "..", "a/../b", "/abs", "train/", "a//b", "plugins/profile/x", "a\x00/b", "x" * 5000],
)
def test_session_ids_that_leave_the_logdir_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(layout.LayoutError):
        layout.session_dir(tmp_path, bad)


def test_runs_are_found_at_any_depth_as_tensorboard_finds_them(tmp_path: Path) -> None:
    """The Keras TensorBoard callback writes logdir/train/plugins/profile/<run>/<host>.xplane.pb;
    nested experiment folders hold more runs. Each session is named by its run path."""
    from podscope.trace_parsers.loader import runs, session_folders

    made = {}
    for run in ("", "train", "runA/validation", "runA/b/c/d/e"):
        sid = layout.session_id(run, "2026_12_01_10_00_00")
        d = layout.session_dir(tmp_path, sid)
        d.mkdir(parents=True)
        (d / "h.xplane.pb").write_bytes(b"x")
        made[sid] = d
    (tmp_path / ".hidden" / "plugins" / "profile" / "s").mkdir(parents=True)
    (tmp_path / ".hidden" / "plugins" / "profile" / "s" / "h.xplane.pb").write_bytes(b"x")
    (tmp_path / "empty" / "plugins" / "profile" / "s").mkdir(parents=True)  # no capture file
    (tmp_path / "link").symlink_to(tmp_path / "runA")  # a symlink is not walked (no loops)
    assert runs(tmp_path) == ["", "empty", "runA/b/c/d/e", "runA/validation", "train"]
    assert session_folders(tmp_path) == made
    assert resolve(tmp_path, session="runA/validation/2026_12_01_10_00_00") == [
        made["runA/validation/2026_12_01_10_00_00"] / "h.xplane.pb"
    ]
    with pytest.raises(Exception, match="known: 2026_12_01_10_00_00, runA/b"):
        resolve(tmp_path, session="nope")


def test_a_run_name_or_a_capture_label_names_the_newest_session_of_it(tmp_path: Path) -> None:
    import json
    import os

    from podscope.trace_parsers.loader import chosen_session

    for i, (sid, label) in enumerate(
        (("train/s1", "baseline"), ("train/s2", "tuned"), ("eval/s1", ""), ("s9", "baseline"))
    ):
        d = layout.session_dir(tmp_path, sid)
        d.mkdir(parents=True)
        (d / "h.xplane.pb").write_bytes(b"x")
        os.utime(d / "h.xplane.pb", (1_000 + i, 1_000 + i))  # in this order, oldest first
        (d / "capture.json").write_text(json.dumps({"session": sid, "label": label}))
    assert chosen_session(tmp_path) == "s9"  # the newest
    assert chosen_session(tmp_path, "train") == "train/s2"  # the run's newest
    assert chosen_session(tmp_path, "tuned") == "train/s2"  # a capture label
    assert chosen_session(tmp_path, "baseline") == "s9"  # the newest so labelled
    assert chosen_session(tmp_path, "train/s1") == "train/s1"
    with pytest.raises(Exception, match="in several runs: eval/s1, train/s1"):
        chosen_session(tmp_path, "s1")
    assert chosen_session(tmp_path / "train" / "plugins" / "profile" / "s1") is None  # files


def test_a_bare_session_name_finds_its_only_run(tmp_path: Path) -> None:
    d = layout.session_dir(tmp_path, "train/s1")
    d.mkdir(parents=True)
    (d / "h.xplane.pb").write_bytes(b"x")
    assert resolve(tmp_path, session="s1") == [d / "h.xplane.pb"]


def test_label_and_note_round_trip_and_are_checked(tmp_path: Path) -> None:
    d = layout.session_dir(tmp_path, "s1")
    opts = CaptureOptions(logdir=tmp_path, label="baseline", note="before the fix\nbatch 64")
    CaptureResult("s1", d, opts, [], start_timestamp_ns=1).save()
    m = layout.read_manifest(d)
    assert m is not None and (m.label, m.note) == ("baseline", "before the fix\nbatch 64")
    assert "label" not in m.options
    layout.describe_session(d, "  straggler ", "")
    m = layout.read_manifest(d)
    assert m is not None and (m.label, m.note, m.start_timestamp_ns) == ("straggler", "", 1)
    upload = layout.session_dir(tmp_path, "upload_1")  # no manifest yet: one is made
    upload.mkdir()
    layout.describe_session(upload, "phone", "Pixel 7")
    m = layout.read_manifest(upload)
    assert m is not None and (m.label, m.note, m.workers) == ("phone", "Pixel 7", ())
    for label, note in (("x" * 81, ""), ("a\nb", ""), ("", "bell\x07"), ("", "y" * 2001)):
        with pytest.raises(layout.LayoutError):
            layout.describe_session(d, label, note)


def test_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "s").symlink_to(tmp_path)
    with pytest.raises(layout.LayoutError, match="outside"):
        layout.confined(tmp_path / "root", "s", "secret")


def test_capture_json_round_trip(tmp_path: Path) -> None:
    opts = CaptureOptions(logdir=tmp_path, token="secret")
    d = layout.session_dir(tmp_path, "s1")
    workers = [
        WorkerResult("h_1", "h:1", status=Status.OK, role="worker", index=0, bytes=12),
        WorkerResult("h_2", "h:2", status=Status.UNREACHABLE, reason="no answer"),
    ]
    CaptureResult("s1", d, opts, workers, start_timestamp_ns=42).save()
    m = layout.read_manifest(d)
    assert m is not None and m.session == "s1" and m.start_timestamp_ns == 42
    assert [(w.label, w.status, w.reason) for w in m.workers] == [
        ("h_1", "ok", ""),
        ("h_2", "unreachable", "no answer"),
    ]
    assert m.workers[0].role == "worker" and m.workers[0].bytes == 12
    assert "token" not in m.options and m.options["logdir"] == str(tmp_path)
    assert layout.read_manifest(tmp_path) is None


def test_unreadable_manifest_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / layout.MANIFEST_NAME).write_text('{"workers": [{"label": "x"}]}')
    with pytest.raises(layout.LayoutError, match=r"capture\.json"):
        layout.read_manifest(tmp_path)
    (tmp_path / layout.MANIFEST_NAME).write_text("{not json")
    with pytest.raises(layout.LayoutError, match="unreadable"):
        layout.read_manifest(tmp_path)


def test_new_session_dirs_in_one_second_are_distinct(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from datetime import datetime, timezone

    from podscope.trace_parsers.layout import new_session_dir

    now = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
    first, second = new_session_dir(tmp_path, now=now), new_session_dir(tmp_path, now=now)
    assert (first.name, second.name) == ("2026_12_01_12_00_00", "2026_12_01_12_00_00_2")
    assert first.is_dir() and second.is_dir() and not any(first.iterdir())


PREVIOUS_LAYOUT = Path(__file__).parents[1] / "fixtures" / "ps_baseline"  # written before versions


def test_a_session_written_by_the_previous_layout_reads_and_analyses(tmp_path: Path) -> None:
    raw = json.loads((PREVIOUS_LAYOUT / "capture.json").read_text())
    assert "schema_version" not in raw  # the fixture is what PodScope wrote before versions
    manifest = layout.read_manifest(PREVIOUS_LAYOUT)
    assert manifest is not None and manifest.schema_version == 0
    assert [w.status for w in manifest.workers] == ["ok"] * 4
    assert {w.role for w in manifest.workers} == {"chief", "worker", "ps"}
    analysis = SessionAnalysis(load(PREVIOUS_LAYOUT, cache=False))
    assert len(analysis.stragglers) > 0 and len(analysis.findings) > 0
    # Describing it migrates it: the current version, every other field kept.
    copy = tmp_path / "session"
    shutil.copytree(PREVIOUS_LAYOUT, copy)
    layout.describe_session(copy, "old run", "")
    migrated = json.loads((copy / "capture.json").read_text())
    assert migrated == {**raw, "label": "old run", "schema_version": layout.MANIFEST_VERSION}


def test_a_session_from_a_newer_podscope_is_refused_with_what_to_do(tmp_path: Path) -> None:
    layout.write_manifest(tmp_path, "s", 1, {}, [{"label": "w", "status": "ok"}])
    assert layout.read_manifest(tmp_path).schema_version == layout.MANIFEST_VERSION
    raw = json.loads((tmp_path / "capture.json").read_text())
    (tmp_path / "capture.json").write_text(json.dumps({**raw, "schema_version": 99}))
    with pytest.raises(layout.NewerLayout, match=r"newer PodScope .*version 99.*upgrade PodScope"):
        layout.read_manifest(tmp_path)


def test_a_newer_session_is_one_clear_error_in_every_reader(tmp_path: Path) -> None:
    """The library's load, the CLI and the dashboard's store each refuse it with the same
    reason, naming the manifest; the traces beside it are not read as if this PodScope knew
    what the manifest says."""
    import shutil
    import subprocess
    import sys

    from podscope.app.store import SessionError, SessionStore
    from podscope.trace_parsers import TraceParseError, load

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "ps_baseline"
    logdir = tmp_path / "logdir"
    session = layout.session_dir(logdir, "2026_12_05_10_00_00")
    shutil.copytree(fixture, session)
    raw = json.loads((session / "capture.json").read_text())
    (session / "capture.json").write_text(json.dumps({**raw, "schema_version": 7}))
    reason = "written by a newer PodScope (capture.json schema version 7; this one reads up to 1)"
    for path in (session, logdir):
        with pytest.raises(TraceParseError, match=re.escape(reason)) as err:
            load(path, cache=False)
        assert err.value.path == str(session / "capture.json")
    cli = subprocess.run(
        [sys.executable, "-m", "podscope", "stragglers", str(logdir), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 2
    errors = [line for line in cli.stderr.splitlines() if line.startswith("podscope: error")]
    assert len(errors) == 1 and reason in errors[0], cli.stderr
    store = SessionStore(logdir, cache_dir=tmp_path / "cache")
    with pytest.raises(SessionError, match=re.escape(reason)):
        store.get(session.name)
