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

    >>> from trace_parsers import load
    >>> frames = load("runs/demo", session="2026_11_30_07_00_00")
    >>> frames.workers[["worker", "capture_start_ns"]]
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from trace_parsers import layout
from trace_parsers.atrace import looks_like_atrace, parse_atrace
from trace_parsers.cache import FrameCache
from trace_parsers.chrome_json import looks_like_chrome_json, parse_chrome_json
from trace_parsers.errors import TraceParseError
from trace_parsers.perfetto import parse_perfetto
from trace_parsers.schema import CAT, CAT_ID, SCHEMA, TraceFrames, validate
from trace_parsers.xplane import parse_xplane

Parser = Callable[..., TraceFrames]


@dataclass(frozen=True)
class Format:
    """A trace format: its file suffixes, how to recognise its content, how to parse it."""

    name: str
    suffixes: tuple[str, ...]
    parse: Parser
    sniff: Callable[[bytes], bool]


def _proto_kind(head: bytes) -> str | None:
    """``xplane`` or ``perfetto`` for a protobuf stream (either may be gzip-compressed): an
    XSpace's first plane names itself ("/host:CPU", "/device:…", "Task Environment"), a
    Perfetto trace's first packet does not."""
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 65536)
        except zlib.error:
            return None
    if head[:1] != b"\x0a":
        return None
    window = head[:4096]
    for marker in (b"/host:", b"/device:", b"Task Environment", b"/host:metadata"):
        k = window.find(marker)
        if 0 < k < 64 and window[k - 2 : k - 1] == b"\x12":
            return "xplane"
    return "perfetto"


def _looks_like_xplane(head: bytes) -> bool:
    return _proto_kind(head) == "xplane"


def _looks_like_perfetto(head: bytes) -> bool:
    return _proto_kind(head) == "perfetto" or head[:4] == b"\x28\xb5\x2f\xfd"


#: Parsers by format name, tried in this order when sniffing content.
PARSERS: Mapping[str, Format] = {
    "atrace": Format(
        "atrace", (".systrace", ".ctrace", ".atrace", ".html"), parse_atrace, looks_like_atrace
    ),
    "chrome_json": Format(
        "chrome_json", (".json", ".json.gz"), parse_chrome_json, looks_like_chrome_json
    ),
    "xplane": Format("xplane", (".xplane.pb", ".xplane.pb.gz"), parse_xplane, _looks_like_xplane),
    "perfetto": Format(
        "perfetto",
        (".perfetto-trace", ".pftrace", ".perfetto"),
        parse_perfetto,
        _looks_like_perfetto,
    ),
}

#: Every format's file-name suffixes, in registry order.
SUFFIXES = tuple(s for f in PARSERS.values() for s in f.suffixes)


def worker_label(path: Path) -> str:
    """The worker label of a capture file: its name without the format suffix, or its whole
    name when another capture file beside it has the same label (``w.xplane.pb`` and
    ``w.xplane.pb.gz`` are two workers, never one with both files' events)."""
    label = layout.worker_label(path, SUFFIXES)
    try:
        siblings = os.listdir(path.parent) if path.parent != Path(".") or path.exists() else []
    except OSError:
        siblings = []
    clash = any(
        n != path.name and n.endswith(SUFFIXES) and layout.worker_label(n, SUFFIXES) == label
        for n in siblings
    )
    return path.name if clash else label


def links_out(folder: Path) -> list[Path]:
    """Files of ``folder`` that are symlinks leading out of it: never read (a session must not
    show a file from elsewhere on the machine)."""
    try:
        real = folder.resolve()
        return [p for p in folder.iterdir() if p.is_symlink() and real not in p.resolve().parents]
    except OSError:
        return []


#: Files that live in session folders but are not captures (PodScope's manifest; XProf's caches).
NOT_CAPTURES = (layout.MANIFEST_NAME, ".op_stats.pb", ".op_stats_v2.pb")


def trace_files(folder: Path) -> list[Path]:
    """Capture files directly in ``folder``, sorted by name. A TensorFlow session folder
    (any ``*.xplane.pb``) yields only its XPlanes; otherwise files of the other formats.
    Symlinks leading out of the folder are left out (``links_out``)."""
    out = set(links_out(folder))
    files = [
        p
        for p in folder.iterdir()
        if p.is_file() and not p.name.endswith(NOT_CAPTURES) and p not in out
    ]
    xplanes = [p for p in files if p.name.endswith(PARSERS["xplane"].suffixes)]
    if xplanes:
        return sorted(xplanes)
    return sorted(p for p in files if p.name.endswith(SUFFIXES))


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


