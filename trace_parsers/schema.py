"""The one declaration of every frame PodScope's parsers produce, and its validator.

Every parser ends with ``validate(frames)``; analyzers rely on these names and dtypes.
Times are integers with the unit in the name (``start_ns``, ``dur_ps``); strings that repeat are
categoricals, as are the ids repeated on every event (``CAT_ID``); optional numbers use pandas'
nullable dtypes (``Int64``, ``boolean``).

    >>> from podscope.trace_parsers import load
    >>> frames = load("run/plugins/profile/2026_01_01_00_00_00")
    >>> frames.events[["worker", "name", "start_ns", "dur_ps"]].head()
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from podscope.trace_parsers._columns import code_dtype, few_dtype
from podscope.trace_parsers.errors import SchemaError

CAT = "category"
#: XLA's memory space of host memory (``Layout::kHostMemorySpace``, ``S(5)`` in HLO text): the
#: value of ``hlo_ops.copy_from`` / ``copy_to`` for a copy to or from the host.
HOST_MEMORY_SPACE = 5
#: The host's plane (XPlane's, and the PyTorch traces' ``trace_parsers.kineto`` reads).
HOST_PLANE = "/host:CPU"
#: The host plane's stat every PyTorch profiler trace gets (1: some start time had a fraction
#: of a µs, which Holistic Trace Analysis rounds): what marks a worker as a PyTorch rank.
KINETO_MARK = "fractional_timestamps"
#: A PyTorch trace's stat of its GPU events and launch calls: their place in the file's
#: ``traceEvents`` (the frames are in time order; Holistic Trace Analysis' time series break
#: ties in the file's order, and it links no launch to the file's first event).
TRACE_ORDER = "trace_order"
#: Integer ids repeated on every row (line and event-metadata ids): a categorical with int64
#: categories, so a row costs a 1–2 byte code instead of 8 bytes.
CAT_ID = "category[int64]"

#: Custom calls whose ``hlo_ops`` FLOPs and bytes the parser computes from their shapes where
#: XProf shows none (``trace_parsers.hlo_cost``): the legacy cuBLAS GEMM, which XLA emits on
#: ROCm for hipBLAS too. The analyses mark such rows (``analyzers.hlo_stats``).
COSTED_BEYOND_XPROF = frozenset({"__cublas$gemm"})

#: The frames' schema version (their columns, dtypes and meaning): in the parse cache's key,
#: in every frame ``podscope parse --out`` writes (Parquet metadata ``podscope.schema_version``,
#: and ``schema.json`` beside CSV and Parquet alike). Bump on any change to the frames.
#: 10: PyTorch profiler traces, which Chrome JSON frames were cached for, read as such.
#: 11: legacy cuBLAS GEMM custom calls costed by their shapes; PyTorch traces' args read by
#: the compiled reader (a JSON string stays text, arrays and objects keep their file text).
SCHEMA_VERSION = 11


def schema_document() -> dict[str, Any]:
    """The frames' schema as JSON: ``{"podscope_schema_version": N, "frames": {frame: {column:
    dtype}}, "export_columns": {frame: {column: dtype}}}`` (``schema.json`` beside exported
    frames; the docs' schema page)."""
    return {
        "podscope_schema_version": SCHEMA_VERSION,
        "frames": {name: dict(columns) for name, columns in SCHEMA.items()},
        "export_columns": {name: dict(columns) for name, columns in EXPORT_COLUMNS.items()},
    }


#: Columns an export (``podscope parse --out``: one file per frame and worker) adds, so that
#: every exported table names its worker and the row keys still join once the workers' files
#: are read back together (``pd.read_parquet(out / "events")``): ``events.event_row`` is the
#: event's row within its worker's events, which ``events.parent`` and ``stats.event_row``
#: name; join on ``(worker, event_row)``.
EXPORT_COLUMNS: Mapping[str, Mapping[str, str]] = {
    "events": {"event_row": "int32"},
    "stats": {"worker": CAT},
}


def exported(name: str, frame: pd.DataFrame, worker: str) -> pd.DataFrame:
    """One worker's ``frame`` as an export writes it: with ``EXPORT_COLUMNS`` after ``worker``
    (``worker`` first where the frame had none)."""
    added = EXPORT_COLUMNS.get(name)
    if not added:
        return frame
    out = frame.copy(deep=False)
    at = 1 if "worker" in out.columns else 0
    for column, dtype in added.items():
        if column == "worker":
            value = pd.Categorical([worker] * len(out))
        else:
            value = np.arange(len(out), dtype=dtype)
        out.insert(at, column, value)
        at += 1
    return out


#: Stat keys promoted from ``stats`` to typed ``events`` columns (a stat lives in exactly one).
PROMOTED_STATS: Mapping[str, str] = {
    "step_num": "Int64",
    "group_id": "Int64",
    "correlation_id": "Int64",
    "tf_op": CAT,
    "is_eager": "boolean",
    "flops": "Int64",
    "bytes_accessed": "Int64",
    "kernel_details": CAT,
    "memcpy_details": CAT,
}

#: frame name -> ordered {column: dtype}.
SCHEMA: Mapping[str, Mapping[str, str]] = {
    # One row per timed event, ordered by worker, line, start. `parent` is the row of the
    # enclosing event on the same line (-1 at top level; int32: a session holds < 2**31
    # events); `self_ps` is dur_ps minus the union of its children's time.
    "events": {
        "worker": CAT,
        "plane": CAT,
        "line_id": CAT_ID,
        "line": CAT,
        "metadata_id": CAT_ID,
        "name": CAT,
        "display_name": CAT,
        "start_ns": "int64",
        "dur_ps": "int64",
        "depth": "int16",
        "parent": "int32",
        "self_ps": "int64",
        **PROMOTED_STATS,
        "op_name": CAT,
        "op_type": CAT,
    },
    # Every event stat that is not a promoted column, long format. Exactly one of the value
    # columns is set, by `kind` (int, uint, double, str, bytes, ref); ref stats are resolved to
    # the referenced string. bytes values are kept as their length in `int_value`.
    "stats": {
        "event_row": "int32",
        "key": CAT,
        "kind": CAT,
        "int_value": "Int64",
        "float_value": "Float64",
        "str_value": CAT,
    },
    # Stats attached to a plane (device capabilities, profile start/stop times…).
    "plane_stats": {
        "worker": CAT,
        "plane": CAT,
        "key": CAT,
        "kind": CAT,
        "int_value": "Int64",
        "float_value": "Float64",
        "str_value": CAT,
    },
    # Event types; their stats hold for every event of that type (XEventMetadata.stats).
    "event_metadata": {
        "worker": CAT,
        "plane": CAT,
        "metadata_id": "int64",
        "name": CAT,
        "display_name": CAT,
        "metadata_bytes": "int64",
    },
    "metadata_stats": {
        "worker": CAT,
        "plane": CAT,
        "metadata_id": "int64",
        "key": CAT,
        "kind": CAT,
        "int_value": "Int64",
        "float_value": "Float64",
        "str_value": CAT,
    },
    # Executed instructions of the XLA programs the capture carries (``trace_parsers.hlo``;
    # a fusion's inner instructions are part of it): the framework op each was lowered from
    # (OpMetadata), which device kernels inherit through their program_id / hlo_op stats
    # (empty: none), XLA's category, the HLO text, the narrowest float type it reads or writes,
    # the Python line (`file:line`) and stack, and per execution FLOPs (model, and at the
    # device's rate for its input width), bytes read and written, those in device memory, by
    # XLA's cost rules (NA: unknown); memory spaces a copy moves between (HOST_MEMORY_SPACE:
    # host).
    "hlo_ops": {
        "worker": CAT,
        "program_id": "int64",
        "module": CAT,
        "hlo_op": CAT,
        "opcode": CAT,
        "op_name": CAT,
        "op_type": CAT,
        "category": CAT,
        "expression": "string",
        "compute_dtype": CAT,
        "source": CAT,
        "source_stack": CAT,
        "deduplicated_name": CAT,
        "flops": "Int64",
        "device_flops": "Int64",
        "bytes_accessed": "Int64",
        "hbm_bytes": "Int64",
        "copy_from": "Int64",
        "copy_to": "Int64",
    },
    # Aggregated events (XEvent.num_occurrences): totals without a time, never on the timeline.
    "aggregates": {
        "worker": CAT,
        "plane": CAT,
        "line_id": "int64",
        "line": CAT,
        "name": CAT,
        "num_occurrences": "int64",
        "dur_ps": "int64",
    },
    "planes": {
        "worker": CAT,
        "plane_id": "int64",
        "plane": CAT,
        "n_lines": "int64",
        "n_events": "int64",
    },
    "lines": {
        "worker": CAT,
        "plane": CAT,
        "line_id": "int64",
        "display_id": "int64",
        "line": CAT,
        "timestamp_ns": "int64",
        "duration_ps": "int64",
        "n_events": "int64",
    },
    # Counter tracks (Android atrace C markers, cpu_frequency / cpu_idle).
    "counters": {
        "worker": CAT,
        "process": CAT,
        "name": CAT,
        "ts_ns": "int64",
        "value": "float64",
    },
    # CPU scheduling slices (sched_switch): which thread ran on which CPU, and how it left.
    "sched": {
        "worker": CAT,
        "cpu": "int16",
        "start_ns": "int64",
        "dur_ns": "int64",
        "tid": "int64",
        "comm": CAT,
        "end_state": CAT,
    },
    # What a text-format parser counted: events, markers, skipped lines, unmatched E, unclosed B…
    "parse_notes": {
        "worker": CAT,
        "key": CAT,
        "value": "int64",
    },
    # One row per worker (one input file). `time_base` is "epoch" when start_ns is nanoseconds
    # since the UNIX epoch, "relative" when the capture carries no absolute start.
    "workers": {
        "worker": CAT,
        "host": "string",
        "port": "Int64",
        "file": "string",
        "capture_start_ns": "Int64",
        "capture_stop_ns": "Int64",
        "time_base": "string",
        "hostnames": "string",
        "errors": "string",
        "warnings": "string",
    },
}


def empty_frame(name: str) -> pd.DataFrame:
    """An empty frame with the declared columns and dtypes of frame ``name`` (a copy of one
    built once: building it column by column costs ~2 ms, and every parse makes several)."""
    return _empty_template(name).copy()


@functools.cache
def _empty_template(name: str) -> pd.DataFrame:
    return pd.DataFrame({c: _empty_column(t) for c, t in SCHEMA[name].items()})


def _empty_column(dtype: str) -> Any:
    """A 0-row column of a ``SCHEMA`` dtype, built from its parts (``pd.array([], dtype)``
    infers its way there: 3x the cost, paid on every warm load's empty frames)."""
    none = np.empty(0, dtype=bool)
    if dtype in (CAT, CAT_ID):  # categories are str (int64 ids), as parsed
        return pd.Categorical.from_codes(
            np.empty(0, dtype=np.int8), dtype=few_dtype((), ids=dtype == CAT_ID)
        )
    if dtype == "Int64":
        return pd.arrays.IntegerArray(np.empty(0, dtype=np.int64), none)
    if dtype == "Float64":
        return pd.arrays.FloatingArray(np.empty(0, dtype=np.float64), none)
    if dtype == "boolean":
        return pd.arrays.BooleanArray(none, none)
    if dtype == "string":
        return pd.array([], dtype="string")
    return np.empty(0, dtype=dtype)


def pandas_dtype(dtype: str) -> Any:
    """The pandas dtype of a ``SCHEMA`` dtype name."""
    return pd.CategoricalDtype(pd.Index([], dtype="int64")) if dtype == CAT_ID else dtype


def dtype_name(dtype: Any) -> str:
    """A pandas dtype as ``SCHEMA`` names it (``CAT_ID`` for int64-category categoricals)."""
    if isinstance(dtype, pd.CategoricalDtype) and dtype.categories.dtype == "int64":
        return CAT_ID
    return str(dtype)


@dataclass(frozen=True)
class TraceFrames:
    """All frames parsed from one trace session (one or more workers).

    Attributes:
        events, stats, plane_stats, event_metadata, metadata_stats, hlo_ops, aggregates,
        planes, lines, workers: frames declared in ``SCHEMA``.
        failures: per-file errors of a multi-file load whose other files parsed.
    """

    events: pd.DataFrame = field(default_factory=lambda: empty_frame("events"))
    stats: pd.DataFrame = field(default_factory=lambda: empty_frame("stats"))
    plane_stats: pd.DataFrame = field(default_factory=lambda: empty_frame("plane_stats"))
    event_metadata: pd.DataFrame = field(default_factory=lambda: empty_frame("event_metadata"))
    metadata_stats: pd.DataFrame = field(default_factory=lambda: empty_frame("metadata_stats"))
    hlo_ops: pd.DataFrame = field(default_factory=lambda: empty_frame("hlo_ops"))
    aggregates: pd.DataFrame = field(default_factory=lambda: empty_frame("aggregates"))
    planes: pd.DataFrame = field(default_factory=lambda: empty_frame("planes"))
    lines: pd.DataFrame = field(default_factory=lambda: empty_frame("lines"))
    counters: pd.DataFrame = field(default_factory=lambda: empty_frame("counters"))
    sched: pd.DataFrame = field(default_factory=lambda: empty_frame("sched"))
    parse_notes: pd.DataFrame = field(default_factory=lambda: empty_frame("parse_notes"))
    workers: pd.DataFrame = field(default_factory=lambda: empty_frame("workers"))
    failures: tuple[Exception, ...] = ()

    def frames(self) -> Iterator[tuple[str, pd.DataFrame]]:
        """Yields ``(name, frame)`` for every frame in ``SCHEMA`` order."""
        for f in fields(self):
            if f.name in SCHEMA:
                yield f.name, getattr(self, f.name)


def validate(frames: TraceFrames, source: str = "<frames>") -> TraceFrames:
    """Checks every frame's columns (names, order) and dtypes against ``SCHEMA``.

    Args:
        frames: the parser's output.
        source: the input's name, for the error message.

    Returns:
        ``frames``, each empty frame as ``empty_frame`` gives it (no categories left from the
        parse), so a parse and a cache load of it give equal frames; parsers
        ``return validate(...)``.

    Raises:
        SchemaError: a frame misses a column, has an extra one, or a column has another dtype.
    """
    empty = {}
    for name, frame in frames.frames():
        want = SCHEMA[name]
        if list(frame.columns) != list(want):
            raise SchemaError(
                source, "schema", f"{name}: columns {list(frame.columns)} != {list(want)}"
            )
        canonical = True  # as an empty frame: categoricals without categories, of their type
        for (col, dtype), got_dtype in zip(want.items(), frame.dtypes, strict=True):
            got = dtype_name(got_dtype)
            if got != dtype:
                raise SchemaError(source, "schema", f"{name}.{col}: dtype {got} != {dtype}")
            if isinstance(got_dtype, pd.CategoricalDtype):
                cats = got_dtype.categories
                canonical = canonical and not len(cats) and cats.dtype != object
        if frame.empty and not canonical:
            empty[name] = empty_frame(name)
    return replace(frames, **empty) if empty else frames


#: Columns that hold row numbers of ``events`` (-1: none), by frame.
ROW_COLUMNS = {"events": "parent", "stats": "event_row"}


def concat_frames(
    name: str, frames: Sequence[pd.DataFrame], event_rows: Sequence[int] | None = None
) -> pd.DataFrame:
    """Frames of ``SCHEMA[name]`` end to end: categoricals unioned (categories in the order
    they first come), and with ``event_rows`` (per frame, the events before its own) the
    columns that count event rows shifted by it. Empty frames add nothing (a validated empty
    frame has no categories): a merge of ranks or workers has several (no HLO, no counters),
    and one frame left is the result as it is."""
    row_col = ROW_COLUMNS.get(name) if event_rows is not None else None
    offsets = list(event_rows) if event_rows is not None else [0] * len(frames)
    kept = [(f, off) for f, off in zip(frames, offsets, strict=True) if len(f)]
    if not kept:
        return empty_frame(name)
    if len(kept) == 1 and (row_col is None or kept[0][1] == 0):
        return kept[0][0].reset_index(drop=True)
    frames = [f for f, _ in kept]
    cols: dict[str, Any] = {}
    for col, dtype in SCHEMA[name].items():
        series = [f[col] for f in frames]
        if dtype in (CAT, CAT_ID):
            cols[col] = _union(
                [
                    s.array if isinstance(s.dtype, pd.CategoricalDtype) else pd.Categorical(s)
                    for s in series
                ]
            )
        elif col == row_col:
            shifted = [
                np.where(s.to_numpy() >= 0, s.to_numpy() + off, -1)
                for s, (_, off) in zip(series, kept, strict=True)
            ]
            cols[col] = np.concatenate(shifted).astype(np.int32)
        else:
            cols[col] = _concat_column([s.array for s in series])
    return pd.DataFrame(cols, copy=False)  # the columns are new: not copied again


def _concat_column(arrays: list[Any]) -> Any:
    """Columns of one dtype end to end, as ``pd.concat`` of them gives (its checks and
    index cost more than the copy on frames of a few thousand rows)."""
    first = arrays[0]
    if any(a.dtype != first.dtype for a in arrays[1:]):
        return pd.concat([pd.Series(a) for a in arrays], ignore_index=True).array
    if isinstance(first, pd.arrays.NumpyExtensionArray):
        return np.concatenate([a.to_numpy() for a in arrays])
    return type(first)._concat_same_type(arrays)


def _union(parts: list[pd.Categorical]) -> pd.Categorical:
    """``union_categoricals(parts, ignore_order=True)``: the categories in the order they
    first come, each part's codes mapped onto them. Parts of a merge mostly share their
    categories (one worker name, the same streams and kinds), so equal categories are a
    concatenation of codes; the rest are mapped through a dict of the labels. pandas' union
    (and Index lookups on Arrow-backed strings) cost 0.4 ms a column, 20 ms of a two-rank
    merge."""
    first = parts[0].categories
    if any(p.categories.dtype != first.dtype for p in parts):
        return union_categoricals(parts, ignore_order=True)  # it raises or casts as it does
    labels = [p.categories.tolist() for p in parts]
    if all(ls == labels[0] for ls in labels[1:]):
        categories = first
        codes = [np.asarray(p.codes) for p in parts]
    else:
        position: dict[Any, int] = {}
        for ls in labels:
            for label in ls:
                position.setdefault(label, len(position))
        categories = pd.Index(list(position), dtype=first.dtype)
        codes = [
            np.array([position[label] for label in ls] + [-1], dtype=np.int64)[  # -1 stays -1
                np.asarray(p.codes)
            ]
            for ls, p in zip(labels, parts, strict=True)
        ]
    return pd.Categorical.from_codes(
        np.concatenate(codes).astype(code_dtype(len(categories)), copy=False),
        dtype=pd.CategoricalDtype(categories),
        validate=False,
    )
