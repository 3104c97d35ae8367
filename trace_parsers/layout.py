"""The on-disk contract of a capture: ``<logdir>/plugins/profile/<session>/<worker>.xplane.pb``
beside a ``capture.json``; one make/parse pair for every side (capture client, the workers'
export service, the loader, the dashboard).

Standard library only, so that ``collectors`` (which must not pull in pandas) can import it.

    >>> from podscope.trace_parsers import layout
    >>> d = layout.session_dir(Path("runs"), "2026_12_01_10_00_00")
    >>> d / layout.xplane_name("10.0.0.1_6009")
    PosixPath('runs/plugins/profile/2026_12_01_10_00_00/10.0.0.1_6009.xplane.pb')
    >>> layout.worker_label("10.0.0.1_6009.xplane.pb")
    '10.0.0.1_6009'
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: Session folders live here under a logdir (TensorBoard's and XProf's layout).
PROFILE_SUBDIR = Path("plugins") / "profile"
#: File-name suffixes of XPlane captures (TensorFlow, JAX).
XPLANE_SUFFIXES = (".xplane.pb", ".xplane.pb.gz")
#: File-name suffixes of PyTorch profiler (Kineto) traces, as ``torch.profiler`` writes them.
KINETO_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json")
#: Every suffix an agent writes and serves.
TRACE_SUFFIXES = XPLANE_SUFFIXES + KINETO_SUFFIXES
#: PodScope's per-session manifest: options and per-worker capture results.
MANIFEST_NAME = "capture.json"
#: The layout version ``write_manifest`` writes as ``schema_version``. A manifest without one
#: is version 0 (PodScope before versions: the same fields). A reader migrates older versions
#: (``_migrate``) and refuses newer ones, saying to upgrade.
MANIFEST_VERSION = 1
#: PodScope's own files under a logdir (a watcher's heartbeats, its state, the history index):
#: a hidden folder, which TensorBoard, XProf and ``loader.runs`` never take for a run.
STATE_DIR = ".podscope"
#: Session names as XProf writes them (UTC).
SESSION_FORMAT = "%Y_%m_%d_%H_%M_%S"


class LayoutError(ValueError):
    """A session or file name that would leave its folder, or an unreadable manifest."""


class NewerLayout(LayoutError):
    """A ``capture.json`` written by a newer PodScope than this one."""


#: Longest file or folder name, in UTF-8 bytes (Linux's NAME_MAX): longer ones are refused
#: here rather than failing with ENAMETOOLONG wherever a path is touched.
MAX_NAME_BYTES = 255


def check_plain_name(name: str) -> str:
    """``name`` if it is one plain path component (no separator, ``..``, NUL or empty) of at
    most ``MAX_NAME_BYTES``.

    Raises:
        LayoutError: it is not.
    """
    if not isinstance(name, str) or len(name.encode("utf-8", "replace")) > MAX_NAME_BYTES:
        shown = repr(name[:40]) + "…" if isinstance(name, str) else type(name).__name__
        raise LayoutError(f"not a file name of at most {MAX_NAME_BYTES} bytes: {shown}")
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise LayoutError(f"not a plain file name: {name!r}")
    return name


def profile_root(logdir: Path) -> Path:
    """The folder holding a logdir's session folders."""
    return logdir / PROFILE_SUBDIR


def state_dir(logdir: Path) -> Path:
    """The folder of PodScope's own files under ``logdir`` (``STATE_DIR``)."""
    return Path(logdir) / STATE_DIR


def split_session(session: str) -> tuple[tuple[str, ...], str]:
    """(run path parts, session folder) of a session id: ``"2026_…"`` is a session of the logdir
    itself, ``"train/2026_…"`` one of the run ``train`` (``<logdir>/train/plugins/profile/…``),
    as TensorBoard names runs by their path under the logdir.

    Raises:
        LayoutError: a part is not a plain name, or the id is longer than a path may be.
    """
    if not isinstance(session, str) or len(session) > 4096:
        raise LayoutError(f"not a session id: {str(session)[:40]!r}")
    *run, name = session.split("/")
    for part in (*run, name):
        check_plain_name(part)
    if PROFILE_SUBDIR.parts[0] in run:  # "plugins/profile/x/…" is not a run path
        raise LayoutError(f"not a session id: {session!r}")
    return tuple(run), name


