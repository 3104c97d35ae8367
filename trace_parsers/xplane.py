"""XPlane (``.xplane.pb``, plain or gzip) → ``TraceFrames``.

The wire format is decoded by the C extension ``_xplane_fast`` into flat columns; this module
turns those into the typed frames of ``trace_parsers.schema`` with numpy, never looping over
events in Python.

    >>> from podscope.trace_parsers.xplane import parse_xplane
    >>> frames = parse_xplane(open("host_6000.xplane.pb", "rb").read(), worker="host_6000")
    >>> frames.events.groupby("name", observed=True)["dur_ps"].sum().nlargest(5)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from podscope.trace_parsers import compiled

try:
    from podscope.trace_parsers import _column_kernels, _xplane_fast
except ImportError as e:  # installed without a C compiler
    _column_kernels = _xplane_fast = compiled.missing(e)
from podscope.trace_parsers._columns import (
    cat,
    cat_of,
    code_dtype,
    factorize_labels,
    gather,
    id_cat,
    missing,
)
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.hlo import breakdown_stats, hlo_ops
from podscope.trace_parsers.nesting import depth_column, nest_columns, nest_if_sorted
from podscope.trace_parsers.schema import (
    CAT,
    PROMOTED_STATS,
    SCHEMA,
    TraceFrames,
    concat_frames,
    validate,
)
from podscope.trace_parsers.tfop import split_tf_op
from podscope.trace_parsers.xplane_wire import (
    _TABLES,
    FORMAT,
    METADATA_PLANE,
    Decoder,
    EventMetadataTable,
    LineTable,
    PlaneTable,
    StatMetadataTable,
    decode_wire,
)
from podscope.trace_parsers.xplane_wire import (
    lookup as _lookup,
)


class StatKind(IntEnum):
    """Codes of the decoder's stat kind column: which field of XStat's value oneof was set
    (the C decoder exports them as ``KIND_*``)."""

    NONE = _xplane_fast.KIND_NONE
    DOUBLE = _xplane_fast.KIND_DOUBLE
    UINT64 = _xplane_fast.KIND_UINT64
    INT64 = _xplane_fast.KIND_INT64
    STR = _xplane_fast.KIND_STR
    BYTES = _xplane_fast.KIND_BYTES
    REF = _xplane_fast.KIND_REF


#: Category labels of the stats frames' ``kind`` column, indexed by ``StatKind``.
KINDS = [k.name.lower() for k in StatKind]
#: Line timestamps below this are offsets from the capture start, not epoch times
#: (TF 2.x writes them relative to the Task Environment plane's profile_start_time;
#: checked on a TF 2.21 capture: line.timestamp_ns = 14551, profile_start_time = 1.796e18).
_EPOCH_NS_MIN = 10**17


def parse_xplane(
    data: bytes,
    *,
    worker: str,
    source: str = "<bytes>",
    decoder: Decoder = _xplane_fast.decode_xspace,
    stats_keys: Collection[str] | None = None,
) -> TraceFrames:
    """Parses one serialized XSpace (one worker's capture).

    Args:
        data: the file's bytes, plain or gzip-compressed (``trace_parsers.budget`` bounds what
            it may inflate to and the events and stats it may make).
        worker: label for this capture (``host_port``), written to every frame's ``worker``.
        source: file name for error messages and the ``workers`` frame.
        decoder: the wire decoder (the C extension's ``decode_xspace``).
        stats_keys: keep only these keys' rows in the ``stats`` frame (the event columns are
            whole): for a reader of a few stats, such as the op tables
            (``analyzers.ops.OP_STATS_KEYS``). Frames parsed so are not for the cache.

    Returns:
        Validated ``TraceFrames``.

    Raises:
        TraceParseError: empty, truncated, corrupt or non-XPlane input.
    """
    decoded = decode(data, worker=worker, source=source, decoder=decoder)
    del data  # decoded: strings were copied out (freed here unless the caller keeps a reference)
    return build_frames([decoded], stats_keys, source)


class Decoded(NamedTuple):
    """One file's XSpace, decoded (``decode``); ``build_frames`` makes the frames of one or
    several."""

    raw: dict[str, Any]
    worker: str
    source: str
    #: ``hlo_ops`` of a capture with XLA's metadata plane, else None.
    hlo: pd.DataFrame | None
    #: A TPU capture's per-op breakdown stats (``metadata_stats`` rows), else None.
    breakdowns: pd.DataFrame | None

    @property
    def n_events(self) -> int:
        return len(self.raw["ev_duration_ps"]) // 8


def decode(
    data: bytes,
    *,
    worker: str,
    source: str = "<bytes>",
    decoder: Decoder = _xplane_fast.decode_xspace,
) -> Decoded:
    """The first half of ``parse_xplane``: one file's bytes decoded, within its budget.

    Raises:
        TraceParseError: empty, truncated, corrupt or non-XPlane input.
    """
    raw, data, budget = decode_wire(data, source, decoder)
    names = raw["planes"].name
    gpu = any(str(n).startswith("/device:GPU") for n in names)
    hlo = (
        hlo_ops(data, worker=worker, source=source, budget=budget, rules="gpu" if gpu else "cpu")
        if METADATA_PLANE in names
        else None
    )
    breakdowns = None
    if any(str(n).startswith("/device:TPU") for n in names):
        try:
            breakdowns = breakdown_stats(data, worker=worker)
        except ValueError as e:
            raise TraceParseError(source, FORMAT, f"device metadata: {e}") from e
    if breakdowns is not None and not len(breakdowns):
        breakdowns = None
    return Decoded(raw, worker, source, hlo, breakdowns)


def build_frames(
    files: Sequence[Decoded], stats_keys: Collection[str] | None = None, source: str = "<batch>"
) -> TraceFrames:
    """The frames of decoded files, side by side as ``loader.merge`` of each file's frames
    gives them (up to the order of categories): their tables are put end to end and built
    once, so the cost of building frames (a few hundred pandas calls) is paid once, not per
    file. Consumes the files' decoded columns.

    Raises:
        TraceParseError: the frames do not validate (named ``source``).
    """
    raw = _concat(files)
    frames = _Builder(raw, files, stats_keys).build()
    hlo = [d.hlo for d in files if d.hlo is not None]
    if hlo:
        frames = replace(frames, hlo_ops=hlo[0] if len(hlo) == 1 else concat_frames("hlo_ops", hlo))
    breakdowns = [d.breakdowns for d in files if d.breakdowns is not None]
    if breakdowns:
        merged = pd.concat(
            [frames.metadata_stats.astype(object), *(b.astype(object) for b in breakdowns)],
            ignore_index=True,
        )
        if len(files) > 1:  # each file's rows together, as a merge of each file's frames
            order = merged["worker"].map({d.worker: i for i, d in enumerate(files)})
            merged = merged.iloc[np.argsort(order.to_numpy(), kind="stable")]
        frames = replace(
            frames,
            metadata_stats=merged.reset_index(drop=True).astype(dict(SCHEMA["metadata_stats"])),
        )
    return validate(frames, source)


#: Per row table, its columns that count rows of another table, and which: a file's rows put
#: after earlier files' rows are shifted by those files' row counts.
_SHIFTED = {
    "lines": {"plane": "planes", "first_event": "events"},
    "event_metadata": {"plane": "planes", "first_stat": "metadata_stats"},
    "stat_metadata": {"plane": "planes"},
}
#: The decoder's column buffers (dtype, and the rows they count, if any).
_COLUMNS = {
    "ev_plane": (np.int32, "planes"),
    "ev_line": (np.int32, "lines"),
    "ev_metadata_id": (np.int64, None),
    "ev_offset_ps": (np.int64, None),
    "ev_duration_ps": (np.int64, None),
    "ag_plane": (np.int32, "planes"),
    "ag_line": (np.int32, "lines"),
    "ag_metadata_id": (np.int64, None),
    "ag_num_occurrences": (np.int64, None),
    "ag_duration_ps": (np.int64, None),
}
#: Per stat table, the rows its owners count.
_STAT_OWNERS = {"event_stats": "events", "plane_stats": "planes", "metadata_stats": "metadata"}


def _concat(files: Sequence[Decoded]) -> dict[str, Any]:
    """The files' decoded tables end to end, as one XSpace of all their planes would decode:
    row references shifted by the rows of the files before (string ids too). Adds
    ``plane_file``, each plane's file. Pops the files' columns as it goes."""
    raws = [d.raw for d in files]
    counts = {
        "planes": [len(r["planes"].id) for r in raws],
        "lines": [len(r["lines"].id) for r in raws],
        "events": [len(r["ev_duration_ps"]) // 8 for r in raws],
        "metadata": [len(r["event_metadata"].id) for r in raws],
        "metadata_stats": [len(r["metadata_stats"]["kind"]) for r in raws],
        "strings": [len(r["strings"]) for r in raws],
    }
    plane_file = np.repeat(np.arange(len(raws), dtype=np.int32), counts["planes"])
    if len(raws) == 1:
        return {**raws[0], "plane_file": plane_file}
    before = {k: np.cumsum([0, *v[:-1]]).tolist() for k, v in counts.items()}
    out: dict[str, Any] = {"plane_file": plane_file}
    for key, table in _TABLES.items():
        shifted = _SHIFTED.get(key, {})
        out[key] = table._make(
            np.concatenate(
                [
                    np.asarray(r[key][i], dtype=np.int64) + before[shifted[f]][j]
                    for j, r in enumerate(raws)
                ]
            )
            if f in shifted
            else [v for r in raws for v in r[key][i]]
            for i, f in enumerate(table._fields)
        )
    for key, (dtype, rows) in _COLUMNS.items():
        out[key] = _joined([r.pop(key) for r in raws], dtype, before[rows] if rows else None)
    for key, rows in _STAT_OWNERS.items():
        tables = [r.pop(key) for r in raws]
        out[key] = {
            "owner": _joined([t["owner"] for t in tables], np.int32, before[rows]),
            "metadata_id": _joined([t["metadata_id"] for t in tables], np.int64),
            "kind": _joined([t["kind"] for t in tables], np.int8),
            "ival": _joined([t["ival"] for t in tables], np.int64),
            # -1: no string
            "sid": _joined([t["sid"] for t in tables], np.int32, before["strings"], keep=-1),
        }
    out["strings"] = [s for r in raws for s in r["strings"]]
    return out


def _joined(
    buffers: Sequence[Any], dtype: Any, shift: Sequence[int] | None = None, keep: int | None = None
) -> np.ndarray:
    """Column buffers end to end, each shifted by its ``shift`` (values equal to ``keep`` are
    left as they are)."""
    parts = [np.frombuffer(b, dtype=dtype) for b in buffers]
    if shift is not None:
        parts = [
            p + np.asarray(s, dtype=dtype) if keep is None else np.where(p == keep, p, p + s)
            for p, s in zip(parts, shift, strict=True)
        ]
    return np.concatenate(parts).astype(dtype, copy=False)


class _Builder:
    """Turns the decoder's raw dict of one or several files (``_concat``) into frames (one
    instance per frame set, used once)."""

    def __init__(
        self,
        raw: dict[str, Any],
        files: Sequence[Decoded],
        stats_keys: Collection[str] | None = None,
    ) -> None:
        self.raw = raw
        self.files = files
        self.stats_keys = stats_keys
        planes: PlaneTable = raw["planes"]
        self.plane_names = [name or "" for name in planes.name]
        self.plane_ids = np.array(planes.id, dtype=np.int64)
        self.plane_file = raw.pop("plane_file")
        # Each plane's worker, as a code into the workers' labels (the frames' worker column).
        codes, self.worker_labels = factorize_labels([d.worker for d in files])
        self.plane_worker = gather(codes, self.plane_file)
        lines: LineTable = raw["lines"]
        self.line_plane = np.array(lines.plane, dtype=np.int64)
        self.line_file = gather(self.plane_file, self.line_plane)
        self.line_ids = np.array(lines.id, dtype=np.int64)
        self.line_names = [
            shown or name or f"line {i}"
            for shown, name, i in zip(lines.display_name, lines.name, lines.id, strict=True)
        ]
        self.line_ts = np.array(lines.timestamp_ns, dtype=np.int64)
        self.line_events = np.array(lines.n_events, dtype=np.int64)  # timed ones
        sm: StatMetadataTable = raw["stat_metadata"]
        self.sm_plane = np.array(sm.plane, dtype=np.int64)
        self.sm_ids = np.array(sm.id, dtype=np.int64)
        self.sm_names = [name or "" for name in sm.name]
        em: EventMetadataTable = raw["event_metadata"]
        self.em_plane = np.array(em.plane, dtype=np.int64)
        self.em_ids = np.array(em.id, dtype=np.int64)
        self.em_names = [name or "" for name in em.name]
        self.em_display = [name or "" for name in em.display_name]
        # Index into PROMOTED_STATS of each stat-metadata row, -1 for stats kept long.
        pos = {k: i for i, k in enumerate(PROMOTED_STATS)}
        self.sm_promoted = np.array([pos.get(nm, -1) for nm in self.sm_names], dtype=np.int8)
        # Strings of str stats, then stat-metadata names (targets of ref stats), one code space,
        # factorized once for every column that reads it; stat keys likewise ("" without one).
        self.strings = factorize_labels(list(raw["strings"]) + self.sm_names)
        self.keys = factorize_labels([*self.sm_names, ""])
        self.plane_stats = self._stat_table(raw["plane_stats"], owner_plane=None)
        self.start_base, self.stop_ns, self.time_base = self._time_base()

    # ------------------------------------------------------------------ helpers

    def _stat_table(
        self, st: dict[str, bytes], owner_plane: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        """Typed numpy columns of one stat table, with keys and ref strings resolved."""
        owner = np.frombuffer(st["owner"], dtype=np.int32)
        meta = np.frombuffer(st["metadata_id"], dtype=np.int64)
        kind = np.frombuffer(st["kind"], dtype=np.int8)
        ival = np.frombuffer(st["ival"], dtype=np.int64)
        sid = np.frombuffer(st["sid"], dtype=np.int32)
        # A stat's plane: its owner's (event, metadata) or the owner itself (plane stats).
        plane_of, by_owner = (owner, None) if owner_plane is None else (owner_plane, owner)
        key_row = _lookup(plane_of, meta, self.sm_plane, self.sm_ids, by_owner)
        is_ref = kind == StatKind.REF
        if is_ref.any():
            ref_plane = owner[is_ref] if owner_plane is None else owner_plane[owner[is_ref]]
            ref_row = _lookup(ref_plane, ival[is_ref], self.sm_plane, self.sm_ids)
            sid = sid.copy()
            sid[is_ref] = np.where(ref_row >= 0, len(self.raw["strings"]) + ref_row, -1)
        promoted_of_row = np.append(self.sm_promoted, np.int8(-1))  # int8, as long_stats reads it
        return {
            "owner": owner,
            "key_row": key_row,
            "promoted": gather(promoted_of_row, key_row),
            "kind": kind,
            "ival": ival,  # the value; a double stat's bits (read by kind)
            "sid": sid,
        }

    def _time_base(self) -> tuple[np.ndarray, list[int | None], list[str]]:
        """Per file: what its line timestamps are offsets from (0 when epoch times), the
        capture's stop time, and whether its times are epoch or relative ones."""
        ps = self.plane_stats
        n = len(self.files)
        values: list[dict[str, int]] = [{} for _ in range(n)]
        wanted = ("profile_start_time", "profile_stop_time")  # int or double stats
        rows = [i for i, name in enumerate(self.sm_names) if name in wanted]
        for i in np.flatnonzero(np.isin(ps["key_row"], rows)).tolist():
            number, is_set = _numbers(ps["kind"][i : i + 1], ps["ival"][i : i + 1])
            if is_set[0]:
                file = self.plane_file[ps["owner"][i]]
                values[file][self.sm_names[ps["key_row"][i]]] = int(number[0])
        base, stops, kinds = np.zeros(n, dtype=np.int64), [], []
        bounds = np.searchsorted(self.line_file, np.arange(n + 1))
        for f in range(n):
            start, stop = values[f].get(wanted[0]), values[f].get(wanted[1])
            ts = self.line_ts[bounds[f] : bounds[f + 1]]
            relative = bool(len(ts)) and int(ts.max()) < _EPOCH_NS_MIN
            base[f] = start if start is not None and relative else 0
            stops.append(stop)
            kinds.append("epoch" if start is not None or not relative else "relative")
        return base, stops, kinds

    def _first_line_ts(self) -> np.ndarray:
        """Per file, its first line's timestamp (0 without lines)."""
        n = len(self.files)
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, self.line_file, self.line_ts)
        first[first == np.iinfo(np.int64).max] = 0
        return first

    # ------------------------------------------------------------------ frames

    def build(self) -> TraceFrames:
        """The frames, in three steps: the event rows (order, nesting, timed columns), the
        event stats (promoted columns and the long ``stats`` frame), then the small frames.
        Each decoder column is freed (popped from ``raw``, its views dropped) once it is spent:
        memory peaks while the events frame and the stat tables coexist."""
        cols, meta_row, order = self._event_rows()
        stats, mst = self._event_stats(cols, meta_row, order)
        del meta_row, order
        cols["op_name"], cols["op_type"] = split_tf_op(cols["tf_op"], cols["name"])
        events = pd.DataFrame({c: _as(cols[c], t) for c, t in SCHEMA["events"].items()}, copy=False)
        del cols
        return self._frames(events, stats, mst)

    def _event_rows(self) -> tuple[dict[str, Any], np.ndarray, np.ndarray | None]:
        """The timed columns of ``events`` (in row order), each event's metadata row (decoder
        order), and the row order (None when the decoder's order is already by line, start,
        longest first)."""
        raw = self.raw
        ev_plane = np.frombuffer(raw["ev_plane"], dtype=np.int32)
        ev_line = np.frombuffer(raw.pop("ev_line"), dtype=np.int32)
        dur = np.frombuffer(raw["ev_duration_ps"], dtype=np.int64)
        ev_meta = np.frombuffer(raw.pop("ev_metadata_id"), dtype=np.int64)
        meta_row = _lookup(ev_plane, ev_meta, self.em_plane, self.em_ids)
        outside = meta_row < 0
        meta_row[outside] = len(self.em_names)  # the trailing 'absent' slot of each table
        # Ids of metadata missing from the plane's table are kept (one categorical over rows).
        ids_kept = ev_meta if outside.any() else None
        del ev_meta, outside

        # Row order: by line, then start, then longest first, so parents precede children.
        # Captures are usually written in that order already; then no permutation is needed.
        # Times are counted from each file's first line (exact in int64 picoseconds).
        ts0 = gather(self._first_line_ts(), self.line_file)
        rel_ps = gather(self.line_ts - ts0, ev_line)  # in place from here: fewer pages to fault
        rel_ps *= 1000
        rel_ps += np.frombuffer(raw.pop("ev_offset_ps"), dtype=np.int64)
        end_ps = rel_ps + dur
        order = None
        nested = nest_if_sorted(ev_line, rel_ps, end_ps, parent_dtype=np.int32)
        if nested is None:
            order = np.lexsort((-end_ps, rel_ps, ev_line))
            nested = nest_columns(ev_line[order], rel_ps[order], end_ps[order], np.int32)
        del end_ps
        depth, parent, self_ps = nested
        del nested

        start_ns = _take(rel_ps, order)
        del rel_ps
        np.floor_divide(start_ns, 1000, out=start_ns)  # == line_ts - ts0 + offset // 1000
        line = _take(ev_line, order)
        del ev_line
        start_ns += gather(ts0 + self.start_base[self.line_file], line)
        name_codes = _take(meta_row, order)
        plane = _take(ev_plane, order)
        cols: dict[str, Any] = {
            "worker": self._worker_col(plane),
            "plane": cat(plane, self.plane_names),
            "line_id": id_cat(line, self.line_ids),
            "line": cat(line, self.line_names),
            "metadata_id": id_cat(name_codes, self.em_ids)
            if ids_kept is None
            else pd.Categorical(_take(ids_kept, order)),
            "name": cat(name_codes, [*self.em_names, ""]),
            "display_name": cat(name_codes, [*self.em_display, ""]),
            "start_ns": start_ns,
            "dur_ps": _take(dur, order),
            "depth": depth_column(depth),
            "parent": parent,
            "self_ps": self_ps,
        }
        return cols, meta_row, order

    def _event_stats(
        self, cols: dict[str, Any], meta_row: np.ndarray, order: np.ndarray | None
    ) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        """Adds the promoted stat columns to ``cols`` and returns the long ``stats`` frame, and
        the metadata stats table (``_frames`` builds ``metadata_stats`` from it)."""
        raw = self.raw
        n = len(meta_row)
        est = self._stat_table(
            raw.pop("event_stats"), owner_plane=np.frombuffer(raw["ev_plane"], dtype=np.int32)
        )
        del raw["ev_plane"]
        mst = self._stat_table(raw.pop("metadata_stats"), owner_plane=self.em_plane)
        targets, from_meta = self._promote_targets(mst, meta_row, n)
        inverse = None
        if order is not None:
            inverse = np.empty(n, dtype=np.int32)
            inverse[order] = np.arange(n, dtype=np.int32)
        # One pass over the event stats: promoted ones scattered into ``targets``, the rest
        # compacted into the long frame.
        written = np.zeros(len(PROMOTED_STATS), dtype=np.int64)
        stats = self._long_stats(
            "stats",
            est,
            False,
            lambda owner: {"event_row": _rows(owner, inverse)},
            tuple(targets.get(key) for key in PROMOTED_STATS),
            written,
            self.stats_keys,
        )
        for k, (key, dtype) in enumerate(PROMOTED_STATS.items()):
            if key not in targets or not (written[k] or key in from_meta):
                cols[key] = missing(n, dtype)  # absent from this capture
            elif dtype == CAT:
                cols[key] = cat_of(_take(targets[key][0], order), *self.strings)
            else:
                values, mask = (_take(a, order) for a in targets[key])
                cols[key] = (
                    pd.arrays.BooleanArray(values != 0, mask)
                    if dtype == "boolean"
                    else pd.arrays.IntegerArray(values, mask)
                )
        del targets
        return stats, mst

    def _frames(
        self, events: pd.DataFrame, stats: pd.DataFrame, mst: dict[str, np.ndarray]
    ) -> TraceFrames:
        """All frames, from ``events`` and ``stats`` and the small tables still in ``raw``."""
        return TraceFrames(
            events=events,
            stats=stats,
            plane_stats=self._long_stats(
                "plane_stats",
                self.plane_stats,
                True,
                lambda owner: {  # a plane stat's owner is its plane
                    "worker": self._worker_col(owner),
                    "plane": cat(owner, self.plane_names),
                },
            ),
            event_metadata=self._event_metadata(),
            metadata_stats=self._long_stats(
                "metadata_stats",
                mst,
                True,
                lambda owner: {  # a metadata stat's owner is its event-metadata row
                    "worker": self._worker_col(gather(self.em_plane, owner)),
                    "plane": cat(gather(self.em_plane, owner), self.plane_names),
                    "metadata_id": gather(self.em_ids, owner),
                },
            ),
            aggregates=self._aggregates(),
            planes=self._planes(),
            lines=self._lines(),
            workers=self._workers(),
        )

    def _promote_targets(
        self, mst: dict[str, np.ndarray], meta_row: np.ndarray, n: int
    ) -> tuple[dict[str, tuple[np.ndarray, ...]], set[str]]:
        """Per promoted key some plane's stat metadata names, its per-event column in decoder
        order, holding the event-metadata stats' values (event stats override them in
        ``long_stats``): string keys ``(int32 codes,)`` (-1: absent), numbers ``(int64 values,
        missing mask)``. Values start as ``np.zeros`` (pages the kernel maps only once
        written), so a key set on few events costs little more than its mask. Also the keys
        that metadata stats set.
        """
        out: dict[str, tuple[np.ndarray, ...]] = {}
        from_meta: set[str] = set()
        named = set(self.sm_promoted.tolist())
        slots = len(self.em_ids) + 1  # the last one: events whose metadata is absent
        for k, (key, dtype) in enumerate(PROMOTED_STATS.items()):
            if k not in named:
                continue
            rows = np.flatnonzero(mst["promoted"] == k)
            if not len(rows):
                out[key] = (
                    (np.full(n, -1, dtype=np.int32),)
                    if dtype == CAT
                    else (np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.bool_))
                )
                continue
            from_meta.add(key)
            owners = mst["owner"][rows]
            if dtype == CAT:
                codes = np.full(slots, -1, dtype=np.int32)
                codes[owners] = mst["sid"].take(rows)
                out[key] = (gather(codes, meta_row),)
                continue
            values, mask = np.zeros(slots, dtype=np.int64), np.ones(slots, dtype=np.bool_)
            values[owners], set_ = _numbers(mst["kind"].take(rows), mst["ival"].take(rows))
            mask[owners] = ~set_
            out[key] = (gather(values, meta_row), gather(mask, meta_row))
        return out, from_meta

    def _long_stats(
        self,
        frame: str,
        t: dict[str, np.ndarray],
        keep_all: bool,
        lead: Callable[[np.ndarray], dict[str, Any]],
        targets: tuple[tuple[np.ndarray, ...] | None, ...] = (),
        written: np.ndarray | None = None,
        keys: Collection[str] | None = None,
    ) -> pd.DataFrame:
        """A long stats frame (``stats``, ``plane_stats``, ``metadata_stats``): the rows of
        stat table ``t`` not promoted to event columns (all rows with ``keep_all``; only those
        of ``keys``, when given), built in one C pass; ``lead`` gives the leading columns from
        the kept rows' owners. Consumes ``t``, so its full-length arrays are gone before the
        frame is assembled.

        In the same pass, the promoted rows go to ``targets`` (per key of ``PROMOTED_STATS``,
        its column from ``_promote_targets`` or None) at their events; ``written`` (int64,
        one per key) counts them."""
        key_codes, key_cats = self.keys
        str_codes, str_cats = self.strings
        key_dt, str_dt = np.dtype(code_dtype(len(key_cats))), np.dtype(code_dtype(len(str_cats)))
        promoted = t.pop("promoted")
        n = len(promoted)
        m = n if keep_all else int(np.count_nonzero(promoted < 0))
        imask, dmask = np.empty(m, dtype=np.bool_), np.empty(m, dtype=np.bool_)
        dval = np.zeros(m, dtype=np.float64)
        owner, kind, key, ival, sid = (
            t.pop(c) for c in ("owner", "kind", "key_row", "ival", "sid")
        )
        t.clear()
        keep_key = (  # per key code: whether its rows are kept (empty: every key's)
            np.zeros(0, dtype=np.uint8)
            if keys is None
            else np.asarray(key_cats.isin(list(keys)), dtype=np.uint8)
        )
        kept = _xplane_fast.long_stats(
            promoted,
            kind,
            key,
            ival,
            sid,
            owner,
            key_codes.astype(np.int32),
            str_codes.astype(np.int32),
            keep_all,
            key_dt.itemsize,
            str_dt.itemsize,
            imask,
            dval,
            dmask,
            targets,
            np.zeros(0, dtype=np.int64) if written is None else written,
            keep_key,
        )
        del promoted
        if kept < m:  # some keys' rows left out: the outputs are longer than what was kept
            m, imask, dval, dmask = (
                kept,
                imask[:kept].copy(),
                dval[:kept].copy(),
                dmask[:kept].copy(),
            )

        # The kept rows now lead the table's own columns (compacted in place). Columns that are
        # much shorter than their buffer (codes narrower than int32, or most rows promoted to
        # event columns) are copied, so no frame holds memory it does not show.
        def cut(a: np.ndarray, narrowed: bool = False) -> np.ndarray:
            return a[:m].copy() if narrowed or m < n * 0.9 else a[:m]

        cols = {
            **lead(cut(owner)),
            "key": pd.Categorical.from_codes(
                cut(key.view(key_dt), key_dt.itemsize < 4), categories=key_cats, validate=False
            ),
            "kind": cat(cut(kind), KINDS),
            # uint64 values above 2**63 keep their bit pattern (they read as negative Int64).
            "int_value": pd.arrays.IntegerArray(cut(ival), imask),
            "float_value": pd.arrays.FloatingArray(dval, dmask),
            # -1 unless a str or ref stat
            "str_value": pd.Categorical.from_codes(
                cut(sid.view(str_dt), str_dt.itemsize < 4), categories=str_cats, validate=False
            ),
        }
        del owner, kind, key, ival, sid
        return pd.DataFrame({c: _as(cols[c], d) for c, d in SCHEMA[frame].items()}, copy=False)

    def _worker_col(self, planes: np.ndarray) -> pd.Categorical:
        """The worker column of rows of these planes."""
        return cat_of(planes, self.plane_worker, self.worker_labels)

    def _event_metadata(self) -> pd.DataFrame:
        em: EventMetadataTable = self.raw["event_metadata"]
        return pd.DataFrame(
            {
                "worker": self._worker_col(self.em_plane),
                "plane": cat(self.em_plane, self.plane_names),
                "metadata_id": self.em_ids,
                "name": pd.Categorical(self.em_names),
                "display_name": pd.Categorical(self.em_display),
                "metadata_bytes": np.array(em.metadata_bytes, dtype=np.int64),
            }
        )

    def _aggregates(self) -> pd.DataFrame:
        raw = self.raw
        plane = np.frombuffer(raw["ag_plane"], dtype=np.int32).astype(np.int64)
        line = np.frombuffer(raw["ag_line"], dtype=np.int32).astype(np.int64)
        meta = np.frombuffer(raw["ag_metadata_id"], dtype=np.int64)
        row = _lookup(plane, meta, self.em_plane, self.em_ids)
        return pd.DataFrame(
            {
                "worker": self._worker_col(plane),
                "plane": cat(plane, self.plane_names),
                "line_id": self.line_ids[line] if len(line) else np.zeros(0, dtype=np.int64),
                "line": cat(line, self.line_names),
                "name": cat(np.where(row >= 0, row, len(self.em_names)), [*self.em_names, ""]),
                "num_occurrences": np.frombuffer(raw["ag_num_occurrences"], dtype=np.int64),
                "dur_ps": np.frombuffer(raw["ag_duration_ps"], dtype=np.int64),
            }
        )

    def _planes(self) -> pd.DataFrame:
        k = len(self.plane_names)
        return pd.DataFrame(
            {
                "worker": self._worker_col(np.arange(k)),
                "plane_id": self.plane_ids,
                "plane": pd.Categorical(self.plane_names),
                "n_lines": np.bincount(self.line_plane, minlength=k).astype(np.int64)[:k],
                "n_events": np.bincount(self.line_plane, self.line_events, k).astype(np.int64)[:k],
            }
        )

    def _lines(self) -> pd.DataFrame:
        lines: LineTable = self.raw["lines"]
        return pd.DataFrame(
            {
                "worker": self._worker_col(self.line_plane),
                "plane": cat(self.line_plane, self.plane_names),
                "line_id": self.line_ids,
                "display_id": np.array(lines.display_id, dtype=np.int64),
                "line": pd.Categorical(self.line_names),
                "timestamp_ns": self.line_ts,
                "duration_ps": np.array(lines.duration_ps, dtype=np.int64),
                "n_events": self.line_events,
            }
        )

    def _workers(self) -> pd.DataFrame:
        """One row per file."""
        ports = [split_worker_label(d.worker) for d in self.files]
        starts = [  # the capture's start, when its times are epoch ones
            int(b) if kind == "epoch" and b else None
            for b, kind in zip(self.start_base, self.time_base, strict=True)
        ]
        raws = [d.raw for d in self.files]
        return pd.DataFrame(
            {
                "worker": cat(np.arange(len(self.files)), [d.worker for d in self.files]),
                "host": pd.array([h for h, _ in ports], dtype="string"),
                "port": pd.array([p for _, p in ports], dtype="Int64"),
                "file": pd.array([d.source for d in self.files], dtype="string"),
                "capture_start_ns": pd.array(starts, dtype="Int64"),
                "capture_stop_ns": pd.array(self.stop_ns, dtype="Int64"),
                "time_base": pd.array(self.time_base, dtype="string"),
                "hostnames": pd.array([",".join(r["hostnames"]) for r in raws], dtype="string"),
                "errors": pd.array(["\n".join(r["errors"]) for r in raws], dtype="string"),
                "warnings": pd.array(["\n".join(r["warnings"]) for r in raws], dtype="string"),
            }
        )


