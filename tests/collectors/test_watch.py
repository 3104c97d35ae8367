"""The watcher against simulated agents: heartbeats, triggers, schedule, requests, retention,
agents that come and go, and the capture.json it leaves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from podscope.collectors import watch
from podscope.collectors.capture import CaptureOptions, Target, capture
from podscope.collectors.heartbeat import Beat, Beats
from podscope.collectors.heartbeat import step as podscope_step
from podscope.collectors.watch import Triggers, Watcher, WatchError, WatchOptions
from podscope.trace_parsers import layout
from tests.collectors.fake_agent import fake_agent

MS = 1_000_000
T0 = 1_800_000_000 * 10**9  # wall clock of the simulated steps


class Clock:
    """A step clock the test advances: (wall ns, monotonic ns)."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> tuple[int, int]:
        return T0 + self.ns, self.ns


def run_steps(beats: Beats, clock: Clock, durations_ms: list[float], first: int = 0) -> None:
    for i, ms in enumerate(durations_ms):
        clock.ns += int(ms * MS)
        beats.record(first + i)


def test_beats_ring_buffer_serves_what_a_watcher_has_not_seen() -> None:
    clock = Clock()
    beats = Beats(capacity=8, clock=clock)
    run_steps(beats, clock, [10] * 5)
    got, last, dropped = beats.since(0)
    assert [b.step for b in got] == [0, 1, 2, 3, 4] and last == 5 and dropped == 0
    assert got[0].duration_ns == 0 and got[1].duration_ns == 10 * MS
    run_steps(beats, clock, [10] * 10, first=5)  # 15 beats into 8 places
    got, last, dropped = beats.since(3)
    assert last == 15 and [b.seq for b in got] == list(range(8, 16)) and dropped == 4
    assert beats.since(15) == ([], 15, 0)
    beats.pause()
    clock.ns += 5_000 * MS  # an evaluation
    beats.record(99)
    assert beats.since(15)[0][0].duration_ns == 0  # not a 5 s step


def test_beats_take_any_step_number_and_any_seq_without_raising() -> None:
    """The training loop's side never raises (a NaN, an infinity, a string, a number past
    int64 number the beat by its seq), and a watcher's after_seq may be any uint64."""
    clock = Clock()
    beats = Beats(capacity=8, clock=clock)
    for n in (float("nan"), float("inf"), "abc", 2**63, -(2**63) - 1, True, 7.0, 12):
        clock.ns += 10 * MS
        beats.record(n)  # type: ignore[arg-type]
    got, last, _ = beats.since(0)
    assert [b.step for b in got] == [1, 2, 3, 4, 5, 6, 7, 12] and last == 8
    for after in (2**63, 2**64 - 1):
        assert beats.since(after) == ([], 8, 0)
    for n in (float("nan"), "abc", 2**70):
        podscope_step(n)  # the module's step(), as a loop calls it


def _beats(durations_ms: list[float]) -> list[Beat]:
    out, end = [], T0
    for i, ms in enumerate(durations_ms):
        end += int(ms * MS)
        out.append(Beat(i + 1, i, end, int(ms * MS)))
    return out


def test_rise_fires_only_for_a_sustained_rise_over_the_rolling_median() -> None:
    t = Triggers(rise_pct=30, rise_steps=5, rise_s=0.5, baseline_steps=40, min_baseline=20)
    fired = watch.rise(_beats([100] * 40 + [140] * 5), t)
    assert fired is not None and (fired.baseline_ms, fired.recent_ms) == (100.0, 140.0)
    assert fired.start_ns == T0 + 4000 * MS  # where the first slow step began
    # However long it has gone on: the baseline is what came before the run began.
    later = watch.rise(_beats([100] * 40 + [140] * 300), t)
    assert later is not None and later.start_ns == T0 + 4000 * MS and later.baseline_ms == 100
    # A tenth of the run may be fast (noise); more ends it.
    assert watch.rise(_beats([100] * 40 + ([140] * 9 + [100]) * 3 + [140]), t) is not None
    assert watch.rise(_beats([100] * 40 + [140] * 4 + [100] * 2 + [140] * 4), t) is None
    assert watch.rise(_beats([100] * 40 + [140] * 20 + [100] * 5), t) is None  # over already
    assert watch.rise(_beats([100] * 40 + [125] * 5), t) is None  # under 30 %
    assert watch.rise(_beats([100] * 10 + [200] * 5), t) is None  # no baseline yet
    assert watch.rise(_beats([10] * 40 + [20] * 20), t) is None  # 0.4 s: too short to say
    noisy = [100 + (i % 7) * 5 for i in range(60)]  # ±15 % noise is not a rise
    assert watch.rise(_beats(noisy), t) is None


