"""Watch a long job: capture every worker every N minutes and whenever its step heartbeats say it
slowed down, keeping the last K sessions.

    >>> w = Watcher(lambda: targets, WatchOptions(CaptureOptions(logdir=Path("runs/job")),
    ...                                           every_s=300))
    >>> w.start()            # a thread; w.request("after the data refresh") captures now
    >>> w.stop()

One thread does everything, so two captures never run at once: every ``poll_s`` it asks every
agent for the step heartbeats it has not seen yet (``Steps``: what ``podscope.agent.step(n)``
recorded), checks the triggers (``Triggers``: a worker's step time risen over its rolling
median, the spread across workers grown), and captures when one fires, when the schedule is
due or when a person asks (``request``, or ``podscope watch --now``, which leaves a request
file for the watcher that owns the logdir).

Each capture is an ordinary session (``collectors.capture``) labelled with its reason; its
``capture.json`` also holds ``watch``: the reason, the trigger, and the heartbeat window that
fired it. Targets are asked for again before every poll, so a worker that restarts (its
heartbeat count starts again) or moves (a new address in cluster.json) is followed, and one
that is gone gets its status in the next capture while the others are captured. Retention
deletes the watcher's own sessions, whole and oldest first, beyond ``keep`` or ``max_bytes``;
a session a person captured is never deleted. Heartbeats are kept as one row per worker and
minute in ``<logdir>/.podscope/heartbeats.csv`` (the History page's step time between
captures). Standard library and gRPC only.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import logging
import os
import shutil
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import grpc

from podscope.collectors import heartbeat
from podscope.collectors.capture import (
    CaptureOptions,
    CaptureResult,
    Target,
    capture,
    close_all,
)
from podscope.collectors.errors import CaptureError
from podscope.collectors.export_service import TOKEN_HEADER, grpc_options
from podscope.collectors.heartbeat import Beat
from podscope.collectors.proto import trace_export_pb2 as pb
from podscope.collectors.proto import trace_export_pb2_grpc as pb_grpc
from podscope.trace_parsers import layout

log = logging.getLogger("podscope.watch")

#: Files under ``<logdir>/.podscope`` (``layout.state_dir``).
HEARTBEATS_CSV = "heartbeats.csv"
STATUS_JSON = "watch.json"
REQUEST_FILE = "capture-now"
#: ``request_stop``'s file: whoever asks (a dashboard) stops the watcher of another process.
STOP_FILE = "stop-watching"
#: The sessions the watcher captured, one name a line, oldest first: all retention deletes.
LEDGER = "watched-sessions.txt"
LOCK_FILE = "watch.lock"
HEARTBEAT_COLUMNS = ("minute_unix_s", "worker", "steps", "median_ms", "max_ms", "last_step")
#: Beats kept per worker in memory (the triggers' windows), and written per worker into a
#: capture's ``watch.heartbeats``.
KEPT_BEATS = 512
WINDOW_BEATS = 120
#: After a capture, steps are judged again from this long after it ended (the profiler's
#: session closing and the trace written: measured, the engine's steps went from 13 ms to
#: 170 ms during and just after a capture, which the rise trigger took for a slowdown).
SETTLE_S = 1.0


class WatchError(RuntimeError):
    """The watcher cannot run as asked (another watcher owns the logdir, bad options)."""


@dataclass(frozen=True)
class Triggers:
    """When heartbeats start a capture.

    Attributes:
        rise_pct: a worker's step time is this much above its rolling median…
        rise_steps: …for at least this many steps…
        rise_s: …and this many seconds (the heartbeat window: a few slow steps among fast
            ones are noise, not a slowdown).
        baseline_steps: the rolling median's steps (those before the window).
        min_baseline: steps a worker needs before its rise is judged (after a start, a
            restart or a trigger, the new level becomes the baseline).
        spread_pct: the spread of the workers' recent step times ((slowest − fastest) /
            median) reached this, and at least twice its baseline (None: off). Synchronous
            jobs step together, so it speaks for asynchronous ones (parameter servers).
        cooldown_s: no trigger this long after a triggered capture.
    """

    rise_pct: float = 30.0
    rise_steps: int = 5
    rise_s: float = 2.0
    baseline_steps: int = 100
    min_baseline: int = 20
    spread_pct: float | None = 50.0
    cooldown_s: float = 120.0

    def __post_init__(self) -> None:
        if self.rise_pct <= 0 or self.rise_steps < 1 or self.min_baseline < 2:
            raise WatchError("triggers need rise_pct > 0, rise_steps >= 1, min_baseline >= 2")
        if self.baseline_steps < self.min_baseline:
            raise WatchError("baseline_steps must be at least min_baseline")


@dataclass(frozen=True)
class WatchOptions:
    """How to watch.

    Attributes:
        capture: every capture's options (logdir, window, tokens, tracer levels); the watcher
            sets each session's label, and its name stays the capture time.
        every_s: a scheduled capture this often (None: only triggers and requests).
        keep: the watcher's sessions kept (oldest deleted first).
        max_bytes: and at most this many bytes of them (None: no limit).
        poll_s: how often the heartbeats are read and the triggers checked.
        triggers: None: no triggered captures.
    """

    capture: CaptureOptions
    every_s: float | None = 300.0
    keep: int = 100
    max_bytes: int | None = 10 << 30
    poll_s: float = 2.0
    triggers: Triggers | None = field(default_factory=Triggers)

    def __post_init__(self) -> None:
        if self.every_s is not None and self.every_s * 1000 <= self.capture.duration_ms:
            raise WatchError("every_s must be longer than one capture window")
        if self.keep < 1 or self.poll_s <= 0:
            raise WatchError("keep must be at least 1 and poll_s positive")


@dataclass(frozen=True)
class Trigger:
    """Why a capture was taken.

    Attributes:
        kind: ``scheduled``, ``requested``, ``rise`` (step time rose) or ``spread``.
        workers: the workers whose heartbeats fired it.
        detail: one line for people.
        window_start_ns, window_end_ns: the heartbeat window that fired it (wall clock, ns):
            from the start of its first slow step to the end of its last; the slowdown began
            in it.
        baseline_ms, recent_ms: the rolling median, and the window's median step time.
    """

    kind: str
    workers: tuple[str, ...] = ()
    detail: str = ""
    window_start_ns: int = 0
    window_end_ns: int = 0
    baseline_ms: float = 0.0
    recent_ms: float = 0.0

    @property
    def label(self) -> str:
        """The session's label (``layout.MAX_LABEL`` characters at most)."""
        return f"watch: {self.detail or self.kind}"[: layout.MAX_LABEL]