def _numbers(kind: np.ndarray, ival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stats of a promoted number key as int64 values and whether each is set: integers as
    they are, doubles truncated toward zero and saturated (NaN: not set), other kinds not set,
    as ``long_stats`` reads event stats."""
    is_set = (kind == StatKind.UINT64) | (kind == StatKind.INT64)
    values = np.where(is_set, ival, 0)
    is_double = kind == StatKind.DOUBLE
    if is_double.any():
        d = ival[is_double].view(np.float64)
        fits = (d > -(2.0**63)) & (d < 2.0**63)  # False for NaN
        values[is_double] = np.where(
            fits, np.where(fits, d, 0).astype(np.int64), np.where(d > 0, 2**63 - 1, -(2**63))
        )
        is_set[is_double] = ~np.isnan(d)
    return values, is_set


def _take(a: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """``a`` in row order (``order`` from the sort, or None when no sort was needed)."""
    return a if order is None else gather(a, order)


def _rows(owner: np.ndarray, inverse: np.ndarray | None) -> np.ndarray:
    """Event rows of stat owners (decoder event indices), through the sort's inverse if any."""
    return owner if inverse is None else gather(inverse, owner)


def split_worker_label(label: str) -> tuple[str, int | None]:
    """``"10.0.0.1_6009"`` → ``("10.0.0.1", 6009)``; a label without a port → ``(label, None)``."""
    host, sep, port = label.rpartition("_")
    if sep and port.isdigit():
        return host, int(port)
    return label, None


def _as(values: Any, dtype: str) -> Any:
    """Column in the declared dtype: string labels become categoricals; the rest is built in
    its dtype already."""
    if dtype == CAT:
        return values if isinstance(values, pd.Categorical) else pd.Categorical(values)
    return values
