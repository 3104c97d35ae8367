"""The XPlane wire decode, before any frame is built: the C decoder's columns and its small
tables as named tuples of columns, within the input's budget. No pandas and no numpy here:
``xplane`` builds the frames from this, ``analyzers.host_ops`` the op tables of host traces
without frames.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from podscope.trace_parsers.budget import Budget, rows_error
from podscope.trace_parsers.errors import TraceParseError

FORMAT = "xplane"


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