def _median_ms(beats: Sequence[Beat]) -> float:
    return statistics.median(b.duration_ns for b in beats) / 1e6


def _window(beats: Sequence[Beat]) -> tuple[int, int]:
    return beats[0].end_unix_ns - beats[0].duration_ns, beats[-1].end_unix_ns


class Rise(NamedTuple):
    """A worker's step time rose: the rolling median before, the window's median, and the
    window (wall clock ns: from the start of its first slow step to the end of its last)."""

    baseline_ms: float
    recent_ms: float
    start_ns: int
    end_ns: int


class RiseDetector:
    """One worker's slowdown, judged beat by beat: a run of steps above ``rise_pct`` over the
    median of the ``baseline_steps`` before the run began (frozen then), at least
    ``rise_steps`` steps and ``rise_s`` seconds long. A tenth of the run's steps may be fast
    (noise); a run that ends (more fast steps than that) is forgotten: a slowdown that is over
    by the time the watcher looks is not worth a capture. The run starts with its first slow
    step: where the onset is placed."""

    def __init__(self, t: Triggers) -> None:
        self.t = t
        self._recent: deque[int] = deque(maxlen=t.baseline_steps)  # durations before the run
        self._limit_ns: float | None = None  # the baseline's limit, refreshed every 10 beats
        self._since_limit = 0
        self._run: list[Beat] = []
        self._fast = 0
        self._run_limit_ns = 0.0

    def feed(self, beat: Beat) -> None:
        if self._run:
            if beat.duration_ns >= self._run_limit_ns:
                self._run.append(beat)
                return
            self._fast += 1
            if self._fast <= (len(self._run) + self._fast) // 10:
                self._run.append(beat)
                return
            self._recent.extend(b.duration_ns for b in self._run)  # the run is over
            self._run, self._fast, self._limit_ns = [], 0, None
        limit = self._limit()
        if limit is not None and beat.duration_ns >= limit:
            self._run, self._fast, self._run_limit_ns = [beat], 0, limit
            return
        self._recent.append(beat.duration_ns)
        self._since_limit += 1

    def _limit(self) -> float | None:
        if len(self._recent) < self.t.min_baseline:
            return None
        if self._limit_ns is None or self._since_limit >= 10:
            self._limit_ns = statistics.median(self._recent) * (1 + self.t.rise_pct / 100)
            self._since_limit = 0
        return self._limit_ns

    @property
    def current(self) -> Rise | None:
        """The slowdown going on now, when it is long enough to say so; else None."""
        run = self._run
        if len(run) < self.t.rise_steps or run[-1].duration_ns < self._run_limit_ns:
            return None
        first, last = _window(run)
        if (last - first) / 1e9 < self.t.rise_s:
            return None
        return Rise(
            self._run_limit_ns / 1e6 / (1 + self.t.rise_pct / 100), _median_ms(run), first, last
        )