def session_dir(logdir: Path, session: str) -> Path:
    """``<logdir>/[<run>/]plugins/profile/<session>`` of a session id (``split_session``).

    Raises:
        LayoutError: ``session`` is not a session id.
    """
    run, name = split_session(session)
    return profile_root(logdir.joinpath(*run)) / name


def session_id(run: str, name: str) -> str:
    """The id of session folder ``name`` of the run at path ``run`` ("" for the logdir)."""
    return f"{run}/{name}" if run else name


def confined(root: Path, *parts: str) -> Path:
    """``root/part/…`` resolved, when every part is a plain name and the result stays inside
    ``root`` after symlinks are followed.

    Raises:
        LayoutError: a part is not a plain name, or the path resolves outside ``root``.
    """
    for part in parts:
        check_plain_name(part)
    real_root = root.resolve()
    path = real_root.joinpath(*parts).resolve()
    if real_root not in path.parents:
        raise LayoutError(f"{'/'.join(parts)} resolves outside {root}")
    return path


def xplane_name(worker: str) -> str:
    """The file name of a worker's XPlane capture (workers are labelled ``host_port``)."""
    return trace_name(worker, XPLANE_SUFFIXES[0])


def trace_name(worker: str, suffix: str) -> str:
    """The file name of a worker's capture in the format ``suffix`` names (one of
    ``TRACE_SUFFIXES``).

    Raises:
        LayoutError: an unknown suffix, or a worker label that is not a plain name.
    """
    if suffix not in TRACE_SUFFIXES:
        raise LayoutError(f"{suffix!r} is not a trace suffix ({', '.join(TRACE_SUFFIXES)})")
    return check_plain_name(worker) + suffix


def trace_suffix(name: str) -> str | None:
    """The ``TRACE_SUFFIXES`` entry ``name`` ends with, or None."""
    return next((s for s in TRACE_SUFFIXES if name.endswith(s)), None)


def worker_label(name: str | Path, suffixes: Iterable[str] = XPLANE_SUFFIXES) -> str:
    """A capture file's worker label: its name without the first of ``suffixes`` it ends with
    (else without its last extension)."""
    base = Path(name).name
    for suffix in suffixes:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return Path(base).stem


def new_session_name(now: datetime | None = None) -> str:
    """A session name for ``now`` (default: the current UTC time), in XProf's format."""
    return (now or datetime.now(timezone.utc)).strftime(SESSION_FORMAT)


def new_session_dir(logdir: Path, prefix: str = "", now: datetime | None = None) -> Path:
    """A new, empty session folder ``<logdir>/plugins/profile/<prefix><time>``, created here
    (``_2``, ``_3``… appended when that second is taken), so two captures or uploads in the same
    second never share a folder or overwrite each other's files.

    Raises:
        LayoutError: no free name (a thousand sessions in one second).
    """
    root = profile_root(logdir)
    root.mkdir(parents=True, exist_ok=True)
    base = prefix + new_session_name(now)
    for n in range(1, 1000):
        folder = root / (base if n == 1 else f"{base}_{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise LayoutError(f"no free session name for {base} in {root}")


def tf_trace_path(repository_root: Path, session: str, host: str) -> Path:
    """Where TF's profiler server writes a trace: ``<root>/<session>/<host>.xplane.pb``, with
    ``:`` in the host name written as ``_`` (TSL's rule)."""
    return repository_root / check_plain_name(session) / xplane_name(host.replace(":", "_"))


@dataclass(frozen=True)
class ManifestWorker:
    """One worker's line of ``capture.json`` (the fields every reader uses; ``extra`` keeps
    the rest as written)."""

    label: str
    status: str
    reason: str = ""
    role: str = ""
    index: int | None = None
    file: str | None = None
    bytes: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)


#: A task role as a job names it: ``worker``, ``chief``, ``ps``, ``evaluator``, ``rank``…
_ROLE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
#: Roles whose tasks are numbered, not typed: ``rank 3`` (PyTorch), ``process 1`` (JAX).
NUMBERED_ROLES = ("rank", "process")


