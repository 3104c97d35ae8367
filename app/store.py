"""Server-side store of parsed sessions and their analyses (never sent to the browser).

Sessions are named by their folder under ``<logdir>/plugins/profile``; any name that would
leave that folder (``..``, separators, absolute paths) is refused. Parsed frames and derived
analyses are kept in a bounded LRU keyed by (session, files' sizes and mtimes, parser
version), so a re-captured or replaced session is parsed again, and memory stays bounded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from analyzers.diagnostics import Finding, Inputs, diagnose
from analyzers.ops import memory_timeline, op_stats
from app.figures.timeline import TimelineIndex
from trace_parsers import TraceFrames, TraceParseError, load, sessions
from trace_parsers.loader import PROFILE_SUBDIR, trace_files
from trace_parsers.schema import PARSER_VERSION


class SessionError(Exception):
    """A session name that is not allowed or does not exist."""


class Analysis(Inputs):
    """One parsed session: the diagnostics' inputs (steps, breakdown, pod view, ops, all
    computed on first use) plus what the pages need on top (timeline index, memory, op
    tables per view, findings)."""

    def __init__(self, frames: TraceFrames) -> None:
        super().__init__(frames)
        self._op_tables: dict[tuple[str, str | None], pd.DataFrame] = {}

    @cached_property
    def timeline(self) -> TimelineIndex:
        return TimelineIndex.build(self.frames.events)

    @cached_property
    def memory(self) -> pd.DataFrame:
        return memory_timeline(self.frames.events, self.frames.stats)

    @cached_property
    def findings(self) -> list[Finding]:
        return diagnose(self)

    def op_table_for(self, by: str, worker: str | None) -> pd.DataFrame:
        """``analyzers.ops.op_stats`` for (by, worker), computed once."""
        key = (by, worker)
        if key not in self._op_tables:
            self._op_tables[key] = op_stats(
                self.frames.events, by=by, worker=worker, stats=self.frames.stats
            )
        return self._op_tables[key]


@dataclass
class SessionStore:
    logdir: Path
    cache_dir: Path | None = None
    capacity: int = 4
    _items: OrderedDict[tuple[object, ...], Analysis] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def root(self) -> Path:
        return self.logdir / PROFILE_SUBDIR

    def names(self) -> list[str]:
        """Session names, newest first."""
        return sorted(sessions(self.logdir), reverse=True)

    def path(self, session: str) -> Path:
        """The session's folder.

        Raises:
            SessionError: the name leaves the logdir, or no such session.
        """
        if (
            not session
            or session in (".", "..")
            or "/" in session
            or "\\" in session
            or "\x00" in session
        ):
            raise SessionError(f"not a session name: {session!r}")
        root = self.root.resolve()
        path = (root / session).resolve()
        if path.parent != root:
            raise SessionError(f"session {session!r} is outside the logdir")
        if not path.is_dir() or not trace_files(path):
            raise SessionError(f"no session {session!r} in {self.logdir}")
        return path

    def get(self, session: str) -> Analysis:
        """The parsed session (from memory, the disk cache, or parsed now).

        Raises:
            SessionError: bad or unknown session name.
            TraceParseError: no file of the session could be parsed.
        """
        path = self.path(session)
        key = (
            session,
            PARSER_VERSION,
            tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in trace_files(path)),
        )
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        analysis = Analysis(load(path, cache=True, cache_dir=self.cache_dir))
        with self._lock:
            self._items[key] = analysis
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return analysis


__all__ = ["Analysis", "SessionError", "SessionStore", "TraceParseError"]