def rise(beats: Sequence[Beat], t: Triggers) -> Rise | None:
    """``RiseDetector.current`` after ``beats``."""
    detector = RiseDetector(t)
    for beat in beats:
        detector.feed(beat)
    return detector.current


def _recent(beats: Sequence[Beat], t: Triggers) -> Sequence[Beat]:
    """The last ``2 * rise_s`` seconds of beats (at least ``rise_steps``); empty when the
    worker's beats do not span that long yet. Twice the rise's window: a step change is a
    rise, said with the worker's own baseline and onset; the spread is for what drifts."""
    if not beats:
        return []
    span_ns = 2 * t.rise_s * 1e9
    end = beats[-1].end_unix_ns
    i = len(beats) - t.rise_steps
    while i > 0 and end - (beats[i].end_unix_ns - beats[i].duration_ns) < span_ns:
        i -= 1
    window = beats[max(i, 0) :]
    first, last = _window(window)
    return window if last - first >= span_ns and len(window) >= t.rise_steps else []


def spread(histories: dict[str, Sequence[Beat]], t: Triggers) -> Trigger | None:
    """A ``spread`` trigger when the workers' recent medians spread ``spread_pct`` and twice
    as far as their baselines did (at least two workers with a baseline), else None."""
    if t.spread_pct is None:
        return None
    recent_of = {w: _recent(b, t) for w, b in histories.items()}
    ready = {
        w: b
        for w, b in histories.items()
        if len(b) - len(recent_of[w]) >= t.min_baseline and recent_of[w]
    }
    if len(ready) < 2:
        return None
    recent = {w: _median_ms(recent_of[w]) for w in ready}
    base = {
        w: _median_ms(b[-(t.baseline_steps + len(recent_of[w])) : -len(recent_of[w])])
        for w, b in ready.items()
    }

    def width(medians: dict[str, float]) -> float:
        values = list(medians.values())
        return (max(values) - min(values)) / max(statistics.median(values), 1e-9)

    now, before = width(recent), width(base)
    if now * 100 < t.spread_pct or now < 2 * before:
        return None
    slowest = max(recent, key=lambda w: recent[w])
    start, end = _window(recent_of[slowest])
    return Trigger(
        "spread",
        (slowest,),
        f"step-time spread {now:.0%} (was {before:.0%}); slowest {slowest}",
        start,
        end,
        base[slowest],
        recent[slowest],
    )