def resolve(path: str | Path, session: str | None = None) -> list[Path]:
    """The capture files that ``path`` (file, run folder or logdir) designates.

    Raises:
        TraceParseError: the path does not exist, holds no capture, or names an unknown session.
    """
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise TraceParseError(p, "unknown", "no such file or folder")
    files = trace_files(p)
    found = session_folders(p)
    # Loose files count unless the folder is a logdir and they are not XPlanes (a notes.json
    # beside plugins/ is not a capture).
    xplanes = files and files[0].name.endswith(PARSERS["xplane"].suffixes)
    if files and session is None and (xplanes or not found):
        return files
    if session is not None:
        # A bare session name finds it in whichever run holds it, when only one does.
        named = [s for s in found if s == session or s.rsplit("/", 1)[-1] == session]
        if session not in found and len(named) != 1:
            raise TraceParseError(
                p, "unknown", f"no session {session!r}; known: {', '.join(sorted(found)) or 'none'}"
            )
        return trace_files(found[session if session in found else named[0]])
    if not found:
        links = len(links_out(p))
        raise TraceParseError(
            p,
            "unknown",
            "no capture files (*.xplane.pb) and no plugins/profile/<session> folder"
            + (f" ({links} links leading out of the folder were not read)" if links else ""),
        )
    newest = max(found, key=lambda n: (_mtime(found[n]), n))
    return trace_files(found[newest])


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

    Raises:
        ValueError: ``stats_keys`` with ``cache`` on.

    Returns:
        Merged, validated frames of every worker that parsed.

    Raises:
        TraceParseError: nothing could be parsed (the message lists each file's reason).
    """
    if isinstance(path, bytes | bytearray | memoryview):
        data = bytes(path)
        return format_of(Path("<bytes>"), data[:65536]).parse(
            data, worker="worker0", source="<bytes>"
        )
    if stats_keys is not None and cache:
        raise ValueError("stats_keys gives partial frames: load them with cache=False")
    files = resolve(path, session)
    store = (
        FrameCache(Path(cache_dir) if cache_dir else FrameCache.default_dir(os.environ))
        if cache
        else None
    )
    parts: list[TraceFrames] = []
    failures: list[TraceParseError] = [
        TraceParseError(link, "unknown", f"a link leading out of {link.parent}: not read")
        for folder in sorted({f.parent for f in files} if Path(path).is_dir() else set())
        for link in links_out(folder)
        if link.name.endswith(SUFFIXES)
    ]
    for f in files:
        if on_file:
            on_file(f)
        try:
            parts.append(_load_file(f, store, stats_keys))
        except TraceParseError as e:
            failures.append(e)
    if not parts:
        if len(failures) == 1:
            raise failures[0]
        reasons = "; ".join(f"{Path(e.path).name}: {e.reason}" for e in failures)
        raise TraceParseError(path, "xplane", f"no worker file could be parsed ({reasons})")
    merged = merge(parts) if len(parts) > 1 else parts[0]
    if failures:
        merged = TraceFrames(**{n: f for n, f in merged.frames()}, failures=tuple(failures))
    return merged


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
    some = (
        {"stats_keys": stats_keys} if stats_keys is not None and fmt.parse is parse_xplane else {}
    )
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
    offsets = np.cumsum([0] + [len(p.events) for p in parts[:-1]])
    out: dict[str, Any] = {}
    for name, want in SCHEMA.items():
        frames = [getattr(p, name) for p in parts]
        cols: dict[str, Any] = {}
        for col, dtype in want.items():
            series = [f[col] for f in frames]
            if dtype in (CAT, CAT_ID):
                cols[col] = union_categoricals(
                    [pd.Categorical(s) for s in series], ignore_order=True
                )
            elif (name, col) in (("events", "parent"), ("stats", "event_row")):
                shifted = [
                    np.where(s.to_numpy() >= 0, s.to_numpy() + off, -1)
                    for s, off in zip(series, offsets, strict=True)
                ]
                cols[col] = np.concatenate(shifted).astype(np.int32)
            else:
                cols[col] = pd.concat(series, ignore_index=True)
        out[name] = pd.DataFrame(cols)
    return validate(TraceFrames(**out), "<merge>")