def test_spread_fires_when_one_worker_drifts_from_the_others() -> None:
    t = Triggers(
        rise_pct=300, rise_steps=5, rise_s=0.5, baseline_steps=30, min_baseline=20, spread_pct=50
    )
    steady = _beats([100] * 35)
    drifting = _beats([100] * 30 + [180] * 5)
    fired = watch.spread({"a": steady, "b": steady, "c": drifting}, t)
    assert fired is not None and fired.workers == ("c",) and fired.recent_ms == 180
    assert watch.spread({"a": steady, "b": steady}, t) is None
    assert watch.spread({"a": steady}, replace_spread(t)) is None


def replace_spread(t: Triggers) -> Triggers:
    return Triggers(**{**t.__dict__, "spread_pct": None})


def options(logdir: Path, **kw: object) -> WatchOptions:
    capture_opts = CaptureOptions(
        logdir=logdir, duration_ms=100, delay_ms=50, retries=0, timeout_s=5.0
    )
    base: dict[str, object] = {
        "every_s": 60.0,
        "keep": 3,
        "poll_s": 0.05,
        "triggers": Triggers(
            rise_pct=30, rise_steps=5, rise_s=0.4, baseline_steps=30, min_baseline=20
        ),
    }
    return WatchOptions(capture_opts, **{**base, **kw})  # type: ignore[arg-type]


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[tuple[list[str], list[Beats], Clock, ExitStack]]:
    clock = Clock()
    beats = [Beats(clock=clock) for _ in range(3)]
    with ExitStack() as stack:
        addresses = [
            stack.enter_context(fake_agent(tmp_path / f"w{i}", index=i, beats=beats[i]))[0]
            for i in range(3)
        ]
        yield addresses, beats, clock, stack


def manifest(logdir: Path, session: str) -> dict:
    return json.loads((layout.session_dir(logdir, session) / "capture.json").read_text())


def test_schedule_trigger_request_and_retention(tmp_path: Path, agents: tuple) -> None:
    addresses, beats, clock, _ = agents
    logdir = tmp_path / "logdir"
    targets = [Target(a, f"w{i}") for i, a in enumerate(addresses)]
    seen = []
    watcher = Watcher(lambda: targets, options(logdir), on_capture=lambda r, w: seen.append(w))
    # A person's own capture in the same logdir: retention never deletes it.
    mine = capture(targets, watcher.opts.capture)
    now = 1000.0
    first = watcher.step(now)  # the schedule's first capture is at once
    assert first is not None and first.trigger.kind == "scheduled"
    assert set(first.statuses.values()) == {"ok"}
    assert watcher.step(now + 1) is None  # nothing due
    # 30 steady steps on every worker, then w2 slows down by 60 % for 5 steps.
    for b in beats:
        run_steps(b, clock, [100] * 31)
    assert watcher.step(now + 2) is None
    onset_ns = T0 + clock.ns
    for i, b in enumerate(beats):
        run_steps(b, clock, [160 if i == 2 else 100] * 5, first=31)
    fired = watcher.step(now + 3)
    assert fired is not None and fired.trigger.kind == "rise"
    assert fired.trigger.workers == ("w2",) and "w2" in fired.trigger.detail
    w = manifest(logdir, fired.session)["watch"]
    assert w["reason"] == "rise" and w["trigger"]["workers"] == ["w2"]
    # The heartbeat window that fired it holds the onset.
    assert w["trigger"]["window_start_ns"] <= onset_ns <= w["trigger"]["window_end_ns"]
    assert len(w["heartbeats"]["w2"]) == 35 and w["heartbeats"]["w2"][-1][3] == 160 * MS
    assert manifest(logdir, fired.session)["label"].startswith("watch: step time +60% on w2")
    # The slow level is the new baseline: no second trigger from the same rise.
    for b in beats:
        run_steps(b, clock, [160] * 5, first=36)
    assert watcher.step(now + 4) is None
    # A request from another process (podscope watch --now).
    watch.request_capture(logdir, "before the data refresh")
    asked = watcher.step(now + 5)
    assert asked is not None and asked.trigger.detail == "requested: before the data refresh"
    # Not at the wall clock's next minute (1020 s): a minute after the first capture. The
    # schedule counted from the epoch, and a dashboard's 10-minute watch took a second
    # scheduled capture seconds after its first, at the next 10-minute mark.
    assert watcher.step(now + 21) is None
    # The schedule: due again a minute after the first capture; keep=3 deletes the oldest.
    due = watcher.step(now + 61)
    assert due is not None and due.trigger.kind == "scheduled"
    assert due.deleted == (first.session,)
    kept = [f.name for _, f, _ in watch.watched_sessions(logdir)]
    assert kept == [fired.session, asked.session, due.session]
    assert layout.session_dir(logdir, mine.session).is_dir()
    assert [c.session for c in seen] == [first.session, fired.session, asked.session, due.session]
    status = watch.read_status(logdir)
    assert status is not None and status["workers"]["w2"]["status"] == "ok"
    assert [c["reason"] for c in status["captures"]] == [
        "scheduled",
        "rise",
        "requested",
        "scheduled",
    ]


