"""Where a session's analyses run: one task per batch of worker files, in this process or on
Dask.

Each task parses its workers' traces (a big worker's through the parse cache, so a second run
maps the cached Arrow shards instead of parsing) and reduces them to their derived frames:
steps and how they were found, the step breakdown of all their steps, op tables, the memory
timeline, and what the diagnostics rules read (``analyzers.rule_inputs``). Only those small
frames come back; the driver aligns the steps across workers, keeps the breakdown rows of the
aligned steps, and merges. Every analysis groups by worker first, so a batch's frames are its
workers' side by side, and the merged frames equal a whole-session analysis. A batch holds one
big worker or several small ones (``batches``): a pod's hosts cost their events, not a
reduction's fixed cost each.

Where: for sessions of fewer than ``in_process_below`` files (a cluster's start-up would cost
more than it saves), processes on this machine (forked, or from a fork server while other
threads run here; or this process, with one file or one core); else a ``LocalCluster`` of
processes sized to the machine, or an existing cluster named by ``scheduler``
(``PODSCOPE_DASK_SCHEDULER``). Dask is imported here only, and only when a cluster is used.

    >>> run = run_session(resolve("logdir"), ExecConfig.from_env(os.environ))
    >>> run.analysis.op_table, run.failures
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import json
import logging
import multiprocessing
import os
import shutil
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyarrow import feather, parquet

from podscope.analyzers.breakdown import before_call_breakdown, step_breakdown
from podscope.analyzers.ops import BY, OP_STATS_KEYS
from podscope.analyzers.session import RULE_FRAMES, SessionAnalysis
from podscope.analyzers.steps import align_steps, own_steps, whole_steps
from podscope.analyzers.summary import summarize
from podscope.trace_parsers import TraceParseError, compiled, layout, load
from podscope.trace_parsers.cache import FrameCache
from podscope.trace_parsers.loader import Parsed, parse_files, resolve, worker_label, worker_of
from podscope.trace_parsers.schema import (
    SCHEMA,
    SCHEMA_VERSION,
    TraceFrames,
    empty_frame,
    exported,
    schema_document,
)

#: Derived frames a task can compute; ``ops:<by>`` for each op table; ``rules``: what the
#: diagnostics rules read (``analyzers.rule_inputs``; with it, the findings need no events).
#: ``pod_inputs``: the few rule frames the Pod Viewer reads (``POD_INPUT_FRAMES``).
PARTS = frozenset(
    {"steps", "breakdown", "memory", "rules", "pod_inputs", "xla_ops", *(f"ops:{b}" for b in BY)}
)
RULE_PARTS = frozenset({"steps", "breakdown", "memory", "ops:kernel", "rules", "pod_inputs"})
#: The rule frames the Pod Viewer reads besides the steps and their breakdown: the op times of
#: a slow step (its outliers' ops), the devices' busy time, the workers' event counts (its
#: header: the trace's kind) and the collective calls (a PyTorch rank's wait in them).
POD_INPUT_FRAMES = ("op_counts", "device_busy", "worker_events", "collective_calls")
#: What the Pod Viewer shows, computed first when ``run_session`` is given ``first``: about
#: two thirds of a pod's analysis.
HEAD_PARTS = frozenset({"steps", "breakdown", "pod_inputs"})
#: The small frames every task returns (what pages and rules need besides the derived ones).
SMALL_FRAMES = ("planes", "lines", "workers", "parse_notes", "plane_stats", "hlo_ops")


class ExecutionError(RuntimeError):
    """The cluster could not run the session (scheduler unreachable or gone)."""


@dataclass(frozen=True)
class ExecConfig:
    """Where per-worker tasks run.

    Attributes:
        scheduler: address of an existing Dask scheduler (``tcp://HOST:8786``); None: local.
        processes: LocalCluster worker processes (default: the usable cores).
        memory_limit: per LocalCluster process (Dask's syntax, ``"4GB"``; ``"auto"`` splits the
            machine's memory between the processes).
        in_process_below: sessions with fewer files run in this process.
        cache: read and write the parse cache.
        cache_dir: the cache's folder (default: ``FrameCache.default_dir``).
        connect_timeout_s: how long to wait for ``scheduler``.
        fork: small sessions in a pool of this machine's processes (``_pool_start``); off:
            in the calling thread (the dashboard's server runs them in its own threads).
    """

    scheduler: str | None = None
    processes: int | None = None
    memory_limit: str = "auto"
    in_process_below: int = 8
    cache: bool = True
    cache_dir: str | None = None
    connect_timeout_s: float = 10.0
    fork: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> ExecConfig:
        """From ``PODSCOPE_DASK_SCHEDULER``, ``PODSCOPE_DASK_PROCESSES``,
        ``PODSCOPE_DASK_CONNECT_TIMEOUT`` (s) and ``PODSCOPE_CACHE_DIR``; keyword overrides
        (CLI flags) win when not None."""
        procs = env.get("PODSCOPE_DASK_PROCESSES")
        timeout = env.get("PODSCOPE_DASK_CONNECT_TIMEOUT")
        base = cls(
            scheduler=env.get("PODSCOPE_DASK_SCHEDULER") or None,
            processes=int(procs) if procs else None,
            cache_dir=env.get("PODSCOPE_CACHE_DIR") or None,
            connect_timeout_s=float(timeout) if timeout else cls.connect_timeout_s,
        )
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})


@dataclass(frozen=True)
class WorkerPart:
    """One worker's derived frames (what a task sends back; never its events)."""

    worker: str
    file: str
    n_events: int
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    error: str | None = None


def _analyzer_version() -> str:
    """A digest of the code that makes derived frames (``analyzers`` and this module): a
    derived shard is used only by the code that wrote it."""
    import hashlib

    from podscope import analyzers

    digest = hashlib.blake2b(digest_size=8)
    for source in [*sorted(Path(analyzers.__file__).parent.rglob("*.py")), Path(__file__)]:
        digest.update(source.read_bytes())
    return digest.hexdigest()


class DerivedCache:
    """Gathered derived frames (a task's batch, and the whole session's) as Arrow IPC shards
    (LZ4) in the parse cache's folder (``derived/session-<digest of the files' keys, the code
    and the frames>/<frame>.arrow``): a second run of any analysis of unchanged traces reads
    these small shards and neither parses nor maps the events (Parquet's per-file overhead
    made 25 shards 0.25 s of a page's first load).

    Shards are written to a temporary name and renamed; an unreadable one, one in a cache
    folder that is not private (``FrameCache.private``), or one moved from another entry, is a
    miss."""

    VERSION = _analyzer_version()

    def __init__(self, cache_dir: str | None) -> None:
        root = Path(cache_dir) if cache_dir else FrameCache.default_dir(os.environ)
        self.frames = FrameCache(root, FrameCache.default_max_bytes(os.environ))
        self.root = self.frames.root / "derived"  # in this user's folder of a shared one

    def file_key(self, file: str, hash_now: bool = True) -> str | None:
        path = Path(file)
        key = self.frames.key(path) if hash_now else self.frames.key_if_hashed(path)
        return f"{key}-{self.VERSION}" if key else None

    def entry(self, files: Sequence[str], hash_now: bool = True) -> Path | None:
        """The entry of some files' gathered parts (a task's batch, or the whole session):
        named by every file's key (so by the files' contents, places and the code), so that a
        changed, added or removed file is a miss; each frame is a shard of it, whichever run
        made it (the dashboard's whole analysis serves the CLI's stragglers, and the CLI's
        rules serve the Pod Viewer's part). None when a file cannot be keyed (gone,
        unreadable), or, without ``hash_now``, when a file's content was never hashed (no
        entry can hold it: ``run_session`` leaves the hashing to the tasks, in parallel,
        where the driver read a pod's 255 MB alone first)."""
        import hashlib

        try:
            keys = [self.file_key(f, hash_now) for f in files]
        except OSError:
            return None
        known = [k for k in keys if k is not None]
        if len(known) < len(keys):
            return None
        text = "\n".join(known)
        return self.root / f"session-{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}"

    def held(self, entry: Path) -> frozenset[str]:
        """The frames the entry holds (none when it is unreadable or another's)."""
        try:
            meta = json.loads((entry / "part.json").read_text())
        except (OSError, ValueError):
            return frozenset()
        names = meta.get("names") if meta.get("entry") == entry.name else None
        return frozenset(map(str, names)) if isinstance(names, list) else frozenset()

    def get(self, entry: Path, names: Sequence[str]) -> Gathered | None:
        """The gathered parts (``gather``) at ``entry``, when every frame in ``names`` is
        there."""
        if not set(names) <= self.held(entry):
            return None
        found = self._read(entry, names)
        if found is None:
            return None
        meta, frames = found
        try:
            return Gathered(
                frames,
                tuple((str(w), str(f), int(n)) for w, f, n in meta["workers"]),
                tuple(WorkerPart(str(w), str(f), 0, error=str(e)) for w, f, e in meta["failures"]),
            )
        except (KeyError, TypeError, ValueError):  # not what put writes: a miss
            return None

    def put(self, entry: Path, gathered: Gathered) -> None:
        """Writes gathered parts beside those the entry holds (a cache that cannot be
        written only warns)."""
        meta = {
            "workers": [list(w) for w in gathered.workers],
            "failures": [[p.worker, p.file, p.error] for p in gathered.failures],
            "names": sorted(self.held(entry) | set(gathered.frames)),
        }
        self._write(entry, gathered.frames, meta)

    def _read(
        self, entry: Path, names: Sequence[str]
    ) -> tuple[dict[str, Any], dict[str, pd.DataFrame]] | None:
        if not self.frames.private():
            return None
        try:
            meta = json.loads((entry / "part.json").read_text())
            if meta.get("entry") != entry.name:
                return None
            frames = {n: feather.read_feather(entry / _shard(n)) for n in names}
        except (OSError, ValueError, pa.ArrowException):
            return None
        self.frames.touch(entry)  # used now: the cache's pruning keeps it longest
        return meta, frames

    def _write(self, entry: Path, frames: Mapping[str, pd.DataFrame], meta: dict[str, Any]) -> None:
        """The frames as shards, then ``part.json`` (``meta`` and the entry's name): an entry
        without it, or with another entry's, is a miss."""
        try:
            self.frames.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not self.frames.private():
                raise OSError(f"{self.frames.root} is not private to this user: not used")
            entry.mkdir(parents=True, exist_ok=True)
            for name, frame in frames.items():
                partial = entry / f".{_shard(name)}.{os.getpid()}.partial"
                feather.write_feather(frame.reset_index(drop=True), partial, compression="lz4")
                partial.replace(entry / _shard(name))
            partial = entry / f".part.json.{os.getpid()}.partial"
            partial.write_text(json.dumps({"entry": entry.name, **meta}))
            partial.replace(entry / "part.json")
        except (OSError, ValueError, pa.ArrowException) as e:
            warnings.warn(f"podscope: derived frames not cached under {entry}: {e}", stacklevel=3)
        self.frames.prune()


def _shard(name: str) -> str:
    return name.replace(":", "-") + ".arrow"


def _frame_names(parts: frozenset[str]) -> list[str]:
    """The frames a task returns for ``parts``."""
    names = list(SMALL_FRAMES)
    if parts & {"steps", "breakdown"}:
        names += ["steps", "step_methods"]
    if "breakdown" in parts:
        names += ["breakdown", "before_call", "own_steps"]
    if "memory" in parts:
        names.append("memory")
    # ``rules`` brings ``pod_inputs`` (``RULE_PARTS``), except in the rest that follows the
    # Pod Viewer's part (``run_session``'s ``first``), which holds them already
    names += [n for n in POD_INPUT_FRAMES if "pod_inputs" in parts]
    if "rules" in parts:
        names += [n for n in RULE_FRAMES if n not in POD_INPUT_FRAMES]
    elif "xla_ops" in parts:
        names += ["xla_ops", "device_time"]
    return names + sorted(p for p in parts if p.startswith("ops:"))


def analyze_files(
    files: Sequence[str], parts: frozenset[str], cache: bool, cache_dir: str | None
) -> Gathered:
    """The task: parse a batch of workers' files (``batches``: one big worker, or several
    small ones) and reduce them together to ``parts``; with ``cache``, hash the files (the
    driver's entry for the session is named by them) and, for one worker, read its derived
    shards when all are there, else write them.

    Several small workers are reduced as one frame set: every analysis groups by worker, so
    the frames are each worker's, side by side, as one task per worker would give them, and
    the fixed cost of a reduction (a few hundred pandas calls) is paid once per batch. Their
    events are not written to the parse cache: parsing such a file again (the timeline reads
    one worker) costs what mapping its shards would.

    A trace that cannot be parsed is a failure with the parser's message, not an
    exception: it is the input's fault, and rerunning the task elsewhere cannot help; the
    batch's other workers are kept.
    """
    names = _frame_names(parts)
    store = DerivedCache(cache_dir) if cache else None
    # The files are hashed here, in parallel, for the session's entry the driver writes. A
    # worker alone is kept under its own entry too (a big worker, found again wherever it is
    # analysed); a batch of small ones is not: the session's entry holds them, and a session
    # whose files change is cut into other batches (writing them was 8 % of a pod's task).
    entry = store.entry(files) if store else None
    own = entry if len(files) == 1 else None
    if store and own and (hit := store.get(own, names)) is not None:
        return hit
    # Op tables alone read three stats: without a cache to fill, the rest of the long stats
    # frame is not built (a quarter of the parse).
    keys = OP_STATS_KEYS if not cache and all(p.startswith("ops:") for p in parts) else None
    if cache and len(files) == 1:
        parsed = _parsed_cached(files[0], cache_dir)
    else:
        parsed = parse_files([Path(f) for f in files], stats_keys=keys)
    given = {str(Path(f)): f for f in files}  # the files as the caller names them
    workers = tuple((w, given.get(f, f), n) for w, f, n in parsed.workers)
    failures = [
        WorkerPart(worker_label(Path(e.path)), given.get(str(e.path), str(e.path)), 0, error=str(e))
        for e in parsed.failures
    ]
    if parsed.frames is not None:
        reduced = _reduce(parsed.frames, parts)
        if len(workers) > 1 and len(reduced.get("steps", ())):
            _rows_per_worker(reduced["steps"], workers)
    else:
        reduced = {name: empty_frame(name) for name in SMALL_FRAMES}
    out = Gathered(reduced, workers, tuple(failures))
    if store and own:
        store.put(own, out)
    return out


def _parsed_cached(file: str, cache_dir: str | None) -> Parsed:
    """One file through the parse cache."""
    try:
        frames = load(file, cache=True, cache_dir=cache_dir)
    except TraceParseError as e:
        return Parsed(None, (), (e,))
    return Parsed(frames, ((worker_of(frames, Path(file)), file, len(frames.events)),), ())


def _rows_per_worker(steps: pd.DataFrame, workers: Sequence[tuple[str, str, int]]) -> None:
    """A batch's steps' ``event_row`` (its workers' events side by side, in order) counted
    from each worker's first event, as one task per worker gives it, in place."""
    first = pd.Series(
        np.cumsum([0] + [n for _, _, n in workers[:-1]]), index=[w for w, _, _ in workers]
    )
    offset = steps["worker"].astype(str).map(first).to_numpy(np.int64)
    steps["event_row"] = steps["event_row"].to_numpy(np.int64) - offset


def _reduce(frames: TraceFrames, parts: frozenset[str]) -> dict[str, pd.DataFrame]:
    """One or several workers' frames → their derived frames for ``parts``
    (``_frame_names``)."""
    a = SessionAnalysis(frames)
    out = {name: getattr(frames, name) for name in SMALL_FRAMES}
    if parts & {"steps", "breakdown"}:
        out["steps"], out["step_methods"] = a.steps, a.step_methods
    if "breakdown" in parts:
        own = own_steps(a.steps)  # every step of each worker; the driver picks the aligned
        for name, breakdown in (
            ("breakdown", step_breakdown),
            ("before_call", before_call_breakdown),
        ):
            out[name] = breakdown(
                frames.events,
                own,
                frames.stats,
                hlo_ops=frames.hlo_ops,
                metadata_stats=frames.metadata_stats,
            )
        out["own_steps"] = own[["worker", "step", "start_ns", "end_ns"]]
    if "memory" in parts:
        out["memory"] = a.memory
    rules = [n for n in _frame_names(parts) if n in RULE_FRAMES]
    out.update((name, getattr(a, name)) for name in rules)
    for by in BY:
        if f"ops:{by}" in parts:
            out[f"ops:{by}"] = a.op_table_for(by, None)
    return out


@dataclass(frozen=True)
class SessionRun:
    """A session analysed per worker: the merged analysis and the workers that failed."""

    analysis: SessionAnalysis
    failures: tuple[WorkerPart, ...]
    where: str


#: ``SessionRun.where`` of a run answered by the session's gathered parts in the cache.
FROM_CACHE = "the cache"


@dataclass(frozen=True)
class Gathered:
    """Workers' parts side by side: each frame concatenated over the workers that parsed, in
    file order, and what a merge needs of each worker. What a task returns for its batch and,
    concatenated (``gather``), the session's; its size follows the steps and ops, not the
    file count, so a warm run reads the session's whole (``DerivedCache``)."""

    frames: dict[str, pd.DataFrame]
    #: (worker, file, events) of each worker that parsed, in file order
    workers: tuple[tuple[str, str, int], ...]
    failures: tuple[WorkerPart, ...]


def gather(batches: Sequence[Gathered], names: Sequence[str]) -> Gathered:
    """Concatenates the batches' frames ``names`` (``_frame_names``), in order.

    Raises:
        TraceParseError: no worker parsed.
    """
    failures = tuple(p for b in batches for p in b.failures)
    ok = [b for b in batches if b.workers]
    if not ok:
        reasons = "; ".join(f"{p.worker}: {p.error}" for p in failures)
        raise TraceParseError(
            failures[0].file if failures else "<none>", "session", f"no worker parsed ({reasons})"
        )
    frames: dict[str, pd.DataFrame] = {}
    for name in names:
        if name in SMALL_FRAMES:
            frames[name] = (
                _categorical_concat([b.frames[name] for b in ok])
                if name in ok[0].frames
                else empty_frame(name)
            )
            continue
        present = [b.frames[name] for b in ok if name in b.frames]
        present = [f for f in present if len(f)] or present[:1]
        frames[name] = pd.concat(present, ignore_index=True) if present else pd.DataFrame()
    return Gathered(frames, tuple(w for b in ok for w in b.workers), failures)


def merge_gathered(
    gathered: Gathered,
    wanted: frozenset[str],
    load_events: Callable[[], TraceFrames] | None = None,
    load_worker: Callable[[str], TraceFrames] | None = None,
) -> SessionAnalysis:
    """The session's analysis from its gathered parts."""
    g = gathered.frames
    offsets = dict(
        zip(
            [w for w, _, _ in gathered.workers],
            pd.Series([n for _, _, n in gathered.workers]).cumsum().shift(1, fill_value=0),
            strict=True,
        )
    )
    small = TraceFrames(**{n: g[n] for n in SMALL_FRAMES})
    derived: dict[str, pd.DataFrame] = {}
    alignment = None
    if wanted & {"steps", "breakdown"}:
        steps = g["steps"].copy()
        steps["event_row"] = steps["event_row"] + steps["worker"].map(offsets).astype("int64")
        derived["steps"], derived["step_methods"] = steps, g["step_methods"]
        # aligned once for the breakdowns and the analysis (each aligned them: 1.6 s a time
        # on 512 hosts)
        alignment = align_steps(steps, drop_partial=False)
    if "breakdown" in wanted and alignment is not None:
        aligned = whole_steps(alignment[0])
        for name in ("breakdown", "before_call"):
            derived[name] = _aligned_breakdown(g[name], g["own_steps"], aligned)
    if "memory" in wanted:
        derived["memory"] = g["memory"].sort_values(
            ["worker", "allocator", "t_ns"], ignore_index=True
        )
    derived.update((name, g[name]) for name in _frame_names(wanted) if name in RULE_FRAMES)
    for by in BY:
        if f"ops:{by}" in wanted:
            derived[f"ops:{by}"] = _by_worker(g[f"ops:{by}"])
    return SessionAnalysis.from_parts(small, derived, load_events, load_worker, alignment)


def _by_worker(table: pd.DataFrame) -> pd.DataFrame:
    """A session's op table by worker name, as ``op_stats`` of the whole session sorts it
    (each batch's is sorted so; the batches come in file order, which a worker's label can
    sort against: ``w-1.xplane.pb`` before ``w.xplane.pb``)."""
    if "worker" not in table or table["worker"].is_monotonic_increasing:
        return table
    order = np.argsort(table["worker"].astype(str).to_numpy(), kind="stable")
    return table.iloc[order].reset_index(drop=True)


def _categorical_concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenates small frames, keeping categorical columns categorical (union of labels)."""
    out = pd.concat(frames, ignore_index=True)
    for col in frames[0].columns:
        if isinstance(frames[0][col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype(str).astype("category")
    return out


def _aligned_breakdown(
    own: pd.DataFrame, own_steps: pd.DataFrame, aligned: pd.DataFrame
) -> pd.DataFrame:
    """Each worker's breakdown of its own steps → the rows of the steps every worker has,
    numbered as ``align_steps`` numbers them for the session (``step``, ``step_num``; its
    ``aligned``)."""
    if own.empty or aligned.empty:
        return own.iloc[:0]
    key = own_steps.rename(columns={"step": "own"}).merge(
        aligned[["worker", "start_ns", "end_ns", "step", "step_num"]],
        on=["worker", "start_ns", "end_ns"],
    )
    rows = own.drop(columns=["step_num"]).merge(
        key[["worker", "own", "step", "step_num"]].rename(columns={"step": "aligned"}),
        left_on=["worker", "step"],
        right_on=["worker", "own"],
    )
    rows["step"] = rows["aligned"]
    rows["step_num"] = rows["step_num"].to_numpy()  # as step_breakdown writes it
    out = rows[list(own.columns)]
    return out.sort_values(["start_ns", "worker", "device"], ignore_index=True)


# ---------------------------------------------------------------------- parse --out

#: Frame files ``export_file`` writes, by format.
EXPORT_FORMATS = {"parquet": ".parquet", "csv": ".csv"}


@dataclass(frozen=True)
class Exported:
    """What an export task sends back: the worker's summary (``analyzers.summary.summarize``)."""

    worker: str
    file: str
    summary: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def export_file(
    file: str, out: str | None, fmt: str, cache: bool, cache_dir: str | None
) -> Exported:
    """The ``podscope parse`` task: parse one worker's file, write each of its frames to
    ``out/<frame>/<worker>.<fmt>`` (a folder per frame: ``pd.read_parquet(out/"events")``
    reads every worker's), and send back its summary only.

    Every table names its worker, and its row keys join across the workers' files
    (``schema.EXPORT_COLUMNS``). The frames carry their schema version: in each Parquet file's
    metadata (``podscope.schema_version``, ``podscope.frame``), and in ``out/schema.json``
    (every frame's columns and dtypes, for CSV readers too)."""
    label = worker_label(Path(file))
    try:
        frames = load(file, cache=cache, cache_dir=cache_dir)
    except TraceParseError as e:
        return Exported(label, file, error=str(e))
    if out is not None:
        for name, whole in frames.frames():
            frame = exported(name, whole, label)
            target = Path(out) / name / f"{label}{EXPORT_FORMATS[fmt]}"
            if fmt == "csv":
                _write_whole(target, functools.partial(frame.to_csv, index=False))
            else:
                table = pa.Table.from_pandas(frame, preserve_index=False)
                table = table.replace_schema_metadata(
                    {
                        **(table.schema.metadata or {}),
                        b"podscope.schema_version": str(SCHEMA_VERSION).encode(),
                        b"podscope.frame": name.encode(),
                    }
                )
                _write_whole(target, functools.partial(parquet.write_table, table))
        document = json.dumps(schema_document(), indent=1).encode()
        _write_whole(Path(out) / "schema.json", lambda p: p.write_bytes(document))
    return Exported(label, file, summarize(frames))


def prepare_export(out: Path, replace: bool) -> None:
    """Makes ``out`` ready for ``export_file``'s writes: an export's frames never mix with
    another's (a capture's worker the next one lacks would stay behind).

    Raises:
        FileExistsError: ``out`` holds an export and ``replace`` is off, or holds other files
            where an export's would go.
    """
    owned = [out / "schema.json", *(out / name for name in SCHEMA)]
    present = [p for p in owned if p.exists() or p.is_symlink()]
    if not present:
        return
    if not replace:
        raise FileExistsError(
            f"{out} already holds exported frames ({', '.join(p.name for p in present[:4])}): "
            "pass --replace to replace them whole, or choose another folder"
        )
    for path in present:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _write_whole(target: Path, write: Callable[[Path], object]) -> None:
    """``write`` to a file beside ``target``, renamed into place: a reader never sees a
    half-written file, and a task retried elsewhere replaces it whole."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    write(partial)
    partial.replace(target)


def merge_summaries(parts: Sequence[Exported]) -> dict[str, Any]:
    """The session's summary from its workers' (counts add up; failed workers listed).

    Raises:
        TraceParseError: no worker could be parsed.
    """
    ok = [p.summary for p in parts if p.error is None]
    if not ok:
        reasons = "; ".join(f"{p.worker}: {p.error}" for p in parts)
        raise TraceParseError(
            parts[0].file if parts else "<none>", "session", f"no worker parsed ({reasons})"
        )
    totals = ("planes", "lines", "events", "sched", "counters", "stats", "aggregates")
    return {
        "workers": [w for s in ok for w in s["workers"]],
        **{k: sum(s[k] for s in ok) for k in totals},
        "failures": [f for s in ok for f in s["failures"]] + [p.error for p in parts if p.error],
    }


# ---------------------------------------------------------------------- where tasks run

Progress = Callable[[int, int], None]


def _local_processes(config: ExecConfig, n_files: int) -> int:
    return min(config.processes or len(os.sched_getaffinity(0)), n_files)


#: Loggers that report a lost scheduler as dozens of lines of tracebacks (reconnection
#: attempts, closed comms, futures of a dead event loop); ``ExecutionError`` says it in one.
_DASK_LOGGERS = ("distributed", "tornado", "asyncio")


@contextmanager
def _quiet_dask() -> Iterator[None]:
    """Dask's own logging off while a remote cluster is in use: its failure is reported once,
    as an ``ExecutionError`` (the CLI prints one line, the page one alert)."""
    loggers = [logging.getLogger(name) for name in _DASK_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _keep_freed_memory() -> None:
    """In a pool process, which lives for one run: glibc keeps the memory a task frees for
    the next task instead of returning it to the system (``mallopt``: no ``mmap`` below 32 MiB,
    no trimming). A task then reuses its predecessor's pages: on a 1.2 M-event worker 33,000
    page faults became none and the task 0.33 s became 0.23 s. Elsewhere (no glibc) nothing
    changes."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    mallopt(m_mmap_threshold, 32 << 20)
    mallopt(m_trim_threshold, 1 << 30)
    mallopt(m_top_pad, 64 << 20)


#: How much a background pool's processes yield (``os.nice``): at 10, the kernel gives a
#: process of normal priority about ten times their share of a core.
BACKGROUND_NICE = 10


def _background_process() -> None:
    """A pool process of a background run (``run_session``'s rest, after the Pod Viewer's
    part): the page being drawn from the first part, and the server's requests, come first."""
    _keep_freed_memory()
    with suppress(OSError):
        os.nice(BACKGROUND_NICE)


#: How a pool's processes start, and what ``where`` calls them.
_POOLS = {"fork": "forked processes", "forkserver": "processes from a fork server"}


def _pool_start() -> str | None:
    """How a small session's pool starts: forked from this process while no other thread runs
    here (the children inherit its imports: no start-up to pay); from a fork server while one
    does. A forked child gets a copy of every lock held at that instant and no thread to
    release it: in a test run with gRPC's poller and Dask's event loop running, a forked
    task waited forever. The fork server is a fresh single-threaded process, started once
    and kept, that has imported this module. Native pools (OpenBLAS, jemalloc) reset
    themselves at a fork and do not count. None: neither method exists here."""
    methods = multiprocessing.get_all_start_methods()
    if sys.platform == "linux" and "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else None


def _pool_context(method: str) -> Any:
    """The multiprocessing context of a pool started by ``method``; a fork server imports
    this module once, before its first fork (its children then start warm), and is started
    here (``_start_fork_server``).

    Raises:
        ExecutionError: the fork server would import another PodScope than this process's.
    """
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload([__name__])
        _start_fork_server()
    return ctx


def shadowing_package(cwd: Path | None = None) -> Path | None:
    """A ``podscope`` package in the working folder that is not the one this process runs:
    what a process started with ``python -c`` (a fork server) would import instead, since its
    ``sys.path`` begins with the working folder. None when there is none."""
    import podscope

    here = Path(cwd or os.getcwd()) / "podscope"
    if not (here / "__init__.py").is_file():
        return None
    ours = Path(podscope.__file__).resolve().parent
    return here if here.resolve() != ours else None


#: Held while the fork server starts (``_start_fork_server`` sets this process's environment).
_FORK_SERVER_START = threading.Lock()


def _start_fork_server() -> None:
    """Starts the fork server (once per process) so that it imports this process's PodScope.

    CPython's fork server runs ``python -c …`` and ignores the parent's ``sys.path``: started
    from a folder that holds a ``podscope/`` source tree, it and every pool process imported
    that one, and died on it ("a process of the pool died", for good). On Python 3.11+ it is
    started with ``PYTHONSAFEPATH`` (no working folder on its path); before 3.11 that cannot be
    said, and the analysis refuses, naming the folder.

    Raises:
        ExecutionError: a shadowing ``podscope/`` here, on Python 3.10.
    """
    from multiprocessing import forkserver

    shadow = shadowing_package()
    if shadow is not None and sys.version_info < (3, 11):
        raise ExecutionError(
            f"{shadow} is a podscope source tree in the folder this runs from, which the "
            "analysis's processes would import instead of this PodScope: run from another "
            "folder (or use Python 3.11+)"
        )
    # One thread at a time: two uploads starting it at once each saved the other's "1" and
    # one put it back for good, and every later `python -m` of this process lost its folder.
    with _FORK_SERVER_START:
        saved = os.environ.get("PYTHONSAFEPATH")
        os.environ["PYTHONSAFEPATH"] = "1"  # read by the server's interpreter at its start only
        try:
            forkserver.ensure_running()
        finally:
            if saved is None:
                os.environ.pop("PYTHONSAFEPATH", None)
            else:
                os.environ["PYTHONSAFEPATH"] = saved


def fork_server_context() -> Any:
    """The multiprocessing context of processes forked from the fork server (started here if
    it is not yet; ``spawn`` where fork servers do not exist): for a process of its own
    started from a server with threads (an upload's reading, ``app.uploads``)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    return _pool_context("forkserver")


def start_pool_server() -> None:
    """Starts, ahead of the first run, the fork server that pools started beside other
    threads fork from (``_pool_start``): a long-lived program with threads (the dashboard's
    server) then pays the server's imports (1-2 s) at its own start, not at the first
    session it analyses. Nothing where fork servers do not exist."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    _pool_context("forkserver")


@contextmanager
def _client(
    config: ExecConfig, n_files: int, small_tasks: bool = False, background: bool = False
) -> Iterator[tuple[Any, str]]:
    """Where tasks run: a Dask client (an existing cluster, or a ``LocalCluster`` for a
    session with a big worker), a pool of local processes for a small session or one whose
    tasks are all small (``small_tasks``: batches of small files, a pod's hosts) on a machine
    with several cores (``_pool_start``), or None (one file, one core).

    A small task's memory is bounded by its batch (``BATCH_BYTES`` of trace), so a pool runs
    it as well as a cluster would, without the cluster's start: two fresh interpreters
    importing Dask and pandas, 4-5 s of a 512-host pod's first analysis. A big worker's parse
    may take gigabytes: on a ``LocalCluster``, a process past its memory limit is restarted
    and its task retried, where in a pool the kernel would kill the biggest process.

    ``background``: a pool's processes run at a lower priority (``_background_process``)."""
    has_dask = importlib.util.find_spec("distributed") is not None  # the [dask] extra
    local = config.scheduler is None
    if local and (n_files < config.in_process_below or small_tasks or not has_dask):
        n = _local_processes(config, n_files)
        pooled = config.fork or (small_tasks and n_files >= config.in_process_below)
        method = _pool_start() if pooled else None
        if n < 2 or method is None:
            yield None, "in-process"
            return
        with ProcessPoolExecutor(
            max_workers=n,
            mp_context=_pool_context(method),
            initializer=_background_process if background else _keep_freed_memory,
        ) as pool:
            yield pool, f"{n} {_POOLS[method]}"
        return
    if not has_dask:
        raise ExecutionError(
            f"--scheduler {config.scheduler} needs the dask extra: pip install 'podscope[dask]'"
        )
    from distributed import Client, LocalCluster

    if config.scheduler is not None:
        with _quiet_dask():
            try:
                client = Client(config.scheduler, timeout=f"{config.connect_timeout_s}s")
            except (OSError, TimeoutError) as e:
                raise ExecutionError(f"Dask scheduler {config.scheduler} unreachable: {e}") from e
            with client:
                yield client, config.scheduler
        return
    n = _local_processes(config, n_files)
    with (
        LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            memory_limit=config.memory_limit,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(_keep_freed_memory)  # our processes, for this run: as a pool's
        yield client, f"LocalCluster({n} processes)"


def run_tasks(
    task: Callable[..., Any],
    units: Sequence[str | tuple[str, ...]],
    config: ExecConfig,
    args: tuple[Any, ...],
    progress: Progress | None = None,
    on_start: Callable[[str], None] | None = None,
    small_tasks: bool = False,
    background: bool = False,
) -> tuple[list[Any], str]:
    """Runs ``task(unit, *args)`` once per unit (a file, or a batch of files: ``batches``)
    where ``config`` says (see ``_client``: ``small_tasks``, every unit's memory is bounded;
    ``background``, a pool's processes yield the cores to this one's); ``progress`` counts
    files.

    Returns:
        The results in the units' order, and where they ran.

    Raises:
        ExecutionError: the scheduler is unreachable or lost mid-run.
    """
    compiled.require()  # here, not as every task's failure
    sizes = [len(u) if isinstance(u, tuple) else 1 for u in units]
    total = sum(sizes)
    done = 0

    def finished(i: int) -> None:
        nonlocal done
        done += sizes[i]
        if progress:
            progress(done, total)

    results: dict[int, Any] = {}
    with _client(config, total, small_tasks, background) as (client, where):
        if on_start:
            on_start(where)
        if client is None:
            for i, unit in enumerate(units):
                results[i] = task(unit, *args)
                finished(i)
        elif isinstance(client, ProcessPoolExecutor):
            results = _on_pool(client, task, units, args, finished)
        else:
            results = _on_cluster(client, task, units, args, finished)
    return [results[i] for i in range(len(units))], where


#: A worker's file past this size is a task of its own (``batches``), run on Dask
#: (``small_units``): its parse may take gigabytes.
BIG_FILE_BYTES = 16 << 20
#: A task's batch of small workers: about this many bytes of trace in all (a batch of 64
#: hosts of 0.5 MB peaks at 360 MB in its process), and at most ``BATCH_FILES`` files
#: (``batches``). Twice 16 MB: 512 such hosts' Pod Viewer part took 7.5-9.1 s in batches of
#: 33, 6.7-7.3 s in batches of 64 (a batch's fixed cost, paid half as often).
BATCH_BYTES = 32 << 20
BATCH_FILES = 64


def _batch_processes(config: ExecConfig, n_files: int) -> int:
    """The processes ``batches`` keeps busy: this machine's, or a remote cluster's (its size
    is not known before it is reached: ``processes``, else 16)."""
    if config.scheduler is None:
        return _local_processes(config, n_files)
    return config.processes or 16


def batches(files: Sequence[Path], processes: int) -> list[tuple[str, ...]]:
    """The session's files cut into tasks, in order: small workers together, up to
    ``BATCH_BYTES`` of trace and ``BATCH_FILES`` files a batch, and no fewer than four
    batches per process while the files allow (the processes stay busy to the end, and the
    progress moves); a file past ``BIG_FILE_BYTES`` is a batch of its own. A batch's cost
    follows its events: a task per small worker paid a reduction's fixed cost (a few hundred
    pandas calls, about 70 ms) per worker."""
    sizes = []
    for f in files:
        try:
            sizes.append(f.stat().st_size)
        except OSError:  # gone or unreadable: its task says why
            sizes.append(0)
    per_batch = max(1, min(BATCH_FILES, -(-len(files) // (4 * max(processes, 1)))))
    out: list[tuple[str, ...]] = []
    batch: list[str] = []
    held, full = 0, False  # full: the batch takes no more files
    for f, size in zip(files, sizes, strict=True):
        big = size > BIG_FILE_BYTES
        if batch and (big or full or held + size > BATCH_BYTES):
            out.append(tuple(batch))
            batch, held = [], 0
        batch.append(str(f))
        held += size
        full = big or len(batch) >= per_batch
    if batch:
        out.append(tuple(batch))
    return out


def small_units(units: Sequence[tuple[str, ...]]) -> bool:
    """Whether every unit of ``batches`` is small: several files (a batch holds at most
    ``BATCH_BYTES``, none past ``BIG_FILE_BYTES``) or one file of at most ``BIG_FILE_BYTES``."""

    def size(f: str) -> int:
        try:
            return os.stat(f).st_size
        except OSError:  # gone or unreadable: its task says why
            return 0

    return all(len(u) > 1 or size(u[0]) <= BIG_FILE_BYTES for u in units)


def run_session(
    files: Sequence[Path],
    config: ExecConfig,
    parts: frozenset[str] = PARTS,
    progress: Progress | None = None,
    load_events: Callable[[], TraceFrames] | None = None,
    on_start: Callable[[str], None] | None = None,
    first: Callable[[SessionRun], None] | None = None,
) -> SessionRun:
    """Runs ``analyze_files`` tasks (``batches`` of the files) where ``config`` says and
    merges the results.

    Args:
        files: the session's worker files (``trace_parsers.resolve``).
        config: where to run.
        parts: which derived frames to compute (``PARTS``).
        progress: called with (tasks done, total) as tasks finish; an exception it raises
            (a cancel) stops the run and cancels what has not run.
        load_events: how the merged analysis loads the whole session's events if an
            analysis that reads them and was not computed per worker is asked for.
        on_start: called with where the tasks run, once that is known (and again for the
            rest, with ``first``).
        first: when the session is not in the cache whole, the Pod Viewer's parts
            (``HEAD_PARTS``) are computed first and handed to it; then the rest of ``parts``
            (the progress counts again from 0) at a lower priority, where the processes are
            this machine's. The Pod Viewer's analysis reads no events: its other
            attributes raise.

    Returns:
        The merged analysis, the failed workers (their parse errors) and where it ran.

    Raises:
        ValueError: an unknown part.
        ExecutionError: the scheduler is unreachable or lost mid-run.
        TraceParseError: no worker could be parsed.
    """
    unknown = set(parts) - PARTS
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; known: {sorted(PARTS)}")
    if "rules" in parts:
        parts = parts | RULE_PARTS
    parts = frozenset(parts)
    # Warm: the session's gathered parts in one read (its size follows the steps and ops, not
    # the file count), without starting a task; else a task per batch of files for the parts
    # the cache does not hold (another run, the CLI's or the dashboard's, may hold some),
    # then gathered with those it holds.
    store = DerivedCache(config.cache_dir) if config.cache else None
    names = _frame_names(parts)
    files_ = [str(f) for f in files]
    entry = store.entry(files_, hash_now=False) if store else None
    held = store.held(entry) if store and entry else frozenset()
    todo = frozenset(p for p in parts if not set(_frame_names(frozenset({p}))) <= held)
    gathered = store.get(entry, names) if store and entry and not todo else None
    where = FROM_CACHE
    if gathered is not None:
        if on_start:
            on_start(where)
        if progress:
            progress(len(files), len(files))
    else:
        todo = todo or parts  # held, yet unreadable: all again
        units = batches(files, _batch_processes(config, len(files)))
        head = (
            store.get(entry, _frame_names(HEAD_PARTS))
            if store and entry and first is not None and not todo & HEAD_PARTS
            else None
        )
        if head is not None and first is not None:  # the Pod Viewer's part from the cache
            first(
                SessionRun(_merged(head, HEAD_PARTS, config, _no_events), head.failures, FROM_CACHE)
            )
            computed, where = _gathered(units, config, todo, progress, on_start, background=True)
        elif first is None or todo <= HEAD_PARTS or not small_units(units):
            computed, where = _gathered(units, config, todo, progress, on_start)
        else:
            # The Pod Viewer's parts first, handed over, then the rest at a low priority: the
            # page being drawn keeps the cores (and this process's lock: the session's entry
            # is written once, whole, at the end). Small units only: a big worker's parse is
            # most of its task, and would be paid twice.
            head, head_where = _gathered(units, config, HEAD_PARTS, progress, on_start)
            first(
                SessionRun(_merged(head, HEAD_PARTS, config, _no_events), head.failures, head_where)
            )
            rest = todo - HEAD_PARTS
            tail, where = _gathered(units, config, rest, progress, on_start, background=True)
            computed = Gathered({**head.frames, **tail.frames}, tail.workers, tail.failures)
        kept = [n for n in names if n not in computed.frames]
        cached = store.get(entry, kept) if store and entry and kept else None
        if kept and cached is None:  # gone since it was listed: computed too
            more, where = _gathered(units, config, parts - todo, progress, on_start)
            computed = Gathered({**more.frames, **computed.frames}, more.workers, more.failures)
        frames = {**(cached.frames if cached else {}), **computed.frames}
        gathered = Gathered({n: frames[n] for n in names}, computed.workers, computed.failures)
        entry = entry or (store.entry(files_) if store else None)
        if store and entry:
            store.put(entry, computed)  # beside the frames the entry holds
    return SessionRun(_merged(gathered, parts, config, load_events), gathered.failures, where)


def _gathered(
    units: Sequence[tuple[str, ...]],
    config: ExecConfig,
    parts: frozenset[str],
    progress: Progress | None,
    on_start: Callable[[str], None] | None,
    background: bool = False,
) -> tuple[Gathered, str]:
    """A task per batch of files (``batches``), their parts gathered, and where they ran."""
    args = (parts, config.cache, config.cache_dir)
    done, where = run_tasks(
        analyze_files, units, config, args, progress, on_start, small_units(units), background
    )
    return gather(done, _frame_names(parts)), where


def _merged(
    gathered: Gathered,
    parts: frozenset[str],
    config: ExecConfig,
    load_events: Callable[[], TraceFrames] | None,
) -> SessionAnalysis:
    worker_files = {worker: file for worker, file, _ in gathered.workers}

    def load_worker(worker: str) -> TraceFrames:  # the timeline reads one worker at a time
        return load(worker_files[worker], cache=config.cache, cache_dir=config.cache_dir)

    return merge_gathered(gathered, parts, load_events, load_worker)


def worker_tasks(workers: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """Worker → (task, address) from the manifests beside the workers' files (the ``file``
    column of a ``workers`` frame; ``layout.tasks_of``): what ``SessionAnalysis.tasks``
    names them by."""
    files = workers["file"].astype(str).tolist() if "file" in workers else []
    found = layout.tasks_of(Path(f).parent for f in files if f)
    return {w: found[w] for w in workers["worker"].astype(str).unique() if w in found}


def _no_events() -> TraceFrames:
    """The ``load_events`` of ``run_session``'s first part: what it shows is computed, and an
    analysis that would read every worker's events instead is a bug, not a wait."""
    raise RuntimeError(
        "the Pod Viewer's part of the analysis read a frame it does not hold "
        f"(it holds {sorted(HEAD_PARTS)})"
    )


def _on_pool(
    pool: ProcessPoolExecutor,
    task: Callable[..., Any],
    units: Sequence[Any],
    args: tuple[Any, ...],
    finished: Callable[[int], None],
) -> dict[int, Any]:
    futures = {pool.submit(task, u, *args): i for i, u in enumerate(units)}
    results: dict[int, Any] = {}
    try:
        for future in concurrent.futures.as_completed(futures):
            try:
                results[futures[future]] = future.result()
            except BrokenProcessPool as e:
                raise ExecutionError(
                    f"a process of the pool died mid-run (killed, or out of memory): {e}"
                ) from e
            finished(futures[future])
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # Ctrl-C: start nothing more
        raise
    return results


def _on_cluster(
    client: Any,
    task: Callable[..., Any],
    units: Sequence[Any],
    args: tuple[Any, ...],
    finished: Callable[[int], None],
) -> dict[int, Any]:
    from distributed import as_completed

    def key(i: int, unit: Any) -> str:
        first = unit[0] if isinstance(unit, tuple) else unit
        return f"podscope-{task.__name__}-{i}-{first}"

    futures = {
        client.submit(task, u, *args, key=key(i, u), retries=2): i for i, u in enumerate(units)
    }
    results: dict[int, Any] = {}
    try:
        for future in as_completed(futures):
            try:
                results[futures[future]] = future.result()
            except (OSError, TimeoutError, concurrent.futures.CancelledError) as e:
                # the scheduler went away: its connection fails, or it cancels the futures
                raise ExecutionError(f"lost the Dask cluster mid-run: {e}") from e
            finished(futures[future])
    except BaseException:
        client.cancel(list(futures))  # Ctrl-C or a lost cluster: leave nothing running
        raise
    return results


def analyze_path(path: str | Path, session: str | None, config: ExecConfig) -> SessionAnalysis:
    """``SessionAnalysis.from_path``: the capture at ``path`` (``trace_parsers.resolve``)
    analysed per worker where ``config`` says; the events, if an analysis needs them, are
    loaded on first use.

    Raises:
        TraceParseError: no capture there, or no file could be parsed.
        ExecutionError: the scheduler is unreachable or lost mid-run.
    """
    files = resolve(path, session)
    cache = config.cache_dir if config.cache else None
    run = run_session(
        files,
        config,
        load_events=lambda: load(path, session=session, cache=config.cache, cache_dir=cache),
    )
    return run.analysis
