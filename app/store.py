"""The sessions of one logdir, for the dashboard: listing, import of uploads, and their analyses
kept server-side (never sent to the browser).

Sessions are found in every run under the logdir, at any depth, as TensorBoard finds runs, and
named by their run path and folder (``train/2026_…``; ``trace_parsers.layout.split_session``);
any name that would leave the logdir (``..``, absolute paths, symlinks out) is refused. Analyses
(``analyzers.session.SessionAnalysis``) are kept in a bounded LRU keyed by (session, files'
sizes and mtimes, parser version), so a re-captured or replaced session is parsed again, and
memory stays bounded.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path

from podscope.analyzers.execution import (
    ExecConfig,
    ExecutionError,
    SessionRun,
    WorkerPart,
    run_session,
)
from podscope.analyzers.session import SessionAnalysis
from podscope.app.uploads import UploadBudget, Verdict, read_uploads
from podscope.trace_parsers import TraceParseError, layout, load
from podscope.trace_parsers.hlo_graph import modules_in
from podscope.trace_parsers.hlo_memory import MemoryViews, memory_views_of
from podscope.trace_parsers.hlo_module import Module
from podscope.trace_parsers.loader import (
    PARSERS,
    scan,
    session_folders,
    trace_files,
    worker_label,
)
from podscope.trace_parsers.schema import SCHEMA_VERSION

#: Characters an uploaded file name may keep; others become ``_``.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


class SessionError(Exception):
    """A session name that is not allowed or does not exist."""


@dataclass(frozen=True)
class SessionSummary:
    """One session as the Sessions page lists it.

    Attributes:
        name: the session id (``layout.split_session``: ``run/folder`` or ``folder``).
        workers: capture files in it.
        bytes: their total size.
        modified: the newest file's mtime (epoch seconds).
        manifest: its ``capture.json``, None when it has none (an upload).
        manifest_error: why ``capture.json`` could not be read, else "".
        kind: ``xplane`` (a TensorFlow or JAX profiler capture) or ``android`` (systrace,
            Perfetto, Chrome JSON), from its files' names: what Compare pairs it with.
    """

    @property
    def run(self) -> str:
        """The run path (``""``: the logdir itself)."""
        return self.name.rpartition("/")[0]

    @property
    def label(self) -> str:
        return self.manifest.label if self.manifest else ""

    @property
    def note(self) -> str:
        return self.manifest.note if self.manifest else ""

    name: str
    workers: int
    bytes: int
    modified: float
    manifest: layout.CaptureManifest | None
    manifest_error: str = ""
    kind: str = "xplane"


@dataclass(frozen=True)
class ImportResult:
    """What an upload became: the session, the workers saved, and per-file errors."""

    session: str
    saved: tuple[str, ...]
    errors: tuple[str, ...]


class Cancelled(Exception):
    """A session's analysis was cancelled from the page."""


@dataclass
class Job:
    """One big session being analysed per worker in the background (``analyzers.execution``).

    Attributes:
        session: the session.
        total: worker files.
        done: files analysed so far.
        where: where the tasks run (``2 processes from a fork server``,
            ``LocalCluster(2 processes)``, a scheduler address).
        error: why it failed (None while running or after success).
        finished: set once it ended (success, failure or cancel).
        head_first: the Pod Viewer's part is computed first (``run_session``'s ``first``):
            a job the Pod Viewer started.
        head_ready: set once that part is in (the Pod Viewer shows it; ``done`` then counts
            the rest from 0).
    """

    session: str
    total: int
    done: int = 0
    where: str = ""
    error: str | None = None
    finished: threading.Event = field(default_factory=threading.Event)
    cancel_requested: threading.Event = field(default_factory=threading.Event)
    head_first: bool = False
    head_ready: threading.Event = field(default_factory=threading.Event)

    def progress(self, done: int, total: int) -> None:
        """The runner's progress callback; raises ``Cancelled`` once cancel was asked for."""
        self.done = done
        if self.cancel_requested.is_set():
            raise Cancelled(f"analysis of {self.session} cancelled")