def task_name(role: str, index: int | None) -> str:
    """A worker's task as its job names it: ``worker:1``, ``ps:0``, ``rank 3``; "" without a
    role (an upload, a process that did not say) or with one no job would write."""
    if not role or not _ROLE.fullmatch(role) or not isinstance(index, int) or index < 0:
        return ""
    return f"{role} {index}" if role in NUMBERED_ROLES else f"{role}:{index}"


@dataclass(frozen=True)
class CaptureManifest:
    """A session's ``capture.json``."""

    session: str
    start_timestamp_ns: int
    options: Mapping[str, Any]
    workers: tuple[ManifestWorker, ...]
    label: str = ""
    note: str = ""
    schema_version: int = MANIFEST_VERSION
    #: Why a watcher (``collectors.watch``) took this capture: its reason, the trigger and the
    #: heartbeat window that fired it; None for a capture a person started.
    watch: Mapping[str, Any] | None = None

    def tasks(self) -> dict[str, tuple[str, str]]:
        """Worker label → (task, address) for the workers whose task is known
        (``task_name``); none when two workers would share a task (a manifest no capture
        wrote: a name that picks one of two workers would mislead)."""
        out = {}
        for w in self.workers:
            task = task_name(w.role, w.index)
            if task:
                address = w.extra.get("address")
                out[w.label] = (task, address if isinstance(address, str) else w.label)
        names = [task for task, _ in out.values()]
        return out if len(set(names)) == len(names) else {}


def tasks_of(folders: Iterable[Path]) -> dict[str, tuple[str, str]]:
    """Worker label → (task, address) from these session folders' manifests
    (``CaptureManifest.tasks``); a folder without a readable one names none."""
    out: dict[str, tuple[str, str]] = {}
    for folder in dict.fromkeys(folders):
        try:
            manifest = read_manifest(folder)
        except LayoutError:
            continue
        if manifest is not None:
            out.update(manifest.tasks())
    return out


