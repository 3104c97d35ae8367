"""Names and links a hostile logdir can hold: colliding labels, links out, long names, depth."""

from __future__ import annotations

import base64
import gzip
from pathlib import Path

import pytest

from podscope.trace_parsers import layout, load
from podscope.trace_parsers.errors import TraceParseError
from tests.collectors.fake_agent import xspace
from tests.xspace_builder import SpaceBuilder


def test_names_that_collide_across_suffixes_are_two_workers(tmp_path: Path) -> None:
    (tmp_path / "w.xplane.pb").write_bytes(xspace(20))
    (tmp_path / "w.xplane.pb.gz").write_bytes(gzip.compress(xspace(7)))
    (tmp_path / "v.xplane.pb").write_bytes(xspace(3))
    for cache in (False, True):
        frames = load(tmp_path, cache=cache, cache_dir=tmp_path.parent / "cache")
        counts = frames.events.groupby("worker", observed=True).size().to_dict()
        assert counts == {"v": 3, "w.xplane.pb": 20, "w.xplane.pb.gz": 7}, counts


def test_links_out_of_the_session_are_not_read_and_are_listed(tmp_path: Path) -> None:
    session = layout.session_dir(tmp_path / "logdir", "s1")
    session.mkdir(parents=True)
    (session / "ok.xplane.pb").write_bytes(xspace(4))
    (tmp_path / "secret.xplane.pb").write_bytes(xspace(9))
    (session / "evil.xplane.pb").symlink_to(tmp_path / "secret.xplane.pb")
    (session / "inside.xplane.pb").symlink_to(session / "ok.xplane.pb")
    frames = load(tmp_path / "logdir", cache=False)
    assert sorted(frames.workers["worker"].astype(str)) == ["inside", "ok"]
    assert [Path(str(f.path)).name for f in frames.failures] == ["evil.xplane.pb"]
    assert "leading out" in frames.failures[0].reason
    with pytest.raises(TraceParseError, match="leading out"):
        only = tmp_path / "only"
        only.mkdir()
        (only / "evil.xplane.pb").symlink_to(tmp_path / "secret.xplane.pb")
        load(only, cache=False)


def test_long_names_are_refused_as_names() -> None:
    with pytest.raises(layout.LayoutError, match="at most 255 bytes"):
        layout.check_plain_name("a" * 100_000)
    with pytest.raises(layout.LayoutError):
        layout.check_plain_name("é" * 128)  # 256 bytes
    assert layout.check_plain_name("a" * 255)


def test_nesting_depth_saturates_instead_of_wrapping() -> None:
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "deep")
    n = 40_000
    for i in range(n):
        p.event(line, "e", i, 2 * (n - i))
    frames = load(b.bytes(), cache=False)
    depth = frames.events["depth"]
    assert depth.min() == 0 and depth.max() == 32_767 and (depth >= 0).all()


def test_uploads_with_long_names_or_odd_contents_get_messages(tmp_path: Path) -> None:
    from podscope.app.main import create_app
    from podscope.app.settings import AppSettings
    from tests.app.helpers import upload_body

    app = create_app(AppSettings(logdir=tmp_path))
    c = app.server.test_client()
    assert c.get("/pod?session=" + "a" * 100_000).status_code == 200
    deps = c.get("/_dash-dependencies").json
    good = "data:x;base64," + base64.b64encode(xspace(3)).decode()
    for contents, names, expect in (
        ([12345], ["w.xplane.pb"], "not a base64 data URL"),
        ([None], [None], "not a base64 data URL"),
        ("data:,", 7, "upload: unrecognised trace format"),
        ([good], ["a" * 100_000 + ".xplane.pb"], "1 worker(s)"),
    ):
        r = c.post("/_dash-update-component", json=upload_body(deps, contents, names))
        text = r.get_data(as_text=True)
        assert r.status_code == 200 and expect in text, text[-400:]


