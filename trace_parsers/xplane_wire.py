"""The XPlane wire decode, before any frame is built: the C decoder's columns and its small
tables as named tuples of columns, within the input's budget. No pandas here: ``xplane`` builds the frames from this, ``analyzers.host_ops``
the op tables of host captures without frames.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from podscope.trace_parsers import compiled
from podscope.trace_parsers.budget import Budget, rows_error
from podscope.trace_parsers.errors import TraceParseError

try:
    from podscope.trace_parsers import _column_kernels
except ImportError as e:  # installed without a C compiler
    _column_kernels = compiled.missing(e)

FORMAT = "xplane"
#: The plane of XLA's HLO modules (program metadata, not timed events).
METADATA_PLANE = "/host:metadata"


class PlaneTable(NamedTuple):
    """The decoder's planes, one column per field (row i = plane index i)."""

    id: Sequence[int]
    name: Sequence[str | None]


class LineTable(NamedTuple):
    """The decoder's lines: their plane index, XLine fields, and their timed events' range."""

    plane: Sequence[int]
    id: Sequence[int]
    display_id: Sequence[int]
    name: Sequence[str | None]
    display_name: Sequence[str | None]
    timestamp_ns: Sequence[int]
    duration_ps: Sequence[int]
    first_event: Sequence[int]
    n_events: Sequence[int]


class EventMetadataTable(NamedTuple):
    """The decoder's event metadata: plane index, map key, names, size, and its stats' range."""

    plane: Sequence[int]
    id: Sequence[int]
    name: Sequence[str | None]
    display_name: Sequence[str | None]
    metadata_bytes: Sequence[int]
    first_stat: Sequence[int]
    n_stats: Sequence[int]


class StatMetadataTable(NamedTuple):
    """The decoder's stat metadata: plane index, map key and names."""

    plane: Sequence[int]
    id: Sequence[int]
    name: Sequence[str | None]
    display_name: Sequence[str | None]


#: The decoder: serialized XSpace → dict of column buffers and small tables (row tuples);
#: ``ValueError`` when malformed. A parameter of ``parse_xplane`` so tests can replace it.
Decoder = Callable[[bytes, int], dict[str, Any]]
#: The decoder's row tables, by key, and the named table each becomes.
_TABLES: dict[str, Any] = {
    "planes": PlaneTable,
    "lines": LineTable,
    "event_metadata": EventMetadataTable,
    "stat_metadata": StatMetadataTable,
}


def _named_tables(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with its row tables turned into named tables of columns."""
    for key, table in _TABLES.items():
        rows = raw[key]
        raw[key] = table._make(zip(*rows, strict=True) if rows else [()] * len(table._fields))
    return raw


def decode_wire(data: bytes, source: str, decoder: Decoder) -> tuple[dict[str, Any], bytes, Budget]:
    """One file's bytes decoded within its budget: the decoder's columns with its row tables
    named (``PlaneTable``…), the inflated bytes, and the budget left for the frames.

    Raises:
        TraceParseError: empty, truncated, corrupt or non-XPlane input.
    """
    budget = Budget.for_input(len(data), source, FORMAT)
    data = budget.inflate(data)
    if not data:
        raise TraceParseError(source, FORMAT, "empty file")
    try:
        raw = _named_tables(decoder(data, budget.max_rows))
    except ValueError as e:
        if str(e).startswith("row budget"):
            raise rows_error(source, FORMAT, budget.max_rows, budget.size) from e
        raise TraceParseError(source, FORMAT, str(e)) from e
    budget.charge_rows(len(raw["ev_plane"]) // 4)
    if not raw["planes"].id:
        raise TraceParseError(source, FORMAT, "no XPlane in the data (not an XSpace capture)")
    return raw, data, budget


def lookup(
    plane_of: np.ndarray,
    ids: np.ndarray,
    table_plane: np.ndarray,
    table_ids: np.ndarray,
    owner: np.ndarray | None = None,
) -> np.ndarray:
    """Row (int32) of each (plane, id) in a (table_plane, table_ids) table, -1 where absent; the
    plane is ``plane_of[owner]`` when ``owner`` is given (a stat's plane is its owner's), else
    ``plane_of``. One pass in C over a hash of the table (of duplicate keys the last row wins,
    as in a protobuf map).

    Raises:
        ValueError: an owner is not a row of ``plane_of``.
    """
    out = np.empty(len(ids), dtype=np.int32)
    _column_kernels.lookup(
        np.ascontiguousarray(plane_of, dtype=np.int32),
        np.ascontiguousarray(ids, dtype=np.int64),
        np.ascontiguousarray(table_plane, dtype=np.int64),
        np.ascontiguousarray(table_ids, dtype=np.int64),
        None if owner is None else np.ascontiguousarray(owner, dtype=np.int32),
        out,
    )
    return out