def write_manifest(
    folder: Path,
    session: str,
    start_timestamp_ns: int,
    options: Mapping[str, Any],
    workers: Iterable[Mapping[str, Any]],
    label: str = "",
    note: str = "",
    watch: Mapping[str, Any] | None = None,
) -> Path:
    """Writes ``folder/capture.json`` (atomically: a reader never sees half a file).

    Args:
        folder: the session folder.
        session, start_timestamp_ns: the capture's name and common start.
        options: the capture options (JSON-serializable; secrets left out by the caller).
        workers: one mapping per worker with at least ``label`` and ``status``.
        label, note: what the session is, in the user's words (``check_label``).
        watch: a watcher's reason and trigger (``CaptureManifest.watch``), written only when
            given (an additive field: readers of version 1 without it ignore it).
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / MANIFEST_NAME
    tmp = path.with_suffix(".json.part")
    payload = {
        "schema_version": MANIFEST_VERSION,
        "session": session,
        "label": check_label(label, MAX_LABEL),
        "note": check_label(note, MAX_NOTE),
        "start_timestamp_ns": start_timestamp_ns,
        "options": dict(options),
        "workers": [dict(w) for w in workers],
    }
    if watch is not None:
        payload["watch"] = dict(watch)
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    tmp.replace(path)
    return path


#: Longest session label and note, in characters.
MAX_LABEL, MAX_NOTE = 80, 2000


def check_label(text: str, limit: int) -> str:
    """``text`` stripped, when it has at most ``limit`` characters and no control characters
    other than newlines (a note may have several lines; a label is one).

    Raises:
        LayoutError: it is too long or holds control characters.
    """
    text = (text or "").strip()
    if len(text) > limit:
        raise LayoutError(f"at most {limit} characters (this has {len(text)})")
    allowed = "\n" if limit > MAX_LABEL else ""
    if any(ord(c) < 32 and c not in allowed for c in text):
        raise LayoutError("no control characters" + (" other than new lines" if allowed else ""))
    return text


def describe_session(folder: Path, label: str, note: str) -> Path:
    """Sets a session's label and note in its ``capture.json`` (made for a session without
    one, such as an upload, with no workers listed), keeping the rest as it was.

    Raises:
        LayoutError: the label or note is refused (``check_label``), or the manifest is
            unreadable.
    """
    label, note = check_label(label, MAX_LABEL), check_label(note, MAX_NOTE)
    path = folder / MANIFEST_NAME
    old = read_manifest(folder)
    if old is None:
        return write_manifest(folder, folder.name, 0, {}, [], label, note)
    raw = _migrate(json.loads(path.read_text()), path)  # read_manifest checked it is readable
    raw.update(label=label, note=note, schema_version=MANIFEST_VERSION)
    tmp = path.with_suffix(".json.part")
    tmp.write_text(json.dumps(raw, indent=2, default=str))
    tmp.replace(path)
    return path


_WORKER_FIELDS = ("label", "status", "reason", "role", "index", "file", "bytes")


#: A capture manifest lists one small record per worker: 16 MiB is far beyond any real one.
MAX_MANIFEST_BYTES = 16 << 20


def read_manifest(folder: Path) -> CaptureManifest | None:
    """The session's ``capture.json``, or None when it has none (an upload, a copied run).

    Raises:
        LayoutError: the file exists but is not a readable manifest (names the file and why).
    """
    path = folder / MANIFEST_NAME
    try:
        with path.open("rb") as f:
            text = f.read(MAX_MANIFEST_BYTES + 1)
        if len(text) > MAX_MANIFEST_BYTES:
            raise ValueError(f"over {MAX_MANIFEST_BYTES:,} bytes")
        raw = json.loads(text)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: [[[[… nested deep
        raise LayoutError(f"{path}: unreadable capture manifest ({str(e)[:200]})") from e
    raw = _migrate(raw, path)
    try:
        workers = tuple(
            ManifestWorker(
                label=str(w["label"]),
                status=str(w["status"]),
                reason=str(w.get("reason") or ""),
                role=str(w.get("role") or ""),
                index=w.get("index"),
                file=w.get("file"),
                bytes=int(w.get("bytes") or 0),
                extra={k: v for k, v in w.items() if k not in _WORKER_FIELDS},
            )
            for w in raw.get("workers", [])
        )
        return CaptureManifest(
            session=str(raw.get("session", folder.name)),
            start_timestamp_ns=int(raw.get("start_timestamp_ns") or 0),
            options=dict(raw.get("options") or {}),
            workers=workers,
            label=str(raw.get("label") or ""),
            note=str(raw.get("note") or ""),
            schema_version=int(raw["schema_version"]),
            watch=dict(raw["watch"]) if isinstance(raw.get("watch"), dict) else None,
        )
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as e:
        raise LayoutError(f"{path}: unexpected capture manifest content ({e!r:.200})") from e


def check_manifest_version(folder: Path) -> None:
    """Refuses a session whose ``capture.json`` a newer PodScope wrote (its fields may mean
    what this one cannot know); any other manifest, or none, passes (the traces still parse).
    Reads the file once per version of it.

    Raises:
        NewerLayout: the manifest's ``schema_version`` is above ``MANIFEST_VERSION``.
    """
    path = folder / MANIFEST_NAME
    try:
        st = path.stat()
    except OSError:
        return
    message = _newer_manifest(str(path), st.st_mtime_ns, st.st_size)
    if message:
        raise NewerLayout(message)


@functools.lru_cache(maxsize=1024)
def _newer_manifest(path: str, mtime_ns: int, size: int) -> str:
    """The refusal of the manifest at ``path`` as it is at (mtime, size), or ""."""
    try:
        read_manifest(Path(path).parent)
    except NewerLayout as e:
        return str(e)
    except LayoutError:
        return ""
    return ""


def _migrate(raw: Any, path: Path) -> dict[str, Any]:
    """A manifest of any version this PodScope reads, in the current one's fields
    (``schema_version`` set to the version it was written with).

    Raises:
        LayoutError: not a JSON object, or written by a newer PodScope.
    """
    if not isinstance(raw, dict):
        raise LayoutError(f"{path}: unexpected capture manifest content (not a JSON object)")
    version = raw.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise LayoutError(f"{path}: schema_version {version!r} is not a version number")
    if version > MANIFEST_VERSION:
        raise NewerLayout(
            f"{path}: written by a newer PodScope (capture.json schema version {version}; this "
            f"one reads up to {MANIFEST_VERSION}): upgrade PodScope to read it"
        )
    # 0 → 1: version 1 added schema_version itself; no field changed.
    return {**raw, "schema_version": version}
