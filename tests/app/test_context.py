"""The app's context lives on its Flask server: two apps in one process keep their own."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from podscope.app.context import current
from podscope.app.main import create_app
from podscope.app.settings import AppSettings


def test_two_apps_keep_their_own_context(tmp_path: Path) -> None:
    a = create_app(AppSettings(logdir=tmp_path / "a"))
    b = create_app(AppSettings(logdir=tmp_path / "b"))
    with a.server.test_request_context("/"):
        assert current().settings.logdir == tmp_path / "a"
    with b.server.test_request_context("/"):
        assert current().settings.logdir == tmp_path / "b"
        assert current().store.logdir == tmp_path / "b"
    assert a.server.test_client().get("/healthz").json["logdir"] == str(tmp_path / "a")


def test_outside_a_request_there_is_no_context() -> None:
    with pytest.raises(RuntimeError, match="no PodScope app context"):
        current()


def test_the_newest_session_is_the_newest_capture_not_the_last_name(tmp_path: Path) -> None:
    from podscope.app.store import SessionStore
    from tests.analyzers.test_breakdown import worker_trace

    root = tmp_path / "plugins" / "profile"
    for name, age_s in [("upload_2025_01_01_00_00_00", 86_400), ("2026_01_05_capture", 0)]:
        (root / name).mkdir(parents=True)
        f = root / name / "h_1.xplane.pb"
        f.write_bytes(worker_trace("h_1", 3))
        os.utime(f, (f.stat().st_atime, f.stat().st_mtime - age_s))
    assert SessionStore(tmp_path).names() == ["2026_01_05_capture", "upload_2025_01_01_00_00_00"]


@pytest.mark.parametrize("name", ["capture.json", "CAPTURE.JSON", "cluster.json"])
def test_an_upload_never_becomes_a_manifest(tmp_path: Path, name: str) -> None:
    """A viewer's trace named as a session's manifest (a Chrome JSON trace with a forged
    ``watch`` and start) is saved under another name: the session has no manifest, retention
    and History never read it."""
    import json

    from podscope.app.store import SessionStore
    from podscope.collectors import watch
    from podscope.trace_parsers import layout

    forged = {
        "traceEvents": [{"name": "x", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}],
        "schema_version": 1,
        "session": "forged",
        "start_timestamp_ns": 10**30,
        "watch": {"reason": "scheduled"},
        "workers": [],
    }
    store = SessionStore(tmp_path)
    result = store.import_files([(name, json.dumps(forged).encode())])
    folder = tmp_path / "plugins" / "profile" / result.session
    assert result.saved and not (folder / "capture.json").exists()
    assert not (folder / "cluster.json").exists()
    (saved,) = [p.name for p in folder.iterdir()]
    assert saved.startswith(f"upload_{name}")
    assert layout.read_manifest(folder) is None and watch.watched_sessions(tmp_path) == []


def test_uploads_in_one_second_get_their_own_sessions_and_same_named_files_both_stay(
    tmp_path: Path,
) -> None:
    from datetime import datetime, timezone
    from unittest import mock

    from podscope.app.store import SessionStore
    from tests.analyzers.test_breakdown import worker_trace

    store = SessionStore(tmp_path)
    a, b = worker_trace("a", 3), worker_trace("b", 4)
    frozen = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
    with mock.patch("podscope.trace_parsers.layout.datetime") as clock:
        clock.now.return_value = frozen
        first = store.import_files([("w.xplane.pb", a), ("w.xplane.pb", b)])
        second = store.import_files([("w.xplane.pb", a)])
    assert first.session == "upload_2026_12_01_12_00_00"
    assert second.session == "upload_2026_12_01_12_00_00_2"  # not the first one overwritten
    assert first.saved == ("w", "w_2")  # two files of one name: two workers
    root = tmp_path / "plugins" / "profile"
    assert sorted(p.name for p in (root / first.session).iterdir()) == [
        "w.xplane.pb",
        "w_2.xplane.pb",
    ]
    assert (root / first.session / "w.xplane.pb").read_bytes() == a
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # nothing half-written left
    assert store.import_files([("x.xplane.pb", b"\x0a\xff")]).saved == ()


def test_the_capture_form_is_checked_on_the_server() -> None:
    from podscope.app.targets import capture_form

    fields, problem = capture_form(2000, 500, "2", "0", 2)
    assert problem is None and fields["retries"] == 2 and fields["host_tracer_level"] == 2
    for bad in (
        capture_form(None, 500, "2", "0", 2),  # an emptied field is refused, not guessed
        capture_form(5, 500, "2", "0", 2),  # 5 ms: refused with the range, not 2000
        capture_form("²", 500, "2", "0", 2),
        capture_form(2000, 0, "2", "0", 100_000),  # six of these left six hung processes
        capture_form(10**9, 0, "2", "0", 0),
        capture_form(2000, -5, "2", "0", 0),
        capture_form(2000, 0, "7", "0", 0),
        capture_form("2e3", 0, "2", "0", 0),
    ):
        assert (
            bad[0] == {} and bad[1] and bad[1].startswith(("Duration", "Delay", "Retries", "Host"))
        )
    assert "5 is outside 100–60,000" in str(capture_form(5, 500, "2", "0", 2)[1])


def test_a_session_asked_for_twice_at_once_is_loaded_once(tmp_path: Path) -> None:
    import threading

    from podscope.app.store import SessionStore
    from tests.analyzers.test_breakdown import worker_trace

    (tmp_path / "plugins" / "profile" / "s").mkdir(parents=True)
    (tmp_path / "plugins" / "profile" / "s" / "h_1.xplane.pb").write_bytes(worker_trace("h_1", 3))
    store = SessionStore(tmp_path, cache_dir=tmp_path / "cache")
    loads, entered, release = [], threading.Event(), threading.Event()
    real = store._in_process

    def held(*args):  # type: ignore[no-untyped-def]
        loads.append(args)
        entered.set()
        release.wait(30)
        return real(*args)

    store._in_process = held  # type: ignore[method-assign]
    got: list[object] = []
    first = threading.Thread(target=lambda: got.append(store.get("s")))
    first.start()
    assert entered.wait(30)
    second = threading.Thread(target=lambda: got.append(store.get("s")))
    second.start()
    release.set()
    first.join(30)
    second.join(30)
    assert len(loads) == 1 and len(got) == 2 and got[0] is got[1]


def test_a_page_request_prepares_its_session_before_the_layout_callback(tmp_path: Path) -> None:

    from tests.analyzers.test_breakdown import worker_trace

    (tmp_path / "plugins" / "profile" / "s").mkdir(parents=True)
    (tmp_path / "plugins" / "profile" / "s" / "h_1.xplane.pb").write_bytes(worker_trace("h_1", 3))
    app = create_app(AppSettings(logdir=tmp_path, cache_dir=tmp_path / "cache"))
    with app.server.test_request_context("/"):
        store = current().store
    assert app.server.test_client().get("/pod?session=s").status_code == 200
    deadline = time.monotonic() + 60  # the state, not a time: the session is loaded
    while not store._items and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [key[0] for key in store._items] == ["s"]  # no callback asked for it


def test_distinct_queries_never_start_a_thread_each(tmp_path: Path) -> None:
    """300 GETs of a page with a junk query key each (what any web page can make a browser
    send with image tags): no prefetch for keys the page does not read, and the pool's few
    threads for those it does."""
    from tests.analyzers.test_breakdown import worker_trace

    (tmp_path / "plugins" / "profile" / "s").mkdir(parents=True)
    (tmp_path / "plugins" / "profile" / "s" / "h_1.xplane.pb").write_bytes(worker_trace("h_1", 3))
    client = create_app(AppSettings(logdir=tmp_path, cache_dir=tmp_path / "cache")).server
    client = client.test_client()
    before = set(threading.enumerate())
    for n in range(300):
        assert client.get(f"/ops?session=s&junk={n}").status_code == 200
    for n in range(300):  # keys the page reads: distinct values, queued on the pool or dropped
        assert client.get(f"/ops?session=s&q=k{n}").status_code == 200
    new = set(threading.enumerate()) - before
    assert len([t for t in new if t.name.startswith("podscope-prefetch")]) <= 2 and len(new) <= 4


def small_and_big(logdir: Path) -> None:
    """Sessions ``small`` (one worker) and ``big`` (three: a job's, below ``in_process_below=2``)."""
    from tests.analyzers.test_breakdown import worker_trace

    for name, workers in (("small", 1), ("big", 3)):
        (logdir / "plugins" / "profile" / name).mkdir(parents=True)
        for w in range(workers):
            trace = worker_trace(f"h_{w}", 3)
            (logdir / "plugins" / "profile" / name / f"h_{w}.xplane.pb").write_bytes(trace)


def test_a_prefetch_loads_only_what_the_request_would_load_itself(tmp_path: Path) -> None:
    """A big session's job may be started ahead (``start``), once; how it ended is said once,
    to the page."""
    from dataclasses import replace

    from podscope.app.store import SessionError, SessionStore

    small_and_big(tmp_path)
    store = SessionStore(tmp_path, cache_dir=tmp_path / "cache")
    store.execution = replace(store.execution, in_process_below=2)
    assert store.loads_here("small") and not store.loads_here("big")
    assert not store.loads_here("../outside") and not store.loads_here("absent")
    for name in ("small", "../outside", "absent"):
        store.start(name)  # nothing to start: the page loads it, or says what is wrong
    assert store._jobs == {}
    with pytest.MonkeyPatch.context() as mp:  # a job that fails, to be said once
        mp.setattr("podscope.app.store.run_session", lambda *a, **k: 1 / 0)
        store.start("big")
        job = store.job("big")
        assert job is not None and job.finished.wait(60)
        store.start("big")  # ended, not yet said: not started again
        assert store.job("big") is job
        with pytest.raises(SessionError, match="ZeroDivisionError"):
            store.get("big")  # said to the page, once
    store.start("big")  # then the next visit's prefetch starts it again
    job = store.job("big")
    assert job is not None and job.finished.wait(300) and job.error is None
    store.start("big")  # in memory now
    assert store.job("big") is None and store.loads_here("big")
    # the server starts the pool's fork server only where a session will need it
    assert store.any_in_background()
    store.execution = replace(store.execution, in_process_below=4)
    assert not store.any_in_background()


def test_the_sessions_list_starts_no_sessions_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Sessions page reads no session: its prefetch makes the list, and starts no job of
    the newest session, however big (it started one: ``bench.folders``' 100,000-file session
    was being hashed while its folder was removed)."""
    from dataclasses import replace

    small_and_big(tmp_path)
    os.utime(tmp_path / "plugins" / "profile" / "big")  # the newest: the picker's default
    app = create_app(AppSettings(logdir=tmp_path, cache_dir=tmp_path / "cache"))
    with app.server.test_request_context("/"):
        store = current().store
    store.execution = replace(store.execution, in_process_below=2)
    assert store.names()[0] == "big" and not store.loads_here("big")
    done, started = threading.Event(), []

    def start(session: str, head_first: bool = False) -> None:
        started.append(session)
        done.set()

    def summaries() -> Any:
        if threading.current_thread().name.startswith("podscope-prefetch"):
            done.set()  # the prefetch makes the list
        return type(store).summaries(store)

    monkeypatch.setattr(store, "start", start)
    monkeypatch.setattr(store, "summaries", summaries)
    assert app.server.test_client().get("/").status_code == 200
    assert done.wait(60)
    assert started == [] and store._jobs == {}


def test_the_layout_holds_the_pages_url_and_the_sessions_so_nothing_fires_on_load(
    tmp_path: Path,
) -> None:
    """Dash's layout request brings the page's URL (its Referer) into the shell's Location and
    the session list into the picker: the Location has nothing to report when it mounts, so no
    request of the shell's follows the page's own. Another origin's, or none, leaves the
    Location to report the URL itself."""
    import json

    from tests.analyzers.test_breakdown import worker_trace

    for name in ("2026_01_01_00_00_00", "2026_01_02_00_00_00"):
        (tmp_path / "plugins" / "profile" / name).mkdir(parents=True)
        trace = worker_trace("h_1", 3)
        (tmp_path / "plugins" / "profile" / name / "h_1.xplane.pb").write_bytes(trace)
    client = create_app(AppSettings(logdir=tmp_path, cache_dir=tmp_path / "cache")).server
    client = client.test_client()

    def shell(referrer: str | None) -> dict[str, dict]:
        headers = {"Referer": referrer} if referrer else {}
        layout = json.loads(client.get("/_dash-layout", headers=headers).data)
        found: dict[str, dict] = {}

        def walk(node: object) -> None:
            if isinstance(node, dict):
                if isinstance(node.get("props"), dict) and "id" in node["props"]:
                    found[str(node["props"]["id"])] = node["props"]
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        walk(layout)
        return found

    page = "http://localhost/ops?session=2026_01_01_00_00_00&by=type"
    props = shell(page)
    assert {k: props["shell-url"].get(k) for k in ("pathname", "search", "href", "hash")} == {
        "pathname": "/ops",
        "search": "?session=2026_01_01_00_00_00&by=type",
        "href": page,
        "hash": "",
    }
    options = props["shell-session"]["options"]
    assert [o["value"] for o in options] == ["2026_01_02_00_00_00", "2026_01_01_00_00_00"]
    assert shell("http://localhost/")["shell-url"]["search"] == ""
    for elsewhere in ("http://evil.example/ops?session=x", None):
        assert "pathname" not in shell(elsewhere)["shell-url"]


def test_the_layout_callback_takes_the_layout_the_page_request_made(tmp_path: Path) -> None:
    """The page's request computes its layout ahead; the layout callback that follows takes
    it (waiting for it if need be) instead of computing it again. A session the request would
    not load (a big one, a job's) is left to the callback."""
    from dataclasses import replace

    import dash
    from plotly.io.json import to_json_plotly

    small_and_big(tmp_path)
    app = create_app(AppSettings(logdir=tmp_path, cache_dir=tmp_path / "cache"))
    with app.server.test_request_context("/"):
        store = current().store
    store.execution = replace(store.execution, in_process_below=2)
    page = next(p for p in dash.page_registry.values() if p["path"] == "/ops")
    real, computed = page["layout"].__wrapped__, []
    page["layout"].__wrapped__ = lambda **q: computed.append(q) or real(**q)
    try:
        client = app.server.test_client()
        assert client.get("/ops?session=small&by=type").status_code == 200
        with app.server.test_request_context("/_dash-update-component"):
            # as Dash's router calls it: the query, and the router's input of the shell
            taken = page["layout"](session="small", by="type", podscope_render=None)
            again = page["layout"](session="small", by="type", podscope_render=1)
        assert computed == [{"session": "small", "by": "type"}] * 2  # the request's, `again`'s
        assert taken is not again and to_json_plotly(taken) == to_json_plotly(again)
        computed.clear()
        assert client.get("/ops?session=big").status_code == 200
        # the request starts the big session's job (the state, not a time)
        deadline = time.monotonic() + 60
        while store.job("big") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        job = store.job("big")
        assert job is not None and computed == []  # and leaves its layout to the callback
        with app.server.test_request_context("/_dash-update-component"):
            page["layout"](session="big", podscope_render=None)  # progress, of that job
        assert computed == [{"session": "big"}] and store.job("big") in (job, None)
        assert job.finished.wait(300) and job.error is None  # ends here, its pool with it
    finally:
        page["layout"].__wrapped__ = real


def held_rest(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """A pod's rest (after the Pod Viewer's part) waits until the returned event is set: the
    state in between is looked at."""
    from podscope.analyzers import execution

    release, real = threading.Event(), execution._gathered

    def held(*args, background: bool = False, **kwargs):  # type: ignore[no-untyped-def]
        if background:
            assert release.wait(120)
        return real(*args, background=background, **kwargs)

    monkeypatch.setattr(execution, "_gathered", held)
    return release


def test_a_pods_viewer_comes_first_and_the_other_pages_wait_for_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's job started by the Pod Viewer hands it its part first; the other pages show
    the rest's progress, with a link to the Pod Viewer, until the whole analysis is in."""
    from podscope.app.pages._common import preparing
    from podscope.app.store import POD_VIEW_FRAMES, SessionPreparing, SessionStore
    from tests.analyzers.test_breakdown import worker_trace

    folder = tmp_path / "plugins" / "profile" / "pod"
    folder.mkdir(parents=True)
    for i in range(8):  # in_process_below: a background job, in a pool
        trace = worker_trace(f"h_{i}", 8, offset_us=400 if i == 3 else 0)
        (folder / f"h_{i}.xplane.pb").write_bytes(trace)
    store = SessionStore(tmp_path, cache_dir=tmp_path / "cache")
    release = held_rest(monkeypatch)
    with pytest.raises(SessionPreparing) as started:
        store.get("pod", head=True)
    job = started.value.job
    assert job.head_first and job.head_ready.wait(120) and not job.finished.is_set()
    head = store.get("pod", head=True)
    assert head.stragglers.set_index("worker")["straggler"].idxmax() == "h_3"
    with pytest.raises(SessionPreparing) as waiting:  # any other page: the rest's progress
        store.get("pod")
    assert waiting.value.job is job
    card = str(preparing(job))
    assert "/pod?session=pod" in card and "is ready. Op tables and rules" in card
    release.set()
    assert job.finished.wait(120) and job.error is None
    whole = store.get("pod")
    assert whole is not head and store.get("pod", head=True) is whole
    # the Pod Viewer's frames of the whole analysis came with it (its first view computes none)
    assert all(name in vars(whole) for name in POD_VIEW_FRAMES)
    assert any(f.rule_id == "straggler" and f.applies for f in whole.findings)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind",
    # the V100 sample's eight copies (24 MB) take a minute: make verify draws them
    [
        "tpu_xprof",
        "rocm_jax_tracelens",
        pytest.param("gpu_tf_multiworker_v100", marks=pytest.mark.long),
    ],
)
def test_the_pod_viewer_is_drawn_from_a_real_pods_first_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Eight hosts of a real sample (TPU, ROCm, GPU): every Pod Viewer view is drawn from the
    first part while the rest is held, so it reads nothing that part lacks (which would
    raise, not load every host's events)."""
    import dash

    from podscope.app.store import SessionPreparing
    from tests.conftest import real_xplanes

    sample = next((f for f in real_xplanes() if f.parent.name == kind), None)
    if sample is None:
        pytest.skip(f"../shared/traces/xplane/{kind} is absent")
    release = held_rest(monkeypatch)
    views = [{}, {"group": "1"}, {"step": "1"}, {"hosts": "host3*", "heat": "step_time"}]
    folder = tmp_path / "plugins" / "profile" / "pod"
    folder.mkdir(parents=True)
    for i in range(8):
        (folder / f"host{i}_6000.xplane.pb").write_bytes(sample.read_bytes())
    app = create_app(AppSettings(logdir=tmp_path, cache_dir=tmp_path / "cache"))
    layout = next(p["layout"] for p in dash.page_registry.values() if p["path"] == "/pod")
    with app.server.test_request_context("/pod?session=pod"):
        store = current().store
        with pytest.raises(SessionPreparing) as started:
            store.get("pod", head=True)
        job = started.value.job
        assert job.head_ready.wait(300)
        for view in views:
            drawn = str(layout(session="pod", **view))
            assert "pod-badges" in drawn and "8 workers" in drawn, view
        assert not job.finished.is_set()  # drawn while the rest was held
    release.set()
    assert job.finished.wait(300) and job.error is None


def test_uploads_past_the_ones_being_read_are_told_to_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight uploads at once held eight request threads and their files' memory: at most
    ``uploads.at_once`` are read, the next is refused at once (its thread freed)."""
    import threading

    from podscope.app import store as store_module
    from podscope.app.store import SessionError, SessionStore
    from tests.analyzers.test_breakdown import worker_trace

    store = SessionStore(tmp_path)
    at_once = store.uploads.at_once
    reading, release = threading.Semaphore(0), threading.Event()
    real = store_module.read_uploads

    def slow_read(*a, **k):  # type: ignore[no-untyped-def]
        reading.release()  # one more upload is being read
        release.wait(timeout=30)
        return real(*a, **k)

    monkeypatch.setattr(store_module, "read_uploads", slow_read)
    trace = worker_trace("a", 3)
    results: list[object] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(store.import_files([("w.xplane.pb", trace)]))
        )
        for _ in range(at_once)
    ]
    for t in threads:
        t.start()
    for _ in range(at_once):  # every one of them is being read
        assert reading.acquire(timeout=30)
    with pytest.raises(SessionError, match="send this one again in a moment"):
        store.import_files([("w.xplane.pb", trace)])
    release.set()
    for t in threads:
        t.join()
    assert len(results) == at_once and all(r.saved for r in results)  # type: ignore[attr-defined]
    assert store.import_files([("w.xplane.pb", trace)]).saved  # free again


def big_chrome_trace(events: int) -> bytes:
    """A valid Chrome JSON trace whose reading takes seconds of CPU and hundreds of MiB."""
    rows = [
        {"name": f"op{i % 50}", "ph": "X", "ts": i, "dur": 1, "pid": 1, "tid": i % 4}
        for i in range(events)
    ]
    return json.dumps({"traceEvents": rows}).encode()


@pytest.mark.parametrize(
    ("budget", "refusal"),
    [
        ({"total_memory_mb": 2 * 192}, "needs more than the 192 MiB an upload may use"),
        ({"cpu_s": 1}, "took more than the 1 s of CPU an upload may use"),
    ],
)
def test_an_upload_is_read_off_the_server_within_its_budget(
    tmp_path: Path, budget: dict[str, int], refusal: str
) -> None:
    """A worst-case upload held the server's GIL and memory while it was parsed: it is read in
    a process of its own, refused past its memory or CPU, and the server spends next to
    nothing on it; the upload's other files keep their own verdicts, nothing is left behind."""
    import resource

    from podscope.app.store import SessionStore
    from podscope.app.uploads import UploadBudget
    from tests.analyzers.test_breakdown import worker_trace

    store = SessionStore(tmp_path / "logdir", uploads=UploadBudget(**budget))
    big, small = big_chrome_trace(300_000), worker_trace("a", 3)
    assert store.import_files([("warm.xplane.pb", small)]).saved  # the fork server started
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = store.import_files([("w.xplane.pb", small), ("big.trace.json", big)])
    after = resource.getrusage(resource.RUSAGE_SELF)
    spent = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    assert spent < 0.5, spent  # reading the big one took seconds, elsewhere
    assert result.saved == ("w",)
    assert len(result.errors) == 1 and result.errors[0].startswith(
        "big.trace.json: reading it " + refusal
    )
    assert sorted(p.name for p in (tmp_path / "logdir").rglob("*") if p.is_file()) == [
        "w.xplane.pb",
        "warm.xplane.pb",
    ]
    # within the default budget the same file is read and kept
    assert SessionStore(tmp_path / "logdir").import_files([("big.trace.json", big)]).saved