def test_an_upload_to_a_logdir_it_cannot_write_says_what_to_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root-owned bind mount of /data: the upload answered HTTP 500 PermissionError."""
    from podscope.app.main import create_app
    from podscope.app.settings import AppSettings
    from tests.app.helpers import upload_body

    def refused(*args: object, **kw: object) -> Path:
        raise PermissionError(13, "Permission denied", str(tmp_path / "plugins"))

    app = create_app(AppSettings(logdir=tmp_path))
    c = app.server.test_client()
    deps = c.get("/_dash-dependencies").json
    monkeypatch.setattr(layout, "new_session_dir", refused)
    good = "data:x;base64," + base64.b64encode(xspace(3)).decode()
    r = c.post("/_dash-update-component", json=upload_body(deps, [good], ["w.xplane.pb"]))
    text = r.get_data(as_text=True)
    assert r.status_code == 200, text[-400:]
    assert "The upload was not saved" in text and "Permission denied" in text
    assert "--user $(id -u):$(id -g)" in text and "writable by uid" in text


@pytest.mark.parametrize("field", ["ts", "dur", "counter"])
def test_chrome_json_integers_of_hundreds_of_digits_are_skipped_and_counted(
    tmp_path: Path, field: str
) -> None:
    import json

    big = "9" * 401
    events = [
        {"name": "good", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
        {"name": "bad", "ph": "X", "ts": 3, "dur": 4, "pid": 1, "tid": 1},
        {"name": "mem", "ph": "C", "ts": 5, "pid": 1, "args": {"value": 1}},
    ]
    text = json.dumps({"traceEvents": events})
    if field == "counter":
        text = text.replace('"value": 1', f'"value": {big}')
    else:
        text = text.replace(f'"{field}": {3 if field == "ts" else 4}', f'"{field}": {big}')
    (tmp_path / "w.json").write_text(text)
    frames = load(tmp_path / "w.json", cache=False)
    assert "good" in set(frames.events["name"].astype(str))


@pytest.mark.parametrize(
    "manifest", ['{"start_timestamp_ns": 1e400}', "[" * 100_000, '{"workers": [{"label": 1e400}]}']
)
def test_a_bad_manifest_marks_its_session_not_the_page(tmp_path: Path, manifest: str) -> None:
    from podscope.app.store import SessionStore

    session = layout.session_dir(tmp_path, "s1")
    session.mkdir(parents=True)
    (session / "w.xplane.pb").write_bytes(xspace(3))
    (session / "capture.json").write_text(manifest)
    with pytest.raises(layout.LayoutError, match="capture manifest"):
        layout.read_manifest(session)
    (summary,) = SessionStore(tmp_path).summaries()
    assert summary.workers == 1 and "capture manifest" in summary.manifest_error


def test_what_is_not_a_plain_capture_file_is_listed_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIFOs (a reader would block), devices (never end), sockets, hard links to a file with
    names outside the session, links out: none is read, each is in ``failures``."""
    import os
    import socket

    session = layout.session_dir(tmp_path / "logdir", "s1")
    session.mkdir(parents=True)
    (session / "ok.xplane.pb").write_bytes(xspace(4))
    (session / "twin.xplane.pb").hardlink_to(session / "ok.xplane.pb")  # both names here: read
    os.mkfifo(session / "fifo.xplane.pb")
    (tmp_path / "secret.xplane.pb").write_bytes(xspace(9))
    (session / "hard.xplane.pb").hardlink_to(tmp_path / "secret.xplane.pb")
    (session / "out.xplane.pb").symlink_to(tmp_path / "secret.xplane.pb")
    unix = socket.socket(socket.AF_UNIX)
    monkeypatch.chdir(session)  # a socket's path is at most 108 bytes
    unix.bind("sock.xplane.pb")
    reasons = {"fifo": "a FIFO", "hard": "names outside", "out": "leading out", "sock": "socket"}
    if os.geteuid() == 0:
        os.mknod(session / "dev.xplane.pb", 0o600 | 0o020000, os.makedev(1, 3))  # /dev/null
        reasons["dev"] = "character device"
    try:
        frames = load(tmp_path / "logdir", cache=False)
    finally:
        unix.close()
    assert sorted(frames.workers["worker"].astype(str)) == ["ok", "twin"]
    got = {Path(str(f.path)).name.split(".")[0]: f.reason for f in frames.failures}
    assert set(got) == set(reasons)
    for name, why in reasons.items():
        assert why in got[name] and "not read" in got[name], (name, got[name])


def test_files_past_the_session_limit_are_reported_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    for i in range(7):
        (folder / f"w{i}.xplane.pb").write_bytes(xspace(2))
    monkeypatch.setenv("PODSCOPE_MAX_SESSION_FILES", "5")
    frames = load(folder, cache=False)
    assert sorted(frames.workers["worker"].astype(str)) == [f"w{i}" for i in range(5)]
    (limit,) = frames.failures
    assert "2 more capture files past the limit of 5" in limit.reason
    assert "PODSCOPE_MAX_SESSION_FILES" in limit.reason


def test_a_folder_is_listed_once_however_many_files_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Labelling each file listed its folder again (4,000 empty files took 94 s to parse):
    now a load lists each folder a constant number of times."""
    import os

    folder = tmp_path / "s"
    folder.mkdir()
    for i in range(600):
        (folder / f"w{i}.xplane.pb").write_bytes(b"")
    listings = []
    real_listdir, real_scandir = os.listdir, os.scandir
    monkeypatch.setattr(os, "listdir", lambda p=".": listings.append(p) or real_listdir(p))
    monkeypatch.setattr(os, "scandir", lambda p=".": listings.append(p) or real_scandir(p))
    with pytest.raises(TraceParseError, match="no worker file could be parsed"):
        load(folder, cache=False)
    assert len(listings) <= 6, len(listings)
