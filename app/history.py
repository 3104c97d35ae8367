"""Keeps a logdir's history index (``analyzers.history``) current: every session gets its
summary once, in a background thread, newest first, while pages read the index.

    >>> h = Historian(Path("runs/job"))
    >>> h.catch_up()              # queues every session without a summary
    >>> h.add("2026_12_04_09_00_00")   # a watcher's new capture
    >>> h.index.entries(), h.pending

Used by ``podscope watch`` (each new capture) and by the dashboard (the History page).
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import Any

from podscope.analyzers.history import HistoryIndex, summarize
from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers import TraceParseError, layout, load
from podscope.trace_parsers.loader import session_folders

log = logging.getLogger("podscope.history")


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
        known = {e["session"] for e in self.index.entries()}
        folders = session_folders(self.logdir)
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
            analysis = SessionAnalysis(load(folder, cache_dir=self.cache_dir))
            entry = summarize(analysis, session, manifest)
        except (TraceParseError, OSError, ValueError) as e:
            self.failures[session] = str(e)[:300]
            log.warning("history: %s not summarized: %s", session, e)
            return None
        self.index.add(entry)
        self.on_summary(entry)
        return entry

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
        import time

        deadline = time.monotonic() + timeout_s
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.pending