def test_retention_by_bytes_keeps_the_newest(tmp_path: Path, agents: tuple) -> None:
    addresses, *_ = agents
    logdir = tmp_path / "logdir"
    w = Watcher(lambda: [Target(a) for a in addresses], options(logdir, keep=100, max_bytes=1))
    for i in range(3):
        w.request(f"n{i}")
        w.step(2000.0 + i)
    assert len(watch.watched_sessions(logdir)) == 1


def test_retention_never_follows_a_link_nor_says_it_deleted_what_it_kept(
    tmp_path: Path,
) -> None:
    """A session folder that is a link (to another user's data, say) is not the watcher's:
    never counted nor deleted; what retention reports deleted is gone."""
    from podscope.trace_parsers import layout

    logdir = tmp_path / "logdir"
    elsewhere = tmp_path / "elsewhere"
    for i, folder in enumerate(
        [elsewhere, *(layout.session_dir(logdir, f"s{i}") for i in range(3))]
    ):
        layout.write_manifest(folder, folder.name, 1000 + i, {}, [], watch={"reason": "scheduled"})
    link = layout.session_dir(logdir, "a_link")
    link.symlink_to(elsewhere)
    for name in ("s0", "a_link", "s1", "s2"):  # as if the watcher had captured each
        watch.record_own(logdir, name)
    assert [f.name for _, f, _ in watch.watched_sessions(logdir)] == ["s0", "s1", "s2"]
    assert watch.retain(logdir, keep=1, max_bytes=None) == ["s0", "s1"]
    assert link.is_symlink() and (elsewhere / "capture.json").exists()
    assert [f.name for _, f, _ in watch.watched_sessions(logdir)] == ["s2"]


def test_retention_deletes_only_the_sessions_its_ledger_names(tmp_path: Path) -> None:
    """A session whose ``capture.json`` says ``watch`` (forged, or another watcher's) but that
    this watcher never captured is never deleted, whatever its start says."""
    from podscope.trace_parsers import layout

    logdir = tmp_path / "logdir"
    for name, start in (("forged", 10**30), ("old_forged", 1), ("mine_a", 10), ("mine_b", 20)):
        folder = layout.session_dir(logdir, name)
        layout.write_manifest(folder, name, start, {}, [], watch={"reason": "scheduled"})
    watch.record_own(logdir, "mine_a")
    watch.record_own(logdir, "mine_b")
    assert watch.retain(logdir, keep=1, max_bytes=None) == ["mine_a"]
    left = sorted(p.name for p in layout.profile_root(logdir).iterdir())
    assert left == ["forged", "mine_b", "old_forged"]
    assert [f.name for _, f, _ in watch.watched_sessions(logdir)] == ["mine_b"]


