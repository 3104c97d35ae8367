"""Keeps a logdir's history index (``analyzers.history``) current: every session gets its
summary once, in a background thread, newest first, while pages read the index.

    >>> h = Historian(Path("runs/job"))
    >>> h.catch_up()              # queues every session without a summary
    >>> h.add("2026_12_04_09_00_00")   # a watcher's new capture
    >>> h.index.entries(), h.pending

Used by ``podscope watch`` (each new capture) and by the dashboard (the History page).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from podscope.analyzers.execution import ExecConfig, ExecutionError, run_session
from podscope.analyzers.history import checked_summary, summarize
from podscope.analyzers.session import SessionAnalysis
from podscope.collectors.capture import Target
from podscope.collectors.watch import (
    Watcher,
    WatchError,
    WatchOptions,
    read_status,
    request_capture,
    request_stop,
)
from podscope.trace_parsers import TraceParseError, layout, load
from podscope.trace_parsers.loader import resolve, session_folders

log = logging.getLogger("podscope.history")

#: Index file under ``layout.state_dir``; one JSON summary per line, the last line of a
#: session wins (a session analysed again appends).
INDEX_NAME = "history.jsonl"
#: Stale lines (deleted sessions, summaries redone) the index keeps before ``compact``
#: rewrites it.
SLACK = 200


#: What the index reader reads at most: its newest bytes and lines (a thousand sessions' are
#: a few MB), and the longest line it parses (a summary keeps 40 ops: a few KB). A hostile
#: index of 2 M lines took 4.5 s, one of a single 300 MB line 41 s, on every change.
MAX_INDEX_BYTES, MAX_LINES, MAX_LINE_BYTES = 64 << 20, 100_000, 1 << 20


def _tail_lines(path: Path) -> list[bytes]:
    """The last ``MAX_LINES`` whole lines within the last ``MAX_INDEX_BYTES`` of ``path``."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = max(0, size - MAX_INDEX_BYTES)
        f.seek(start)
        lines = f.read(MAX_INDEX_BYTES).split(b"\n")
    if start:
        lines = lines[1:]  # the first is cut
    return [line for line in lines if line.strip()][-MAX_LINES:]