@dataclass
class WorkerBeats:
    """What the watcher knows of one worker's heartbeats."""

    address: str
    cursor: int = 0
    beats: deque[Beat] = field(default_factory=lambda: deque(maxlen=KEPT_BEATS))
    status: str = "waiting"
    restarts: int = 0
    last_poll_unix_s: float = 0.0
    dropped: int = 0
    detector: RiseDetector | None = None

    def add(self, beat: Beat) -> None:
        self.beats.append(beat)
        if self.detector is not None:
            self.detector.feed(beat)

    def reset(self, triggers: Triggers | None) -> None:
        """Forgets the beats: the next ones are a new baseline (after a capture, a restart)."""
        self.beats.clear()
        self.detector = RiseDetector(triggers) if triggers is not None else None


@dataclass(frozen=True)
class WatchedCapture:
    """One capture the watcher took."""

    session: str
    trigger: Trigger
    started_unix_s: float
    statuses: dict[str, str]
    deleted: tuple[str, ...] = ()
    error: str = ""


class Watcher:
    """Schedules and triggers captures of ``targets()`` (asked for again before every poll).

    Args:
        targets: the workers now (e.g. re-reading a cluster.json).
        opts: the schedule, retention and triggers.
        on_capture: called after each capture, in the watcher's thread (keep it short: queue
            an analysis, don't run it).

    Raises:
        WatchError: another watcher holds the logdir (``start``).
    """

    def __init__(
        self,
        targets: Callable[[], Sequence[Target]],
        opts: WatchOptions,
        on_capture: Callable[[CaptureResult, WatchedCapture], None] | None = None,
    ) -> None:
        self.targets, self.opts = targets, opts
        self.on_capture = on_capture or (lambda result, watched: None)
        self.workers: dict[str, WorkerBeats] = {}
        self.captures: deque[WatchedCapture] = deque(maxlen=100)
        self.started_unix_s = time.time()
        self.next_unix_s = 0.0 if opts.every_s is not None else None  # the first at once
        self.capturing = False
        self._quiet_until = 0.0
        #: beats ending before this (wall ns) are not judged: the watcher's own capture slows
        #: the steps in its window (the profiler starting, tracing, writing the trace)
        self._settled_ns = 0
        self._requests: deque[str] = deque()
        #: The polls' channels, kept from poll to poll on the polls' own event loop (a
        #: ``grpc.aio`` channel lives on the loop it was made on): one thread for every agent.
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._minutes = _MinuteLog(self.state / HEARTBEATS_CSV)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_file: Any = None
        #: who asked this watcher to stop from another process (``request_stop``), if anyone
        self.stopped_by = ""

    @property
    def state(self) -> Path:
        return layout.state_dir(self.opts.capture.logdir)

    # -- control -------------------------------------------------------------------------

    def start(self) -> None:
        """Runs the watcher in a thread of its own until ``stop``."""
        self._own_logdir()
        self._thread = threading.Thread(target=self._run, name="podscope-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stops after the capture in progress, if any; keeps every session."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.close()

    def request(self, reason: str = "") -> None:
        """Captures at the next poll, whatever the schedule and triggers say."""
        self._requests.append(reason)
        self._wake.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _own_logdir(self) -> None:
        """Takes the logdir's watch lock: one watcher per logdir, so captures never overlap."""
        self.state.mkdir(parents=True, exist_ok=True)
        handle = (self.state / LOCK_FILE).open("a+")
        try:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # not POSIX: one watcher per logdir is then the user's to keep
            pass
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise WatchError(
                f"{self.opts.capture.logdir} is already watched ({owner}): one watcher per "
                "logdir, so that two captures never run at once"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        self._lock_file = handle

    def close(self) -> None:
        """Writes the heartbeats of the minute in progress, closes the channels and frees the
        logdir (``stop`` does it; a caller of ``step`` does it at the end)."""
        self._minutes.flush(before=float("inf"))
        if self._loop is not None:
            channels = list(self._channels.values())
            self._loop.run_until_complete(close_all(channels))
            self._loop.close()
            self._loop = None
        self._channels.clear()
        self._write_status()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._stop_asked():
                break
            try:
                self.step()
            except Exception:  # a bug must not end a week-long watch silently
                log.exception("watch step failed; going on")
            self._wake.wait(self.opts.poll_s)
            self._wake.clear()

    def _stop_asked(self) -> bool:
        """Whether another process asked this watcher to stop (``request_stop``): then it
        stops, says who asked in ``stopped_by``, and its status says it is not running."""
        path = self.state / STOP_FILE
        if not path.exists():
            return False
        with contextlib.suppress(OSError):
            self.stopped_by = path.read_text()[: layout.MAX_LABEL].strip() or "another process"
            path.unlink()
        log.warning("watch: stopped, as %s asked", self.stopped_by)
        self._stop.set()
        self._write_status()
        return True

    # -- one poll ------------------------------------------------------------------------

    def step(self, now: float | None = None) -> WatchedCapture | None:
        """One poll: reads the heartbeats, then captures if a request, a trigger or the
        schedule says so. Returns the capture taken, if any."""
        now = time.time() if now is None else now
        targets = list(self.targets())
        self._poll(targets, now)
        trigger = self._due(now)
        watched = self._capture(targets, trigger, now) if trigger is not None else None
        self._write_status()
        return watched

    def _poll(self, targets: Sequence[Target], now: float) -> None:
        """Every agent's new beats, asked for at once on the polls' event loop, each answer
        within 2 s."""
        wanted = {t.worker_label: t.address for t in targets}
        for label in list(self.workers):
            if label not in wanted:
                self.workers[label].status = "gone"
        for label, address in wanted.items():
            state = self.workers.get(label)
            if state is None or state.address != address:
                state = self.workers[label] = WorkerBeats(address)
                state.reset(self.opts.triggers)
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        answers = self._loop.run_until_complete(self._ask(wanted))
        for label, answer in answers.items():
            self._take(self.workers[label], label, answer, now)
        self._minutes.flush(before=now - now % 60)

    async def _ask(self, wanted: dict[str, str]) -> dict[str, object]:
        """Each wanted worker's ``Steps`` answer (or its error), asked for at once."""
        gone = [self._channels.pop(a) for a in list(self._channels) if a not in wanted.values()]
        await close_all(gone)
        metadata = ((TOKEN_HEADER, self.opts.capture.token),) if self.opts.capture.token else ()
        calls = {}
        for label, address in wanted.items():
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = grpc.aio.insecure_channel(
                    address, options=grpc_options()
                )
            request = pb.StepsRequest(after_seq=self.workers[label].cursor)
            calls[label] = pb_grpc.TraceExportStub(channel).Steps(
                request, timeout=2, metadata=metadata
            )
        answers = await asyncio.gather(*calls.values(), return_exceptions=True)
        return dict(zip(calls, answers, strict=True))

    def _take(self, state: WorkerBeats, label: str, answer: object, now: float) -> None:
        if isinstance(answer, BaseException):
            if not isinstance(answer, grpc.RpcError):
                raise answer
            code = answer.code()
            state.status = (
                "no heartbeats (an agent without Steps)"
                if code == grpc.StatusCode.UNIMPLEMENTED
                else f"unreachable ({code.name})"
            )
            return
        response = answer
        assert isinstance(response, pb.StepsResponse)
        state.last_poll_unix_s = now
        if response.last_seq < state.cursor:  # the process restarted: its count began again
            state.restarts += 1
            state.reset(self.opts.triggers)
            state.cursor = 0
            state.status = "restarted"
            return
        state.dropped += response.dropped
        for b in list(response.beats)[-heartbeat.CAPACITY :]:  # what an agent can hold
            beat = Beat(b.seq, b.step, b.end_unix_ns, b.duration_ns)
            if not _plausible(beat, state.cursor):
                continue  # a hostile or broken agent's beat: never kept
            if beat.duration_ns > 0:  # the first beat, or one after a pause, has no length
                self._minutes.add(label, beat)
                if beat.end_unix_ns - beat.duration_ns >= self._settled_ns:
                    state.add(beat)
        state.cursor = response.last_seq
        state.status = "ok" if response.last_seq else "no steps yet"

    def _due(self, now: float) -> Trigger | None:
        """The capture to take now, if any: a request, then a trigger, then the schedule."""
        request = self.state / REQUEST_FILE
        if request.exists():  # ``podscope watch --now`` from another process
            with contextlib.suppress(OSError):
                self._requests.append(request.read_text()[: layout.MAX_LABEL].strip())
                request.unlink()
        if self._requests:
            reason = self._requests.popleft()
            self._requests.clear()
            return Trigger("requested", detail=f"requested: {reason}" if reason else "requested")
        t = self.opts.triggers
        if t is not None and now >= self._quiet_until:
            fired = self._triggered(t)
            if fired is not None:
                self._quiet_until = now + t.cooldown_s
                return fired
        if self.next_unix_s is not None and now >= self.next_unix_s:
            return Trigger("scheduled", detail="scheduled")
        return None

    def _triggered(self, t: Triggers) -> Trigger | None:
        """A rise or spread among the workers answering now (a worker that went away keeps
        its last beats, which say nothing of now)."""
        live = {w: s for w, s in self.workers.items() if s.status == "ok"}
        risen: dict[str, Rise] = {}
        for label, state in live.items():
            found = state.detector.current if state.detector is not None else None
            if found is not None:
                risen[label] = found
        if risen:
            worst = max(risen, key=lambda w: risen[w].recent_ms / risen[w].baseline_ms)
            r = risen[worst]
            where = f"{len(risen)} workers" if len(risen) > 1 else worst  # in step: all of them
            return Trigger(
                "rise",
                tuple(sorted(risen)),
                f"step time +{r.recent_ms / r.baseline_ms - 1:.0%} on {where}",
                min(x.start_ns for x in risen.values()),
                max(x.end_ns for x in risen.values()),
                r.baseline_ms,
                r.recent_ms,
            )
        return spread({w: list(s.beats) for w, s in live.items()}, t)

    # -- one capture ---------------------------------------------------------------------

    def _capture(self, targets: Sequence[Target], trigger: Trigger, now: float) -> WatchedCapture:
        if self.opts.every_s is not None and self.next_unix_s is not None:
            if self.next_unix_s == 0.0:  # the first, taken at once: the schedule counts from it
                self.next_unix_s = now
            while self.next_unix_s <= now:  # the slots this capture covers or that were missed
                self.next_unix_s += self.opts.every_s
        watch = {
            "reason": trigger.kind,
            "trigger": asdict(trigger),
            "watcher_started_unix_s": self.started_unix_s,
            "heartbeats": {
                label: [list(b) for b in list(s.beats)[-WINDOW_BEATS:]]
                for label, s in self.workers.items()
            },
            "heartbeat_status": {label: s.status for label, s in self.workers.items()},
        }
        opts = replace(self.opts.capture, label=trigger.label, session=None)
        self.capturing = True
        self._write_status()
        try:
            result = capture(targets, opts, watch=watch)
        except CaptureError as e:
            watched = WatchedCapture("", trigger, now, {}, error=str(e))
            self.captures.append(watched)
            log.warning("watch: capture not taken: %s", e)
            return watched
        finally:
            self.capturing = False
            # The capture's own steps are no one's slowdown: the baseline starts after it.
            self._settled_ns = time.time_ns() + int(SETTLE_S * 1e9)
            for state in self.workers.values():
                state.reset(self.opts.triggers)
        record_own(self.opts.capture.logdir, result.session)
        deleted = retain(self.opts.capture.logdir, self.opts.keep, self.opts.max_bytes)
        watched = WatchedCapture(
            result.session,
            trigger,
            now,
            {w.label: str(w.status) for w in result.workers},
            tuple(deleted),
        )
        self.captures.append(watched)
        self.on_capture(result, watched)
        return watched

    def _write_status(self) -> None:
        """``watch.json``: what the watcher is doing, for pages in other processes."""
        status = {
            "pid": os.getpid(),
            "running": not self._stop.is_set(),
            "started_unix_s": self.started_unix_s,
            "updated_unix_s": time.time(),
            "every_s": self.opts.every_s,
            "next_unix_s": self.next_unix_s,
            "capturing": self.capturing,
            "duration_ms": self.opts.capture.duration_ms,
            "keep": self.opts.keep,
            "triggers": asdict(self.opts.triggers) if self.opts.triggers else None,
            "workers": {
                label: {
                    "address": s.address,
                    "status": s.status,
                    "restarts": s.restarts,
                    "median_ms": _median_ms(list(s.beats)[-20:]) if s.beats else None,
                    "judged_steps": len(s.beats),
                    "last_step": s.beats[-1].step if s.beats else None,
                }
                for label, s in self.workers.items()
            },
            "captures": [
                {
                    "session": c.session,
                    "reason": c.trigger.kind,
                    "detail": c.trigger.detail,
                    "started_unix_s": c.started_unix_s,
                    "statuses": c.statuses,
                    "error": c.error,
                }
                for c in list(self.captures)[-20:]
            ],
        }
        with contextlib.suppress(OSError):
            self.state.mkdir(parents=True, exist_ok=True)
            _write_json(self.state / STATUS_JSON, status)


def request_capture(logdir: Path, reason: str = "") -> Path:
    """Asks the watcher of ``logdir`` (any process) to capture at its next poll."""
    path = layout.state_dir(logdir) / REQUEST_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(layout.check_label(reason, layout.MAX_LABEL))
    return path


def request_stop(logdir: Path, who: str = "") -> Path:
    """Asks the watcher of ``logdir`` (any process: ``podscope watch``) to stop at its next
    poll; the sessions stay."""
    path = layout.state_dir(logdir) / STOP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(layout.check_label(who, layout.MAX_LABEL))
    return path


def read_status(logdir: Path) -> dict[str, Any] | None:
    """The last ``watch.json`` a watcher of ``logdir`` wrote, or None."""
    try:
        status = json.loads((layout.state_dir(logdir) / STATUS_JSON).read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def _write_json(path: Path, payload: Any) -> None:
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(payload, default=str))
    tmp.replace(path)


def record_own(logdir: Path, session: str) -> None:
    """Adds ``session`` to the watcher's ledger (``LEDGER``): the sessions retention may
    delete, in the order they were captured."""
    path = layout.state_dir(logdir) / LEDGER
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(layout.check_plain_name(session) + "\n")


def _ledger(logdir: Path) -> list[str]:
    try:
        text = (layout.state_dir(logdir) / LEDGER).read_text()
    except OSError:
        return []
    return list(dict.fromkeys(line for line in text.splitlines() if line))


def watched_sessions(logdir: Path) -> list[tuple[int, Path, int]]:
    """The watcher's sessions directly under ``logdir``: (order captured, folder, bytes),
    oldest first. Only those its ledger names: a ``capture.json`` saying ``watch`` is not
    enough (anyone who can write a session folder can write one; a forged one made retention
    delete real watched sessions and keep the forgery), and a link is never one."""
    root = layout.profile_root(logdir)
    found = []
    for order, name in enumerate(_ledger(logdir)):
        try:
            folder = layout.confined(root, name)
        except layout.LayoutError:
            continue
        if not folder.is_dir() or folder.is_symlink():
            continue
        size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
        found.append((order, folder, size))
    return found


def retain(logdir: Path, keep: int, max_bytes: int | None) -> list[str]:
    """Deletes the watcher's oldest sessions (``watched_sessions``), whole, until at most
    ``keep`` are left and they hold at most ``max_bytes`` (the newest is always kept); the
    ledger then names the sessions that are left. Returns the deleted names."""
    sessions = watched_sessions(logdir)
    total = sum(size for _, _, size in sessions)
    deleted = []
    while len(sessions) > 1 and (
        len(sessions) > keep or (max_bytes is not None and total > max_bytes)
    ):
        _, folder, size = sessions.pop(0)
        shutil.rmtree(folder, ignore_errors=True)
        total -= size
        if folder.exists() or folder.is_symlink():  # said only of what is really gone
            log.warning("watch: retention could not delete session %s", folder.name)
            continue
        deleted.append(folder.name)
    if deleted:
        path = layout.state_dir(logdir) / LEDGER
        tmp = path.with_suffix(".part")
        tmp.write_text("".join(f"{f.name}\n" for _, f, _ in sessions))
        tmp.replace(path)
        log.info("watch: retention deleted %d session(s): %s", len(deleted), ", ".join(deleted))
    return deleted


#: The longest step a beat may say (a day), and what the minute log holds at most per worker:
#: open minutes, and beats a minute (their median is the minute's). Beats dated in future
#: minutes were kept for ever: +48 MB a poll from a hostile agent.
MAX_STEP_S, OPEN_MINUTES, MINUTE_BEATS = 86_400.0, 3, 10_000


def _plausible(beat: Beat, cursor: int) -> bool:
    """Whether ``beat`` is one a training process could have sent in this poll: past the
    cursor, of a length a step can have."""
    return beat.seq > cursor and 0 <= beat.duration_ns <= MAX_STEP_S * 1e9


class _MinuteLog:
    """Heartbeats summed per worker and minute, appended to a CSV once the minute is over."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._open: dict[tuple[float, str], list[Beat]] = {}

    def add(self, worker: str, beat: Beat) -> None:
        end_s = beat.end_unix_ns / 1e9
        key = (end_s - end_s % 60, worker)
        beats = self._open.get(key)
        if beats is None:
            mine = sorted(k for k in self._open if k[1] == worker)
            if len(mine) >= OPEN_MINUTES:  # written now: a worker holds a few minutes at most
                self._write(mine[: len(mine) - OPEN_MINUTES + 1])
            beats = self._open[key] = []
        if len(beats) < MINUTE_BEATS:
            beats.append(beat)

    def flush(self, before: float) -> None:
        self._write(sorted(k for k in self._open if k[0] < before))

    def _write(self, done: list[tuple[float, str]]) -> None:
        if not done:
            return
        rows = []
        for key in done:
            beats = self._open.pop(key)
            ms = [b.duration_ns / 1e6 for b in beats]
            rows.append(
                (
                    int(key[0]),
                    key[1],
                    len(ms),
                    round(statistics.median(ms), 3),
                    round(max(ms), 3),
                    beats[-1].step,
                )
            )
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists()
            with self.path.open("a", newline="") as f:
                out = csv.writer(f)
                if new:
                    out.writerow(HEARTBEAT_COLUMNS)
                out.writerows(rows)


def read_heartbeats(logdir: Path) -> Iterator[dict[str, str]]:
    """The rows of ``heartbeats.csv`` (``HEARTBEAT_COLUMNS``, as strings)."""
    path = layout.state_dir(logdir) / HEARTBEATS_CSV
    if not path.exists():
        return
    with path.open(newline="") as f:
        yield from csv.DictReader(f)
