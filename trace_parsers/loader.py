"""``load(path)``: a file, bytes, a run folder or a logdir → one merged ``TraceFrames``.

Accepted inputs:

* bytes of one capture;
* one file (``<worker>.xplane.pb``, plain or gzip);
* a run folder (``<logdir>/plugins/profile/<session>/``) with one file per worker;
* a logdir holding ``plugins/profile/<session>/`` folders, at any depth (TensorBoard's runs,
  ``logdir/train/plugins/profile/…``): the newest session, or ``session=`` (``train/2026_…``).

Workers are labelled by file name (``host_port``), so two workers on one host never collide.
One bad worker file does not lose the others: they load, and the failure is listed in
``frames.failures``.

    >>> from podscope.trace_parsers import load
    >>> frames = load("runs/demo", session="2026_11_30_07_00_00")
    >>> frames.workers[["worker", "capture_start_ns"]]
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podscope.trace_parsers import layout
from podscope.trace_parsers.errors import TraceNotFound, TraceParseError
from podscope.trace_parsers.sniff import (
    looks_like_atrace,
    looks_like_chrome_json,
    looks_like_kineto,
    looks_like_perfetto,
    looks_like_xplane,
    plain,
)

if TYPE_CHECKING:  # the parsers (pandas) load when a file is parsed, not to find the files
    from podscope.trace_parsers.cache import FrameCache
    from podscope.trace_parsers.schema import TraceFrames

Parser = Callable[..., "TraceFrames"]


@dataclass(frozen=True)
class Format:
    """A trace format: its file suffixes, how to recognise its content, how to parse it
    (``parser``: ``module:function``, imported on first use), and whether several files of it
    are built into frames at once (``batched``: the parser's module has ``decode`` and
    ``build_frames``)."""

    name: str
    suffixes: tuple[str, ...]
    parser: str
    sniff: Callable[[bytes], bool]
    batched: bool = False

    @property
    def parse(self) -> Parser:
        parse: Parser = getattr(self.module, self.parser.split(":")[1])
        return parse

    @property
    def module(self) -> Any:
        return import_module(f"podscope.trace_parsers.{self.parser.split(':')[0]}")


#: Parsers by format name, tried in this order when sniffing content.
PARSERS: Mapping[str, Format] = {
    "kineto": Format(
        "kineto",
        (*layout.KINETO_SUFFIXES, ".json", ".json.gz"),
        "kineto:parse_kineto",
        lambda head: looks_like_kineto(plain(head) or b""),
        batched=True,
    ),
    "atrace": Format(
        "atrace",
        (".systrace", ".ctrace", ".atrace", ".html"),
        "atrace:parse_atrace",
        looks_like_atrace,
    ),
    "chrome_json": Format(
        "chrome_json",
        (".json", ".json.gz"),
        "chrome_json:parse_chrome_json",
        lambda head: looks_like_chrome_json(plain(head) or b""),
    ),
    "xplane": Format(
        "xplane",
        (".xplane.pb", ".xplane.pb.gz"),
        "xplane:parse_xplane",
        looks_like_xplane,
        batched=True,
    ),
    "perfetto": Format(
        "perfetto",
        (".perfetto-trace", ".pftrace", ".perfetto"),
        "perfetto:parse_perfetto",
        looks_like_perfetto,
    ),
}

#: Every format's file-name suffixes, in registry order.
SUFFIXES = tuple(s for f in PARSERS.values() for s in f.suffixes)


def worker_label(path: Path) -> str:
    """The worker label of a capture file: its name without the format suffix, or its whole
    name when another capture file beside it has the same label (``w.xplane.pb`` and
    ``w.xplane.pb.gz`` are two workers, never one with both files' events). The folder is
    listed once per change of it, however many of its files are labelled."""
    label = layout.worker_label(path, SUFFIXES)
    folder = path.parent
    try:
        changed = os.stat(folder).st_mtime_ns
    except OSError:
        return label
    return path.name if label in _clashing_labels(str(folder), changed) else label


@functools.lru_cache(maxsize=64)
def _clashing_labels(folder: str, changed_ns: int) -> frozenset[str]:
    """Labels two capture files of ``folder`` share (as it was at ``changed_ns``)."""
    try:
        names = [n for n in os.listdir(folder) if n.endswith(SUFFIXES)]
    except OSError:
        return frozenset()
    counts = Counter(layout.worker_label(n, SUFFIXES) for n in names)
    return frozenset(label for label, n in counts.items() if n > 1)


#: Files that live in session folders but are not captures (PodScope's manifest; XProf's caches).
NOT_CAPTURES = (layout.MANIFEST_NAME, ".op_stats.pb", ".op_stats_v2.pb")
#: Capture files read from one session folder at most (``PODSCOPE_MAX_SESSION_FILES``).
MAX_SESSION_FILES = 4096


def max_session_files(env: Mapping[str, str] | None = None) -> int:
    """``PODSCOPE_MAX_SESSION_FILES`` from ``env`` (default ``os.environ``), else
    ``MAX_SESSION_FILES``.

    Raises:
        ValueError: not a positive whole number.
    """
    value = (os.environ if env is None else env).get("PODSCOPE_MAX_SESSION_FILES")
    if not value:
        return MAX_SESSION_FILES
    n = int(value)
    if n < 1:
        raise ValueError(f"PODSCOPE_MAX_SESSION_FILES={value}: at least 1")
    return n


@dataclass(frozen=True)
class FolderScan:
    """A session folder read once: the capture files to read (sorted by name) and those that
    will not be, each with its reason."""

    files: tuple[Path, ...]
    refused: tuple[TraceParseError, ...]


_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def scan(folder: Path, max_files: int | None = None) -> FolderScan:
    """The capture files directly in ``folder``: a TensorFlow session folder (any
    ``*.xplane.pb``) gives only its XPlanes, another folder the files of the other formats.
    One listing, and one ``lstat`` per file read: linear in the folder's size.

    Refused (listed, never read): symlinks leading out of the folder, anything that is not a
    regular file (a FIFO would block the reader, a device never end), hard links to a file
    with names outside the folder (its link count exceeds its names here), and the files past
    ``max_files`` (``max_session_files()`` when None), in name order."""
    limit = max_session_files() if max_files is None else max_files
    try:
        st = os.stat(folder)
    except OSError:
        return FolderScan((), ())
    return _scan(str(folder), st.st_ino, st.st_mtime_ns, limit)


@functools.lru_cache(maxsize=4096)  # a logdir of a thousand watched sessions, and some
def _scan(name: str, inode: int, changed_ns: int, limit: int) -> FolderScan:
    """``scan`` of the folder as it was at ``changed_ns`` (a page asks for its session's files
    several times a request: a folder of 100,000 files is listed again only when it changes)."""
    folder = Path(name)
    try:
        entries = [e for e in os.scandir(folder) if not e.name.endswith(NOT_CAPTURES)]
    except OSError:
        return FolderScan((), ())
    found = sorted((e for e in entries if e.name.endswith(SUFFIXES)), key=lambda e: e.name)
    if any(e.name.endswith(PARSERS["xplane"].suffixes) for e in found):
        found = [e for e in found if e.name.endswith(PARSERS["xplane"].suffixes)]
    names_of = Counter(e.inode() for e in entries if not e.is_symlink())
    real = folder.resolve()
    files: list[Path] = []
    refused: list[TraceParseError] = []
    for n, e in enumerate(found):
        if len(files) >= limit:
            refused.append(
                TraceParseError(
                    folder,
                    "unknown",
                    f"{len(found) - n:,} more capture files past the limit of {limit:,} a "
                    "session (PODSCOPE_MAX_SESSION_FILES): not read",
                )
            )
            break
        why = _refusal(Path(e.path), e, real, names_of)
        if why is None:
            files.append(Path(e.path))
        else:
            refused.append(TraceParseError(e.path, "unknown", why))
    return FolderScan(tuple(files), tuple(refused))


def _refusal(path: Path, e: os.DirEntry[str], real: Path, names_of: Counter[int]) -> str | None:
    """Why the capture file ``path`` (entry ``e`` of the folder ``real``) is not read, or None."""
    try:
        if e.is_symlink():
            target = path.resolve()
            if real not in target.parents:
                return f"a link leading out of {path.parent}: not read"
            return None if target.is_file() else "a link to something not a regular file"
        st = e.stat(follow_symlinks=False)
    except OSError as err:
        return f"cannot read: {err.strerror or err}"
    kind = next((what for test, what in _SPECIAL if test(st.st_mode)), None)
    if kind is not None or not stat.S_ISREG(st.st_mode):
        return f"not a regular file ({kind or 'a special file'}): not read"
    here = names_of[st.st_ino]
    if st.st_nlink > here:
        return (
            f"a hard link to a file with names outside {path.parent} ({st.st_nlink} names, "
            f"{here} here): not read"
        )
    return None


def trace_files(folder: Path, max_files: int | None = None) -> list[Path]:
    """The capture files ``scan`` reads in ``folder``, sorted by name."""
    return list(scan(folder, max_files).files)


def sessions(logdir: Path) -> list[str]:
    """Session folder names under ``<logdir>/plugins/profile``, oldest first (hidden folders,
    such as an upload being written, are not sessions)."""
    root = layout.profile_root(logdir)
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and trace_files(p)
    )


#: How many folders deep runs are looked for under a logdir (TensorBoard walks every level; a
#: bound keeps a logdir of ``/`` from walking the whole disk).
MAX_RUN_DEPTH = 6


def runs(logdir: Path) -> list[str]:
    """Run paths under ``logdir`` that hold ``plugins/profile`` (TensorBoard's runs): ``""`` for
    the logdir itself, ``"train"``, ``"runA/validation"``…, sorted. Hidden folders, the
    ``plugins`` folders themselves and symlinks are not walked (a run must not lead out)."""
    found: list[str] = []

    def walk(folder: Path, parts: tuple[str, ...]) -> None:
        if layout.profile_root(folder).is_dir():
            found.append("/".join(parts))
        if len(parts) >= MAX_RUN_DEPTH:
            return
        try:
            children = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        for c in children:
            if c.name.startswith(".") or c.name == layout.PROFILE_SUBDIR.parts[0]:
                continue
            if c.is_dir(follow_symlinks=False):
                walk(Path(c.path), (*parts, c.name))

    if logdir.is_dir():
        walk(logdir, ())
    return sorted(found)


def session_folders(logdir: Path) -> dict[str, Path]:
    """Every session of every run under ``logdir`` (``runs``): {session id: folder}, the ids
    as ``layout.session_id`` writes them (``2026_…``, ``train/2026_…``)."""
    return {
        layout.session_id(run, name): layout.session_dir(logdir, layout.session_id(run, name))
        for run in runs(logdir)
        for name in sessions(logdir / run)
    }


def _label(folder: Path) -> str:
    """The label a capture gave its session (``capture.json``'s ``label``: its run name)."""
    import json

    try:
        label = json.loads((folder / "capture.json").read_text()).get("label", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return label if isinstance(label, str) else ""


def chosen_session(path: str | Path, session: str | None = None) -> str | None:
    """The session id ``resolve`` reads under ``path``: ``session`` itself, the one session of
    that bare name in whichever run holds it, the newest session of the run (``train``) or
    of the capture label (``podscope capture --label baseline``) it names; without
    ``session``, the newest. None where ``path`` is a file or a folder of loose captures.

    Raises:
        TraceParseError: the path holds no capture, or names no session.
        TraceNotFound: the path does not exist (also a ``FileNotFoundError``).
    """
    p = Path(path)
    if p.is_file():
        return None
    if not p.is_dir():
        raise TraceNotFound(p)
    files = trace_files(p)
    found = session_folders(p)
    # Loose files count unless the folder is a logdir and they are not XPlanes (a notes.json
    # beside plugins/ is not a capture).
    xplanes = files and files[0].name.endswith(PARSERS["xplane"].suffixes)
    if files and session is None and (xplanes or not found):
        return None
    if not found:
        refused = scan(p).refused
        raise TraceParseError(
            p,
            "unknown",
            "no capture files (*.xplane.pb) and no plugins/profile/<session> folder"
            + (
                f" ({len(refused)} files not read; {Path(str(refused[0].path)).name}: "
                f"{refused[0].reason})"
                if refused
                else ""
            ),
        )
    candidates = list(found)
    if session is not None:
        if session in found:
            return session
        candidates = [s for s in found if s.rsplit("/", 1)[-1] == session]
        if len(candidates) > 1:
            raise TraceParseError(
                p, "unknown", f"session {session!r} is in several runs: {', '.join(candidates)}"
            )
        candidates = candidates or [s for s in found if s.rpartition("/")[0] == session]
        candidates = candidates or [s for s in found if _label(found[s]) == session]
        if not candidates:
            raise TraceParseError(
                p,
                "unknown",
                f"no session, run or capture label {session!r}; known: {', '.join(sorted(found))}",
            )
    return max(candidates, key=lambda n: (_mtime(found[n]), n))


def resolve(path: str | Path, session: str | None = None) -> list[Path]:
    """The capture files that ``path`` (file, run folder or logdir) designates: ``path``
    itself, its loose captures, or the files of ``chosen_session``.

    Raises:
        TraceParseError: the path does not exist, holds no capture, names an unknown session,
            or its session's ``capture.json`` was written by a newer PodScope.
    """
    p = Path(path)
    chosen = chosen_session(p, session)
    if chosen is None:
        files = [p] if p.is_file() else trace_files(p)
    else:
        files = trace_files(session_folders(p)[chosen])
    for folder in {f.parent for f in files}:
        try:
            layout.check_manifest_version(folder)
        except layout.NewerLayout as e:
            manifest = folder / layout.MANIFEST_NAME
            reason = str(e).removeprefix(f"{manifest}: ")
            raise TraceParseError(manifest, "capture.json", reason) from None
    return files


def _mtime(folder: Path) -> float:
    return max((f.stat().st_mtime for f in trace_files(folder)), default=0.0)


def format_of(path: Path, head: bytes) -> Format:
    """The format of a file: by content (extensions lie), except that a suffix decides between
    the two protobuf formats, which a damaged file cannot tell apart by content."""
    by_suffix = next((f for f in PARSERS.values() if path.name.endswith(f.suffixes)), None)
    sniffed = [f for f in PARSERS.values() if f.sniff(head)]
    protobuf = {"xplane", "perfetto"}
    if by_suffix is not None and (
        by_suffix in sniffed
        or (by_suffix.name in protobuf and any(f.name in protobuf for f in sniffed))
    ):
        return by_suffix
    if sniffed:
        return sniffed[0]
    if by_suffix is not None:
        return by_suffix
    raise TraceParseError(
        path, "unknown", f"unrecognised trace format; known: {', '.join(PARSERS)}"
    )


def load(
    path: str | Path | bytes,
    *,
    session: str | None = None,
    cache: bool = True,
    cache_dir: str | Path | None = None,
    on_file: Callable[[Path], None] | None = None,
    stats_keys: Collection[str] | None = None,
) -> TraceFrames:
    """Parses a capture (see the module docstring for what ``path`` may be).

    Args:
        path: bytes, a file, a run folder or a logdir.
        session: with a logdir, the session to load (default: the newest).
        cache: reuse / write parsed frames in the Parquet cache.
        cache_dir: cache location (default: ``FrameCache.default_dir``, read from the
            environment here, the library's edge).
        on_file: called before each file is parsed (progress display).
        stats_keys: XPlane files' ``stats`` frames keep only these keys' rows (``parse_xplane``),
            for a caller that reads a few stats; only with ``cache`` off, as such frames are
            partial.

    Returns:
        Merged, validated frames of every worker that parsed.

    Raises:
        ValueError: ``stats_keys`` with ``cache`` on.
        TraceParseError: nothing could be parsed (the message lists each file's reason), or
            the session's ``capture.json`` was written by a newer PodScope.
        TraceNotFound: nothing at ``path`` (also a ``FileNotFoundError``).
    """
    if isinstance(path, bytes | bytearray | memoryview):
        data = bytes(path)
        return format_of(Path("<bytes>"), data[:65536]).parse(
            data, worker="worker0", source="<bytes>"
        )
    from podscope.trace_parsers.schema import TraceFrames

    if stats_keys is not None and cache:
        raise ValueError("stats_keys gives partial frames: load them with cache=False")
    files = resolve(path, session)
    store = None
    if cache:  # the cache (pyarrow's Feather, xxhash) loads only for a load that uses it
        from podscope.trace_parsers.cache import FrameCache

        store = FrameCache(
            Path(cache_dir) if cache_dir else FrameCache.default_dir(os.environ),
            FrameCache.default_max_bytes(os.environ),
        )
    failures: list[TraceParseError] = [
        refusal
        for folder in sorted({f.parent for f in files} if Path(path).is_dir() else set())
        for refusal in scan(folder).refused
    ]
    if store is None:
        parsed = parse_files(files, stats_keys, on_file)
        merged, failures = parsed.frames, failures + list(parsed.failures)
    else:
        parts: list[TraceFrames] = []
        for f in files:
            if on_file:
                on_file(f)
            try:
                parts.append(_load_file(f, store, stats_keys))
            except TraceParseError as e:
                failures.append(e)
        merged = (merge(parts) if len(parts) > 1 else parts[0]) if parts else None
    if merged is None:
        if len(failures) == 1:
            raise failures[0]
        reasons = "; ".join(f"{Path(e.path).name}: {e.reason}" for e in failures)
        raise TraceParseError(path, "xplane", f"no worker file could be parsed ({reasons})")
    if failures:
        merged = TraceFrames(**{n: f for n, f in merged.frames()}, failures=tuple(failures))
    return merged


@dataclass(frozen=True)
class Parsed:
    """Files parsed side by side (``parse_files``)."""

    #: Their frames, as ``merge`` of each file's gives them; None when none parsed.
    frames: TraceFrames | None
    #: Per parsed file, in the frames' order: its worker, its file and its events.
    workers: tuple[tuple[str, str, int], ...]
    #: The files that did not parse, each with its reason.
    failures: tuple[TraceParseError, ...]


def parse_files(
    files: Sequence[Path],
    stats_keys: Collection[str] | None = None,
    on_file: Callable[[Path], None] | None = None,
) -> Parsed:
    """Several files' frames, without the parse cache. Files of a batched format (XPlane,
    PyTorch's) are decoded one by one and their frames built at once (the module's
    ``build_frames``): building frames costs a few hundred pandas calls whatever the rows,
    so a pod's many small workers pay it once, not per file; other formats are parsed each.
    One file that fails is a failure with its reason, and the others are kept."""
    decoded: dict[str, list[tuple[Path, Any]]] = {}
    others: list[tuple[Path, TraceFrames]] = []
    failures: list[TraceParseError] = []
    for f in files:
        if on_file:
            on_file(f)
        label = worker_label(f)
        try:
            fmt = format_of(f, _read(f, 65536))
            if fmt.batched:
                one = fmt.module.decode(_read(f), worker=label, source=str(f))
                decoded.setdefault(fmt.name, []).append((f, one))
            else:
                others.append((f, fmt.parse(_read(f), worker=label, source=str(f))))
        except TraceParseError as e:
            failures.append(e)
    # Frame sets and, per set, its files' (worker, file, events) in its order.
    sets: list[tuple[TraceFrames, tuple[tuple[str, str, int], ...]]] = []
    for name, batch in decoded.items():
        rows = tuple((d.worker, str(f), d.n_events) for f, d in batch)
        source = str(batch[0][0]) if len(batch) == 1 else "<batch>"
        some = {"stats_keys": stats_keys} if name == "xplane" else {}
        try:
            built = PARSERS[name].module.build_frames([d for _, d in batch], source=source, **some)
            sets.append((built, rows))
        except TraceParseError as e:
            if len(batch) == 1:
                failures.append(e)
            else:  # the set does not validate: each file alone names the culprit
                others = [*_parsed_alone([f for f, _ in batch], stats_keys, failures), *others]
    for f, frames in others:
        sets.append((frames, ((worker_of(frames, f), str(f), len(frames.events)),)))
    each = [frames for frames, _ in sets]
    return Parsed(
        (merge(each) if len(each) > 1 else each[0]) if each else None,
        tuple(row for _, rows in sets for row in rows),
        tuple(failures),
    )


def worker_of(frames: TraceFrames, path: Path) -> str:
    """The worker of one file's frames: as they name it, else by the file's name."""
    return str(frames.workers["worker"].iloc[0]) if len(frames.workers) else worker_label(path)


def _parsed_alone(
    files: Sequence[Path], stats_keys: Collection[str] | None, failures: list[TraceParseError]
) -> list[tuple[Path, TraceFrames]]:
    """Each file's frames on its own; the files that fail go to ``failures``."""
    out = []
    for f in files:
        try:
            out.append((f, _load_file(f, None, stats_keys)))
        except TraceParseError as e:
            failures.append(e)
    return out


def _load_file(
    path: Path, store: FrameCache | None, stats_keys: Collection[str] | None = None
) -> TraceFrames:
    label = worker_label(path)
    try:
        key = store.key(path) if store else None
        if key and label != layout.worker_label(path, SUFFIXES):  # the label is in the frames
            key += "-" + hashlib.blake2b(label.encode(), digest_size=8).hexdigest()
        if store and key:
            hit = store.get(key)
            if hit is not None:
                return hit
    except OSError as e:
        raise _unreadable(path, e) from e
    fmt = format_of(path, _read(path, 65536))
    # The bytes are handed over with no reference kept here, so a parser can free them once
    # decoded (the XPlane builder's memory peaks after its decode).
    some = {"stats_keys": stats_keys} if stats_keys is not None and fmt.name == "xplane" else {}
    frames = fmt.parse(_read(path), worker=label, source=str(path), **some)
    if store and key:
        store.put(key, frames)
    return frames


def _read(path: Path, limit: int = -1) -> bytes:
    """The file's bytes (the first ``limit`` of them when given)."""
    try:
        with path.open("rb") as f:
            return f.read(limit)
    except OSError as e:
        raise _unreadable(path, e) from e


def _unreadable(path: Path, e: OSError) -> TraceParseError:
    return TraceParseError(path, "unknown", f"cannot read: {e.strerror or e}")


def merge(parts: Sequence[TraceFrames]) -> TraceFrames:
    """Concatenates per-worker frames: categoricals are unioned, row references shifted.

    ``events.parent`` and ``stats.event_row`` refer to rows of the merged ``events``.
    """
    import numpy as np

    from podscope.trace_parsers.schema import SCHEMA, TraceFrames, concat_frames, validate

    offsets = np.cumsum([0] + [len(p.events) for p in parts[:-1]]).tolist()
    out = {name: concat_frames(name, [getattr(p, name) for p in parts], offsets) for name in SCHEMA}
    return validate(TraceFrames(**out), "<merge>")