def test_agents_come_and_go(tmp_path: Path, agents: tuple) -> None:
    addresses, beats, clock, stack = agents
    logdir = tmp_path / "logdir"
    labels = {"w0": addresses[0], "w1": addresses[1], "w2": addresses[2]}
    w = Watcher(lambda: [Target(a, label) for label, a in labels.items()], options(logdir))
    w.step(3000.0)  # the first scheduled capture
    run_steps(beats[0], clock, [100] * 10)
    w.step(3001.0)
    assert [b.step for b in w.workers["w0"].beats] == list(range(1, 10))
    # w1 dies: its heartbeats stop, the next capture gives it a status and keeps the others.
    stack.close()  # every fake agent stops…
    clock2 = Clock()
    fresh = Beats(clock=clock2)
    with ExitStack() as again:  # …w0 and w2 come back (w0 restarted: its count begins anew)
        port = int(labels["w0"].rpartition(":")[2])  # the same address, a new process
        again.enter_context(fake_agent(tmp_path / "w0b", beats=fresh, port=port))
        labels["w2"] = again.enter_context(fake_agent(tmp_path / "w2b", index=2))[0]
        run_steps(fresh, clock2, [100] * 3)
        w.step(3002.0)  # sees the count begin again…
        assert w.workers["w0"].restarts == 1 and w.workers["w0"].status == "restarted"
        w.step(3003.0)  # …and takes the new process's beats
        assert [b.step for b in w.workers["w0"].beats] == [1, 2]
        w.request("after the restart")
        taken = w.step(3004.0)
        assert taken is not None
        assert taken.statuses["w0"] == "ok" and taken.statuses["w2"] == "ok"
        assert taken.statuses["w1"] == "unreachable"
        assert w.workers["w1"].status.startswith("unreachable")
        hb = manifest(logdir, taken.session)["watch"]["heartbeat_status"]
        assert hb["w1"].startswith("unreachable") and hb["w0"] == "ok"


def test_one_watcher_per_logdir(tmp_path: Path) -> None:
    first = Watcher(lambda: [], options(tmp_path / "logdir"))
    first.start()
    try:
        with pytest.raises(WatchError, match="already watched"):
            Watcher(lambda: [], options(tmp_path / "logdir")).start()
    finally:
        first.stop()
    second = Watcher(lambda: [], options(tmp_path / "logdir"))
    second.start()  # free again once the first stopped
    second.stop()


def test_options_are_checked() -> None:
    with pytest.raises(WatchError, match="longer than one capture window"):
        options(Path("x"), every_s=0.05)
    with pytest.raises(WatchError):
        Triggers(rise_pct=0)


def test_keras_callback_and_jax_helper_record_beats() -> None:
    from podscope.collectors import heartbeat

    class Callback:  # stands in for keras.callbacks.Callback (the real one: make verify)
        pass

    _, last, _ = heartbeat.BEATS.since(0)
    cb = heartbeat.keras_callback(Callback)
    for batch in range(3):
        cb.on_train_batch_end(batch)
    cb.on_test_begin()  # evaluation: the next beat has no length
    cb.on_train_batch_end(0)
    cb.on_epoch_end(0, {"loss": 1.0})  # as Keras calls it
    cb.on_train_batch_end(0)
    beats, _, _ = heartbeat.BEATS.since(last)
    assert [b.step for b in beats] == [0, 1, 2, 3, 4]
    assert beats[3].duration_ns == 0 and beats[4].duration_ns == 0
    jnp = pytest.importorskip("jax.numpy")
    heartbeat.jax_step(7, jnp.arange(3) * 2)
    assert heartbeat.BEATS.since(last + 5)[0][0].step == 7


def test_a_hostile_agents_beats_cannot_grow_the_watcher(tmp_path: Path) -> None:
    """Beats dated in ever later minutes were kept for ever (+48 MB a poll): a worker's
    minute log holds ``OPEN_MINUTES`` minutes, each at most ``MINUTE_BEATS`` beats, and the
    rest is written out; beats no step could send are never kept."""
    log = watch._MinuteLog(tmp_path / "heartbeats.csv")
    for minute in range(2000):  # one beat in each of 2,000 future minutes
        log.add("w0", Beat(minute + 1, minute, T0 + minute * 60 * 10**9, 10 * MS))
    for i in range(3 * watch.MINUTE_BEATS):  # one minute flooded
        log.add("w1", Beat(i + 1, i, T0, 1 * MS))
    assert len([k for k in log._open if k[1] == "w0"]) == watch.OPEN_MINUTES
    assert sum(len(b) for k, b in log._open.items() if k[1] == "w1") == watch.MINUTE_BEATS
    rows = (tmp_path / "heartbeats.csv").read_text().splitlines()
    assert len(rows) == 1 + 2000 - watch.OPEN_MINUTES  # the header, the minutes written
    assert not watch._plausible(Beat(5, 5, T0, MS), cursor=5)  # not past the cursor
    assert not watch._plausible(Beat(6, 6, T0, 2 * 86_400 * 10**9), cursor=5)  # a 2-day step
    assert watch._plausible(Beat(6, 6, T0, MS), cursor=5)