class SessionPreparing(Exception):
    """The session is big and is being analysed in the background: show ``job``'s progress."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"session {job.session}: {job.done}/{job.total} workers analysed")
        self.job = job


#: Uploaded file names are cut to their last characters (a file name has at most 255 bytes).
MAX_UPLOAD_NAME = 120


@dataclass
class SessionStore:
    """Args:
    logdir: the logdir whose sessions are listed.
    cache_dir: parse cache (None: ``trace_parsers``' default).
    capacity: analyses kept in memory.
    execution: where big sessions' per-worker tasks run; sessions of fewer than its
        ``in_process_below`` files (and no scheduler) are loaded whole in the request.
    uploads: what the uploads being read at once may use (``app.uploads``); one past its
        ``at_once`` is told to send again, its request thread freed at once (eight uploads
        read at once timed out /healthz and /login for everyone).
    """

    logdir: Path
    cache_dir: Path | None = None
    capacity: int = 4
    execution: ExecConfig = field(default_factory=lambda: ExecConfig(fork=False))
    uploads: UploadBudget = field(default_factory=UploadBudget)
    _items: OrderedDict[tuple[object, ...], SessionAnalysis] = field(default_factory=OrderedDict)
    _jobs: dict[tuple[object, ...], Job] = field(default_factory=dict)
    #: The Pod Viewer's part of a session whose job computes the rest (``Job.head_first``).
    _heads: dict[tuple[object, ...], SessionAnalysis] = field(default_factory=dict)
    _failures: dict[tuple[object, ...], tuple[str, ...]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: Sessions being loaded in the request threads: a second request (or a page's prefetch,
    #: ``app.main``) for one waits for the first instead of loading it again.
    _loading: dict[tuple[object, ...], Future[SessionAnalysis]] = field(default_factory=dict)
    #: The listing index: per session, its folder's mtime and its summary (``_summary``).
    _listing: dict[str, tuple[int, SessionSummary]] = field(default_factory=dict)
    #: Uploads being read now (``import_files``), at most ``uploads.at_once``.
    _reading: threading.BoundedSemaphore = field(init=False)

    def __post_init__(self) -> None:
        self._reading = threading.BoundedSemaphore(self.uploads.at_once)

    def _folders(self) -> dict[str, Path]:
        return session_folders(self.logdir)

    def names(self) -> list[str]:
        """Session ids of every run at any depth (``train/2026_…``; TensorBoard's runs), newest
        first: by their newest trace file's modification time (a name says nothing:
        ``upload_…`` sorts after every ``2026_…`` capture), then id."""
        return [s.name for s in self.summaries()]

    def _summary(self, name: str, folder: Path) -> SessionSummary:
        """The session's summary, from the listing index while its folder is unchanged (a
        file added, removed or renamed, ``capture.json`` rewritten: the folder's mtime moves).
        A thousand sessions are one ``stat`` each, not a listing, stats and a manifest each."""
        try:
            key = os.stat(folder).st_mtime_ns
        except OSError:
            key = -1
        with self._lock:
            hit = self._listing.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        files = trace_files(folder)
        stats = [f.stat() for f in files]
        try:
            manifest, error = layout.read_manifest(folder), ""
        except layout.LayoutError as e:
            manifest, error = None, str(e)
        summary = SessionSummary(
            name=name,
            workers=len(files),
            bytes=sum(s.st_size for s in stats),
            modified=max((s.st_mtime for s in stats), default=0.0),
            manifest=manifest,
            manifest_error=error,
            kind="xplane"
            if any(f.name.endswith(PARSERS["xplane"].suffixes) for f in files)
            else "android",
        )
        with self._lock:
            self._listing[name] = (key, summary)
        return summary

    def path(self, session: str) -> Path:
        """The session's folder.

        Raises:
            SessionError: the id is not a session id, leaves the logdir, or no such session.
        """
        try:
            run, name = layout.split_session(session)
        except layout.LayoutError:
            raise SessionError(f"not a session name: {str(session)[:80]!r}") from None
        try:
            path = layout.confined(self.logdir, *run, *layout.PROFILE_SUBDIR.parts, name)
        except layout.LayoutError:  # a symlink that leads out
            raise SessionError(f"session {session!r} is outside the logdir") from None
        if not path.is_dir() or not trace_files(path):
            raise SessionError(f"no session {session!r} in {self.logdir}")
        return path

    def summaries(self) -> list[SessionSummary]:
        """Every session, newest first (``names``), with its files and capture manifest."""
        folders = self._folders()
        found = [self._summary(name, folder) for name, folder in folders.items()]
        with self._lock:  # sessions gone from disk leave the index
            for gone in set(self._listing) - set(folders):
                del self._listing[gone]
        return sorted(found, key=lambda s: (s.modified, s.name), reverse=True)

    def describe(self, session: str, label: str, note: str) -> None:
        """Sets the session's label and note (in its ``capture.json``).

        Raises:
            SessionError: unknown session, or the label/note/manifest is refused (says why).
        """
        try:
            layout.describe_session(self.path(session), label, note)
        except (layout.LayoutError, OSError) as e:
            raise SessionError(f"session {session}: {e}") from None

    def _key(self, session: str) -> tuple[Path, tuple[object, ...], list[Path]]:
        """The session's folder, the key of its analysis (its files as they are now), and
        those files.

        Raises:
            SessionError: a bad or unknown name, or a session a newer PodScope wrote.
        """
        path = self.path(session)
        try:
            layout.check_manifest_version(path)  # a newer PodScope's session: its fields may
        except layout.NewerLayout as e:  # mean what this one cannot know
            raise SessionError(f"session {session}: {e}") from None
        files = trace_files(path)
        stats = [(f.name, f.stat()) for f in files]
        named = tuple((name, st.st_size, st.st_mtime_ns) for name, st in stats)
        return path, (session, SCHEMA_VERSION, named), files

    def loads_here(self, session: str) -> bool:
        """Whether ``get`` answers from memory or loads the session in the calling thread,
        rather than starting a background job or reporting how the last one ended (once, to
        whoever asks next): what a page's prefetch (``app.main``) may do ahead of the page."""
        try:
            _, key, files = self._key(session)
        except (SessionError, OSError):
            return False
        with self._lock:
            if key in self._items:
                return True
        return self._in_request(files)

    def any_in_background(self) -> bool:
        """Whether some session of the logdir is analysed by a background job (``_job``)."""
        return any(not self._in_request(trace_files(f)) for f in self._folders().values())

    def _in_request(self, files: Sequence[Path]) -> bool:
        """Whether a session of ``files`` is loaded in the request, not by a background job."""
        return self.execution.scheduler is None and len(files) < self.execution.in_process_below

    def get(self, session: str, head: bool = False) -> SessionAnalysis:
        """The session's analysis (from memory, the disk cache, or parsed now); with ``head``
        (the Pod Viewer), a big session's first part, while its job computes the rest
        (``analyzers.execution.HEAD_PARTS``): a job started here computes that part first.

        Raises:
            SessionError: bad or unknown session name.
            TraceParseError: no file of the session could be parsed.
        """
        path, key, files = self._key(session)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
            if head and key in self._heads:
                return self._heads[key]
            loading = self._loading.get(key)
            if loading is None:
                mine = self._loading[key] = Future()
        if loading is not None:
            return loading.result()  # the same analysis, or the same error
        try:
            if not self._in_request(files):
                raise SessionPreparing(self._job(key, session, path, files, head))
            analysis = self._in_process(key, path, files)
            self._keep(key, analysis)
            mine.set_result(analysis)
            return analysis
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                del self._loading[key]

    def _in_process(
        self, key: tuple[object, ...], path: Path, files: list[Path]
    ) -> SessionAnalysis:
        """A small session, analysed in this thread, per worker through the derived-frame
        cache (``analyzers.execution``): after a restart its pages read
        what was computed, instead of computing it again per page (the Pod Viewer's first
        load on a 1.2 M-event worker: 2.4 s, then 0.3 s); the timeline and event details read
        the worker's events when asked."""
        cache_dir = str(self.cache_dir) if self.cache_dir else None
        config = replace(self.execution, cache_dir=cache_dir, fork=False)
        run = run_session(
            files, config, load_events=lambda: load(path, cache=True, cache_dir=self.cache_dir)
        )
        with self._lock:
            self._failures[key] = _failures(path, run.failures)
        return run.analysis

    def _keep(self, key: tuple[object, ...], analysis: SessionAnalysis) -> None:
        with self._lock:
            self._items[key] = analysis
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def _job(
        self,
        key: tuple[object, ...],
        session: str,
        path: Path,
        files: list[Path],
        head_first: bool = False,
    ) -> Job:
        """The running job of this session, started if there is none (a failed or cancelled
        one is reported once, then a new visit starts again).

        Raises:
            SessionError: the last job of this session failed or was cancelled.
        """
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and job.finished.is_set():
                del self._jobs[key]
                raise SessionError(f"session {session}: {job.error} (open the page again to retry)")
            return job or self._new_job(key, session, path, files, head_first)

    def _new_job(
        self,
        key: tuple[object, ...],
        session: str,
        path: Path,
        files: list[Path],
        head_first: bool = False,
    ) -> Job:
        """Starts the session's job (called holding ``_lock``)."""
        job = self._jobs[key] = Job(session, len(files), head_first=head_first)
        threading.Thread(target=self._run, args=(key, job, path, files), daemon=True).start()
        return job

    def start(self, session: str, head_first: bool = False) -> None:
        """Starts a big session's background analysis, unless it is in memory or a job of it
        runs or has ended unreported: what a page's prefetch (``app.main``) does when the
        browser asks for the page, so that the analysis runs while the browser loads the page's
        scripts (1-1.5 s). The page then shows its progress, or how it ended, as if the page
        had started it (``head_first``: the Pod Viewer, see ``get``). A small, unknown or bad
        session is left to the page."""
        try:
            path, key, files = self._key(session)
        except (SessionError, OSError):
            return
        if self._in_request(files):
            return
        with self._lock:
            if key not in self._items and key not in self._jobs:
                self._new_job(key, session, path, files, head_first)

    def _run(self, key: tuple[object, ...], job: Job, path: Path, files: list[Path]) -> None:
        config = replace(self.execution, cache_dir=str(self.cache_dir) if self.cache_dir else None)
        try:
            run = run_session(
                files,
                config,
                progress=job.progress,
                load_events=lambda: load(path, cache=True, cache_dir=self.cache_dir),
                on_start=lambda where: setattr(job, "where", where),
                first=(lambda head: self._head(key, job, path, head)) if job.head_first else None,
            )
        except (Cancelled, ExecutionError, TraceParseError) as e:
            self._end(key, job, f"{e}")
            return
        except Exception as e:  # the thread's edge: any failure must reach the page, not vanish
            self._end(key, job, f"{type(e).__name__}: {e}")
            return
        _warm_pod_view(run.analysis)
        self._keep(key, run.analysis)
        with self._lock:
            self._jobs.pop(key, None)
            self._failures[key] = _failures(path, run.failures)
        self._end(key, job)

    def _head(self, key: tuple[object, ...], job: Job, path: Path, head: SessionRun) -> None:
        """The Pod Viewer's part of ``job`` is in: shown while the rest is computed."""
        with self._lock:
            self._heads[key] = head.analysis
            self._failures[key] = _failures(path, head.failures)
        job.done = 0
        job.head_ready.set()

    def _end(self, key: tuple[object, ...], job: Job, error: str | None = None) -> None:
        with self._lock:
            self._heads.pop(key, None)
        job.error = error
        job.finished.set()

    def job(self, session: str) -> Job | None:
        """The session's running (or just finished) background analysis, if any."""
        with self._lock:
            return next((j for k, j in self._jobs.items() if k[0] == session), None)

    def cancel(self, session: str) -> None:
        """Asks the session's running analysis to stop (after the tasks already running)."""
        with self._lock:
            for key, job in self._jobs.items():
                if key[0] == session:
                    job.cancel_requested.set()

    def cancel_all(self) -> None:
        """Asks every running analysis to stop (the server's exit)."""
        with self._lock:
            for job in self._jobs.values():
                job.cancel_requested.set()

    def memory(self, session: str, worker: str | None = None) -> MemoryViews:
        """XProf's memory viewer of the XLA programs in one worker's file (``worker``, else
        the session's first): read once per version of that file (a few kept).

        Raises:
            SessionError: a bad or unknown session.
            TraceParseError: the file is unreadable or its programs corrupt.
        """
        return _memory_views(*self._worker_file(session, worker))

    def modules(self, session: str, worker: str | None = None) -> dict[int, Module]:
        """The XLA programs (by program id) in one worker's file (``worker``, else the
        session's first), decoded once per version of that file (a few kept).

        Raises:
            SessionError: a bad or unknown session.
            TraceParseError: the file is unreadable or its programs corrupt.
        """
        return _modules(*self._worker_file(session, worker))

    def _worker_file(self, session: str, worker: str | None) -> tuple[str, int, int]:
        """The worker's file (else the session's first) and its version: size, mtime."""
        _, _, files = self._key(session)
        chosen = [f for f in files if worker_label(f) == worker] or files[:1]
        st = chosen[0].stat()
        return str(chosen[0]), st.st_size, st.st_mtime_ns

    def failures(self, session: str) -> tuple[str, ...]:
        """Files of the session's last analysis that were not read (``trace_parsers.scan``:
        links out, FIFOs, files past the limit…) or could not be parsed."""
        with self._lock:
            return next((f for k, f in self._failures.items() if k[0] == session), ())

    def import_files(self, files: Sequence[tuple[str, bytes]]) -> ImportResult:
        """Validates each uploaded file by parsing it, in a process of its own within the
        ``uploads`` budget (``app.uploads``); the good ones become a new session
        (``upload_<time>``, never one that exists: two uploads in one second get two), each
        saved under a safe name with its format's suffix (two files of one name both kept).
        The session appears whole or not at all: files are written to a hidden folder that
        is then renamed into place.

        Args:
            files: (file name as uploaded, its bytes).

        Returns:
            The session and the workers saved, and one "name: reason" per rejected file.

        Raises:
            SessionError: the logdir cannot be written (says what to change), or
                ``uploads.at_once`` uploads are being read already.
        """
        if not self._reading.acquire(blocking=False):
            raise SessionError(
                f"{self.uploads.at_once} uploads are being read now: send this one again in a "
                "moment"
            )
        try:
            return self._import(files)
        finally:
            self._reading.release()

    def _import(self, files: Sequence[tuple[str, bytes]]) -> ImportResult:
        """Writes the files to a hidden staging folder (``.<session>.partial``), has them read
        there (``read_uploads``), names the good ones by their format and renames the folder
        into place; the refused ones are deleted."""
        if not files:
            return ImportResult("", (), ())
        tmp: Path | None = None
        try:
            folder = layout.new_session_dir(self.logdir, prefix="upload_")  # reserved, empty
            tmp = folder.with_name(f".{folder.name}.partial")
            tmp.mkdir()
            staged = []
            for i, (name, data) in enumerate(files):
                (tmp / f"{i}").write_bytes(data)
                staged.append((f"{i}", name))
            verdicts = read_uploads(tmp, staged, self.uploads)
            kept, errors = self._name_files(tmp, files, verdicts)
            if not kept:
                shutil.rmtree(tmp)
                folder.rmdir()
                return ImportResult("", (), tuple(errors))
            tmp.replace(folder)  # onto the empty reserved folder: the session appears whole
        except (OSError, layout.LayoutError) as e:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise SessionError(_unwritable(self.logdir, e)) from None
        saved = tuple(worker_label(Path(safe)) for safe in kept)
        return ImportResult(folder.name, saved, tuple(errors))

    @staticmethod
    def _name_files(
        tmp: Path, files: Sequence[tuple[str, bytes]], verdicts: Sequence[Verdict]
    ) -> tuple[list[str], list[str]]:
        """Renames each good staged file to a safe name with its format's suffix (two files
        of one name both kept), deletes the refused ones; (names kept, "name: reason"s)."""
        kept: list[str] = []
        errors = []
        for (name, _), verdict in zip(files, verdicts, strict=True):
            staged = tmp / verdict.name
            if not verdict.suffixes:
                staged.unlink()
                errors.append(f"{name[:120]}: {verdict.reason}")
                continue
            safe = _UNSAFE.sub("_", Path(name).name)[-MAX_UPLOAD_NAME:] or "trace"
            if safe.lower() in RESERVED_NAMES:  # a manifest comes from a capture, never a viewer
                safe = f"upload_{safe}"
            if not safe.endswith(verdict.suffixes):  # findable as a capture file of its format
                safe += verdict.suffixes[0]
            suffix = next(x for x in verdict.suffixes if safe.endswith(x))
            safe = _distinct(safe, suffix, set(kept))
            staged.rename(tmp / safe)
            kept.append(safe)
        return kept, errors


#: Names a session folder gives meaning to (its capture manifest, an engine cluster's): an
#: upload of that name is saved under another, so it never becomes one. A viewer's
#: ``capture.json`` with forged ``watch`` and start fields made retention delete real watched
#: sessions and /history fail for everyone; a ``cluster.json`` sent the agents' token elsewhere.
RESERVED_NAMES = (layout.MANIFEST_NAME, "cluster.json")


@functools.lru_cache(maxsize=8)
def _memory_views(file: str, _size: int, _mtime_ns: int) -> MemoryViews:
    """``memory_views_of`` a file, keyed by its version (a rewritten file is read again)."""
    return memory_views_of(file)


@functools.lru_cache(maxsize=8)
def _modules(file: str, _size: int, _mtime_ns: int) -> dict[int, Module]:
    """``modules_in`` a file, keyed by its version."""
    return modules_in(file)


def _unwritable(logdir: Path, e: Exception) -> str:
    """What to change when the logdir cannot take an upload."""
    why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    uid = os.getuid() if hasattr(os, "getuid") else None
    who = f"uid {uid}" if uid is not None else "this server's user"
    return (
        f"The upload was not saved: {logdir} cannot be written ({why}). It must be writable "
        f"by {who}, the user this server runs as: make the folder writable by {who}, or run "
        "the server as the folder's owner (in Docker, `--user $(id -u):$(id -g)` for a bind "
        "mount of your folder, or a named volume)."
    )


def _failures(folder: Path, parts: Sequence[WorkerPart]) -> tuple[str, ...]:
    """What a session's page lists as not shown: the folder's refused files, the workers that
    failed to parse."""
    refused = [f"{Path(str(e.path)).name}: {e.reason}" for e in scan(folder).refused]
    return (*refused, *(f"{p.worker}: {p.error}" for p in parts))


def _distinct(name: str, suffix: str, taken: set[str]) -> str:
    """``name``, or ``<stem>_2<suffix>``, ``_3``… when an earlier file of the upload has it."""
    stem, n, candidate = name.removesuffix(suffix), 1, name
    while candidate in taken:
        n += 1
        candidate = f"{stem}_{n}{suffix}"
    return candidate


#: What the Pod Viewer's every view reads of an analysis, each computed once and kept on it.
POD_VIEW_FRAMES = ("pod", "pod_summary", "mean_step_rows", "outliers", "step_time_text")


def _warm_pod_view(analysis: SessionAnalysis) -> None:
    """Computes ``POD_VIEW_FRAMES`` of a session analysed in the background, in its job's
    thread before the pages may read it: the first Pod Viewer view after the whole analysis
    came in (the first open drew the Pod Viewer's part) computed them in the request, 0.22 s
    of its 0.25 s at 1,024 hosts × 8 GPUs. Diagnostics' own frames are left to its request. A
    frame that fails here fails again in the page, which says why: nothing is lost by passing
    over it."""
    for name in POD_VIEW_FRAMES:
        try:
            getattr(analysis, name)
        except Exception:  # the page computes it again and reports why
            continue


__all__ = [
    "Cancelled",
    "ImportResult",
    "Job",
    "SessionError",
    "SessionPreparing",
    "SessionStore",
    "SessionSummary",
    "TraceParseError",
]