class HistoryIndex:
    """The summaries (``analyzers.history.summarize``) of a logdir's sessions, one JSON line
    each in ``.podscope/history.jsonl``.

    Reading is one file (a thousand sessions: a few MB), never a rescan of the sessions;
    ``compact`` drops the lines of sessions that retention deleted and of summaries redone.
    """

    def __init__(self, logdir: Path) -> None:
        self.logdir = Path(logdir)
        self.path = layout.state_dir(self.logdir) / INDEX_NAME
        self._lock = threading.Lock()
        #: (the file's size and mtime, its latest summaries, its lines): read once per change
        self._cache: tuple[tuple[int, int], list[dict[str, Any]], int] | None = None

    def add(self, entry: Mapping[str, Any]) -> None:
        """Appends one session's summary (a session's last line wins)."""
        line = json.dumps(entry, default=str, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a+b") as f:
                if f.tell():  # a line cut short by a crash ends here, not in this one
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        line = b"\n" + line
                f.write(line)

    def compact(self, sessions: Iterable[str]) -> int:
        """Rewrites the index with one line per session of ``sessions`` (those on disk), when
        at least ``SLACK`` lines are stale; returns the lines dropped."""
        wanted = set(sessions)
        kept = [e for e in self.entries() if e["session"] in wanted]
        with self._lock:
            try:
                st = os.stat(self.path)
            except OSError:
                return 0
            if self._cache is None or self._cache[0] != (st.st_size, st.st_mtime_ns):
                return 0  # a summary was added since: the next catch-up compacts
            lines = self._cache[2]  # what entries() read
            if lines - len(kept) < SLACK:
                return 0
            tmp = self.path.with_suffix(".part")
            tmp.write_text(
                "".join(json.dumps(e, default=str, separators=(",", ":")) + "\n" for e in kept)
            )
            tmp.replace(self.path)
            self._cache = None
        return lines - len(kept)

    def entries(self, sessions: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Every session's latest summary, oldest capture first (only ``sessions``, if given:
        those on disk now)."""
        with self._lock:
            try:
                st = os.stat(self.path)
            except OSError:
                return []
            key = (st.st_size, st.st_mtime_ns)
            if self._cache is None or self._cache[0] != key:
                latest: dict[str, dict[str, Any]] = {}
                lines = _tail_lines(self.path)
                for line in lines:
                    if len(line) > MAX_LINE_BYTES:
                        continue  # no summary is this long
                    try:
                        entry = checked_summary(json.loads(line))
                    except (ValueError, RecursionError):
                        continue  # a line cut short by a crash, or not JSON at all
                    if entry is not None:
                        latest[entry["session"]] = entry
                ordered = sorted(latest.values(), key=lambda e: e["start_unix_s"])
                self._cache = (key, ordered, len(lines))
            found = self._cache[1]
        if sessions is None:
            return list(found)
        wanted = set(sessions)
        return [e for e in found if e["session"] in wanted]


class Historian:
    """Summarizes sessions into the logdir's index, one at a time, in a daemon thread.

    Args:
        logdir: the logdir.
        cache_dir: the parse cache (None: the default).
        on_summary: called with each new summary (in the historian's thread).
    """

    def __init__(
        self,
        logdir: Path,
        cache_dir: Path | None = None,
        on_summary: Any = None,
    ) -> None:
        self.logdir = Path(logdir)
        self.cache_dir = cache_dir
        self.index = HistoryIndex(self.logdir)
        self.on_summary = on_summary or (lambda entry: None)
        self.failures: dict[str, str] = {}
        self._queue: queue.Queue[str] = queue.Queue()
        self._queued: set[str] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        """Sessions queued and not yet summarized."""
        with self._lock:
            return len(self._queued)

    def add(self, session: str) -> None:
        """Queues one session (a new capture) for its summary."""
        with self._lock:
            if session in self._queued:
                return
            self._queued.add(session)
        self._queue.put(session)
        self._ensure_thread()

    def catch_up(self) -> int:
        """Queues every session of the logdir that has no summary yet (newest first); returns
        how many were queued."""
        folders = session_folders(self.logdir)
        self.index.compact(folders)  # retention deleted sessions: their lines go
        known = {e["session"] for e in self.index.entries()}
        missing = sorted(
            (s for s in folders if s not in known and s not in self.failures), reverse=True
        )
        for session in missing:
            self.add(session)
        return len(missing)

    def summarize_now(self, session: str) -> dict[str, Any] | None:
        """Summarizes ``session`` in the calling thread and adds it to the index (None: its
        traces could not be read; ``failures`` says why)."""
        folder = layout.session_dir(self.logdir, session)
        try:
            manifest = layout.read_manifest(folder)
        except layout.LayoutError:
            manifest = None
        try:
            analysis = self._analysis(folder)
            entry = summarize(
                analysis,
                session,
                start_ns=(manifest.start_timestamp_ns if manifest else 0)
                or _named_ns(folder)
                or _trace_ns(analysis, folder),
                label=manifest.label if manifest else "",
                statuses={w.label: w.status for w in manifest.workers} if manifest else {},
                watch=manifest.watch if manifest else None,
            )
        except (TraceParseError, ExecutionError, OSError, ValueError) as e:
            self.failures[session] = str(e)[:300]
            log.warning("history: %s not summarized: %s", session, e)
            return None
        self.index.add(entry)
        self.on_summary(entry)
        return entry

    def _analysis(self, folder: Path) -> SessionAnalysis:
        """The session analysed as the dashboard analyses it, per worker through the derived
        cache (a pod's hosts in batches on a local cluster): what it computes here, a page
        opening the session later reads (it loaded every worker whole: a 512-host session's
        events in this thread)."""
        cache = str(self.cache_dir) if self.cache_dir else None
        run = run_session(
            resolve(folder),
            ExecConfig(cache_dir=cache, fork=False),
            load_events=lambda: load(folder, cache_dir=self.cache_dir),
        )
        return run.analysis

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="podscope-history", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                session = self._queue.get(timeout=5)
            except queue.Empty:
                return  # idle: the next add starts a thread again
            try:
                self.summarize_now(session)
            except Exception:  # one bad session must not stop the others'
                log.exception("history: %s failed", session)
                self.failures[session] = "analysis failed (see the server log)"
            finally:
                with self._lock:
                    self._queued.discard(session)

    def wait(self, timeout_s: float = 600.0) -> bool:
        """Waits until the queue is empty (tests, the CLI at exit); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.pending


def _named_ns(folder: Path) -> int:
    """When a session without a capture start was taken, by its name when it is XProf's
    (``2026_12_01_10_00_00``, UTC); 0 for any other name."""
    try:
        named = datetime.strptime(folder.name[:19], layout.SESSION_FORMAT)
    except ValueError:
        return 0
    return int(named.replace(tzinfo=timezone.utc).timestamp() * 1e9)


#: Unix ns before which a trace's clock is not wall time (a Perfetto boot clock, a Kineto
#: trace's own origin): the year 2001.
WALL_CLOCK_NS = 10**18


def _trace_ns(analysis: SessionAnalysis, folder: Path) -> int:
    """When a session of another name was taken (an upload, a copied run): its trace's own
    start where the trace keeps wall time (XPlane: Unix ns), else its folder's modification
    time. The folders of a logdir copied at once share one mtime: four unrelated sessions sat
    within 8 ms of each other on the History page."""
    start = analysis.start_ns
    return start if start >= WALL_CLOCK_NS else folder.stat().st_mtime_ns


class Watching:
    """The dashboard's watcher of its logdir (the Capture page's Watch mode) and the historian
    that summarizes every capture for the History page. A watcher started elsewhere
    (``podscope watch`` on the same logdir) is shown from its ``watch.json``, and asked to
    capture through its request file."""

    def __init__(self, logdir: Path, cache_dir: Path | None = None) -> None:
        self.logdir = Path(logdir)
        self.historian = Historian(self.logdir, cache_dir)
        self.watcher: Watcher | None = None
        self._lock = threading.Lock()

    def start(self, targets: Callable[[], Sequence[Target]], opts: WatchOptions) -> None:
        """Starts watching (each capture queued for its summary).

        Raises:
            WatchError: this dashboard or another process already watches the logdir.
        """
        with self._lock:
            if self.watcher is not None and self.watcher.running:
                raise WatchError("this dashboard is watching already: stop it first")
            watcher = Watcher(
                targets, opts, lambda result, watched: self.historian.add(result.session)
            )
            watcher.start()
            self.watcher = watcher

    def stop(self, who: str = "") -> str:
        """Stops this dashboard's watcher, or asks another process's (``podscope watch``) to
        stop at its next poll; says which, or "" when no watcher runs on the logdir."""
        with self._lock:
            watcher, self.watcher = self.watcher, None
        if watcher is not None and watcher.running:
            watcher.stop()
            return "this dashboard's watcher"
        status = self.status()
        if status is None or not status["fresh"]:
            return ""
        request_stop(self.logdir, who)
        return f"the watcher of pid {status.get('pid')}"

    def request(self, reason: str) -> str:
        """Asks whichever watcher owns the logdir to capture now; says who was asked."""
        watcher = self.watcher
        if watcher is not None and watcher.running:
            watcher.request(reason)
            return "this dashboard's watcher"
        request_capture(self.logdir, reason)
        return "the watcher of this logdir"

    def status(self) -> dict[str, Any] | None:
        """The owning watcher's ``watch.json`` with ``here`` (this dashboard's) and ``fresh``
        (written in the last minute, or by this dashboard's running watcher); None if no
        watcher ever wrote one."""
        status = read_status(self.logdir)
        if status is None:
            return None
        here = self.watcher is not None and self.watcher.running
        fresh = here or (
            bool(status.get("running")) and time.time() - status.get("updated_unix_s", 0) < 60
        )
        return {**status, "here": here, "fresh": fresh}


_HEARTBEATS: dict[Path, tuple[tuple[int, int], Any]] = {}


def heartbeats_frame(logdir: Path) -> Any:
    """The logdir's ``heartbeats.csv`` as a DataFrame (empty when none), read again only when
    the file changed."""
    import pandas as pd

    from podscope.collectors.watch import HEARTBEAT_COLUMNS, HEARTBEATS_CSV

    path = layout.state_dir(logdir) / HEARTBEATS_CSV
    try:
        st = path.stat()
    except OSError:
        return pd.DataFrame(columns=list(HEARTBEAT_COLUMNS))
    key = (st.st_size, st.st_mtime_ns)
    hit = _HEARTBEATS.get(path)
    if hit is None or hit[0] != key:
        frame = pd.read_csv(path, dtype={"worker": "string"}, on_bad_lines="skip")
        _HEARTBEATS[path] = hit = (key, frame)
    return hit[1]
