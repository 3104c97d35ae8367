"""Op tables of host captures without frames: ``podscope ops --no-cache`` on a session whose
workers trace only their hosts (TensorFlow or JAX on CPUs) reads each file's ops straight from
the wire decoder's columns, in worker processes started before pandas is imported.

The tables equal ``analyzers.ops.op_stats`` of the parsed frames, row for row (the tests
compare both on every host capture they have). What they would not equal is refused, and the
caller takes the frames' path: a capture with device planes (kernels, XLA ops), XLA's program
metadata, the stats that rename or cost a host op (``tf_op``, ``is_eager``, ``flops``,
``bytes_accessed``), or two lines of one plane with the same id.

    >>> table = host_op_table(Path("w0.xplane.pb"), "w0", "op")    # None: use op_stats
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from podscope.analyzers.lines import DERIVED_LINES
from podscope.trace_parsers import compiled
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.nesting import nest_columns, nest_if_sorted
from podscope.trace_parsers.tfop import parse_tf_op
from podscope.trace_parsers.xplane_wire import METADATA_PLANE, decode_wire, lookup

try:
    from podscope.trace_parsers import _column_kernels, _xplane_fast
except ImportError as e:  # installed without a C compiler
    _column_kernels = _xplane_fast = compiled.missing(e)

#: Stats that name, flag or cost a host op (``op_events``, ``op_stats``): a capture that
#: defines any of them takes the frames' path.
OP_STATS = frozenset({"tf_op", "is_eager", "flops", "bytes_accessed"})
#: An op event's name when TensorFlow ran it eagerly (``op_stats``' eager share).
EAGER = "EagerLocalExecute: "
#: The tables ``op_stats`` makes: per op, per op type, per GPU kernel.
BY = ("op", "type", "kernel")
#: The key columns of the tables read here (not kernels: they are on devices).
KEYS = {"op": ["worker", "device", "op_type", "op_name"], "type": ["worker", "device", "op_type"]}
#: ``op_stats``' columns after the keys, in its order: these lead, its cost columns follow.
LEAD_COLUMNS = [
    "occurrences",
    "total_ps",
    "self_ps",
    "avg_ps",
    "min_ps",
    "max_ps",
    "p50_ps",
    "p95_ps",
    "self_share",
    "cumulative_share",
    "eager_share",
]
STAT_COLUMNS = [
    *LEAD_COLUMNS,
    "flops",
    "bytes_accessed",
    "flops_per_s",
    "bytes_per_s",
    "intensity",
]

Table = dict[str, Any]  # column → list of str or numpy array, one row per op


def host_op_table(path: Path, worker: str, by: str) -> Table | None:
    """The op table of one host capture, as ``op_stats(frames.events, by=by)`` gives it for
    this file's frames (columns ``KEYS[by] + STAT_COLUMNS``; ``{}`` without any op); None when
    the capture is not one this reads (module docstring).

    Raises:
        TraceParseError: the file cannot be read or decoded.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceParseError(path, "unknown", f"cannot read: {e.strerror or e}") from None
    raw, _, _ = decode_wire(data, str(path), _xplane_fast.decode_xspace)
    del data
    plane_names = [n or "" for n in raw["planes"].name]
    if any(n.startswith("/device:") or n == METADATA_PLANE for n in plane_names):
        return None
    if OP_STATS & {n or "" for n in raw["stat_metadata"].name}:
        return None
    lines = raw["lines"]
    if len(set(zip(lines.plane, lines.id, strict=True))) < len(lines.id):
        return None  # a timeline in two lines: the frames' nesting groups them (not done here)
    rows = _op_rows(raw, plane_names)
    return {} if rows is None else _table(rows, worker, plane_names, by)


def _op_rows(raw: dict[str, Any], plane_names: list[str]) -> dict[str, Any] | None:
    """The op events in the frames' row order: their plane, name and type codes, duration
    and self time among ops (``op_events``)."""
    em = raw["event_metadata"]
    lines = raw["lines"]
    ev_plane = np.frombuffer(raw["ev_plane"], dtype=np.int32)
    ev_line = np.frombuffer(raw["ev_line"], dtype=np.int32)
    dur = np.frombuffer(raw["ev_duration_ps"], dtype=np.int64)
    meta = lookup(
        ev_plane,
        np.frombuffer(raw["ev_metadata_id"], dtype=np.int64),
        np.array(em.plane, dtype=np.int64),
        np.array(em.id, dtype=np.int64),
    )
    meta[meta < 0] = len(em.id)  # metadata absent from the plane's table: named ""
    # Which metadata name an op: ``name:Type`` (parse_tf_op), not a Python tracer event ($).
    names = [n or "" for n in em.name] + [""]
    parsed = [None if n.startswith("$") else parse_tf_op(n) for n in names]
    op_names, name_code = _codes([p[0] if p else None for p in parsed])
    op_types, type_code = _codes([p[1] if p else None for p in parsed])
    eager = np.array([n.startswith(EAGER) for n in names], dtype=bool)
    line_names = [
        shown or name or f"line {i}"
        for shown, name, i in zip(lines.display_name, lines.name, lines.id, strict=True)
    ]
    derived = np.array([n in DERIVED_LINES for n in line_names], dtype=bool)
    # The frames' row order: by line, start, longest first (the parser's), times in ps from
    # the first line's timestamp; start_ns as the frames floor it.
    line_ts = np.array(lines.timestamp_ns, dtype=np.int64)
    rel_ps = (line_ts - (line_ts.min() if len(line_ts) else 0))[ev_line] * 1000
    rel_ps += np.frombuffer(raw["ev_offset_ps"], dtype=np.int64)
    end_ps = rel_ps + dur
    order = None
    if nest_if_sorted(ev_line, rel_ps, end_ps, parent_dtype=np.int32) is None:
        order = np.lexsort((-end_ps, rel_ps, ev_line))
    del end_ps
    line = ev_line if order is None else ev_line[order]
    meta = meta if order is None else meta[order]
    is_op = (type_code[meta] >= 0) & ~derived[line]
    rows = np.flatnonzero(is_op)
    if not len(rows):
        return None  # no op event
    if order is not None:
        rows = order[rows]
    meta, line = meta[is_op], line[is_op]
    start_ns = rel_ps[rows] // 1000
    dur = dur[rows]
    return {
        "plane": ev_plane[rows],
        "name": name_code[meta],
        "type": type_code[meta],
        "eager": eager[meta],
        "dur": dur,
        "self": _self_times(line, start_ns, dur),
        "op_names": op_names,
        "op_types": op_types,
    }


def _codes(labels: Sequence[str | None]) -> tuple[list[str], np.ndarray]:
    """Distinct labels in order of first appearance, and each label's code (-1: None)."""
    position: dict[str, int] = {}
    codes = [-1 if x is None else position.setdefault(x, len(position)) for x in labels]
    return list(position), np.array(codes, dtype=np.int64)


def _self_times(group: np.ndarray, start_ns: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Self time among the op events only, as ``nesting.self_times`` of their frame rows
    (start in whole ns from the first op, durations in ps)."""
    start_ps = (start_ns - (start_ns.min() if len(start_ns) else 0)) * 1000
    end_ps = start_ps + dur
    nested = nest_if_sorted(group, start_ps, end_ps)
    if nested is not None:
        return nested[2]
    order = np.lexsort((-end_ps, start_ps, group))
    self_t = np.empty(len(order), dtype=np.int64)
    self_t[order] = nest_columns(group[order], start_ps[order], end_ps[order])[2]
    return self_t


def _table(rows: dict[str, Any], worker: str, plane_names: list[str], by: str) -> Table:
    """``op_stats``' table of one worker's op rows: grouped in order of first appearance,
    aggregated in C (``group_stats``), sorted by device and self time."""
    devices, device_code = _codes(plane_names)
    device = device_code[rows["plane"]]
    parts = [device, rows["type"]] + ([rows["name"]] if by == "op" else [])
    key = parts[0]
    for part, labels in zip(parts[1:], [rows["op_types"], rows["op_names"]], strict=False):
        key = key * (len(labels) + 1) + part
    gid, first = _groups(key)
    groups = len(first)
    ints = np.zeros((10, groups), dtype=np.int64)
    floats = np.zeros((4, groups), dtype=np.float64)
    n = len(gid)
    _column_kernels.group_stats(
        np.ascontiguousarray(gid, dtype=np.int64),
        np.ascontiguousarray(rows["dur"], dtype=np.int64),
        np.ascontiguousarray(rows["self"], dtype=np.int64),
        np.ascontiguousarray(rows["eager"]).view(np.int8),
        np.zeros(n, dtype=np.float64),
        np.zeros(n, dtype=np.float64),
        ints,
        floats,
    )
    count, total, self_ps = ints[0], ints[1], ints[2]
    percentiles = group_percentiles(ints, floats)
    # by device (its name), then self time, largest first; ties in order of first appearance
    device_of = device[first]
    device_name = np.array([devices[d] for d in device_of.tolist()], dtype=object)
    order = np.lexsort((-self_ps, np.unique(device_name, return_inverse=True)[1].ravel()))
    device_of, count, total, self_ps = device_of[order], count[order], total[order], self_ps[order]
    sums = np.bincount(device_of, weights=self_ps, minlength=len(devices))
    denominator = np.where(sums[device_of] == 0, np.nan, sums[device_of])
    cumulative = np.empty(len(order), dtype=np.float64)
    for d in np.unique(device_of).tolist():
        at = np.flatnonzero(device_of == d)
        cumulative[at] = np.cumsum(self_ps[at])
    at_first = first[order]
    table: Table = {
        "worker": [worker] * len(order),
        "device": [devices[d] for d in device_of.tolist()],
        "op_type": [rows["op_types"][t] for t in rows["type"][at_first].tolist()],
    }
    if by == "op":
        table["op_name"] = [rows["op_names"][m] for m in rows["name"][at_first].tolist()]
    nothing = np.full(len(order), np.nan)
    table |= {
        "occurrences": count,
        "total_ps": total,
        "self_ps": self_ps,
        "avg_ps": np.round(total / count).astype(np.int64),
        "min_ps": ints[3][order],
        "max_ps": ints[4][order],
        "p50_ps": percentiles[0][order],
        "p95_ps": percentiles[1][order],
        "self_share": self_ps / denominator,
        "cumulative_share": cumulative / denominator,
        "eager_share": ints[5][order] / count,
        "flops": np.zeros(len(order)),
        "bytes_accessed": np.zeros(len(order)),
        "flops_per_s": nothing,
        "bytes_per_s": nothing,
        "intensity": nothing,
    }
    return table


def group_percentiles(ints: np.ndarray, floats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each group's p50 and p95 (ps) from ``group_stats``' ranks and fractions: linear
    interpolation between the two ranks, as pandas' ``quantile``."""
    out = []
    for low, high, frac in ((ints[6], ints[7], floats[2]), (ints[8], ints[9], floats[3])):
        lo, hi = low.astype(np.float64), high.astype(np.float64)
        out.append(np.round(np.where(frac == 0, lo, lo + (hi - lo) * frac)).astype(np.int64))
    return out[0], out[1]


def _groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group id per row, ids in order of first appearance (``groupby(sort=False)``), and each
    group's first row. Keys are small (device × type × name codes): a table over them finds
    the first rows in one pass, where ``np.unique`` sorts the rows."""
    n = len(key)
    size = int(key.max()) + 1
    if size > 4 * n + 1024:
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        at = inverse.ravel()
    else:
        first_at = np.full(size, n, dtype=np.int64)
        np.minimum.at(first_at, key, np.arange(n))
        present = np.flatnonzero(np.bincount(key, minlength=size))
        first = first_at[present]
        code = np.empty(size, dtype=np.int64)
        code[present] = np.arange(len(present))
        at = code[key]
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[at], np.sort(first)


def session_table(tables: Sequence[Table], workers: Sequence[str]) -> Table:
    """Workers' tables (``workers[i]``'s is ``tables[i]``) as one, by worker name, as
    ``op_stats`` sorts a session's; ``{}`` when none has a row."""
    order = sorted((w, i) for i, w in enumerate(workers) if tables[i])
    out: Table = {}
    for column in tables[order[0][1]] if order else ():
        parts = [tables[i][column] for _, i in order]
        out[column] = (
            [v for p in parts for v in p] if isinstance(parts[0], list) else np.concatenate(parts)
        )
    return out


def csv_rows(table: Table) -> tuple[list[str], list[list[Any]]]:
    """``table`` as ``podscope ops --csv`` prints it: ``*_ps`` → ``*_us`` (total and self
    time as ``total_time_us`` / ``self_time_us``), rounded to 3 decimals, the names first."""
    names = [c for c in ("worker", "device", "op_name", "op_type") if c in table]
    times = [c for c in STAT_COLUMNS if c.endswith("_ps")]
    shown = {
        "occurrences": table["occurrences"],
        **{us_name(c): np.round(np.asarray(table[c]) / 1e6, 3) for c in times},
    }
    rest = [c for c in STAT_COLUMNS if c not in times and c != "occurrences"]
    header = [*names, *shown, *rest]
    columns = [table[c] for c in names] + list(shown.values()) + [table[c] for c in rest]
    rows = [[_cell(v) for v in row] for row in zip(*(_as_list(c) for c in columns), strict=True)]
    return header, rows


def us_name(column: str) -> str:
    """A ``*_ps`` column's name in the CLI's µs: ``total_time_us``, ``self_time_us``,
    ``avg_us``…"""
    return {"total_ps": "total_time_us", "self_ps": "self_time_us"}.get(
        column, column.removesuffix("_ps") + "_us"
    )


def _as_list(column: Any) -> list[Any]:
    return column if isinstance(column, list) else np.asarray(column).tolist()


def _cell(value: Any) -> Any:
    """A value as pandas' ``to_csv`` writes it (missing as an empty cell)."""
    if isinstance(value, float) and math.isnan(value):
        return ""
    return value


def write_csv(table: Table, out: IO[str]) -> None:
    """``table`` (``session_table``) as ``podscope ops --csv`` writes it."""
    header, rows = csv_rows(table)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)


def session_op_table(files: Sequence[tuple[Path, str]], by: str, processes: int) -> Table | None:
    """The op table of a session's host captures (``(file, worker)`` pairs), each file in a
    forked process (``processes`` of them) or here; None when a file is not one this reads
    (or fails to parse), or no file has an op.

    Raises:
        TraceParseError: a file cannot be read or decoded.
    """
    tasks = [(f, w, by) for f, w in files]
    run: Callable[[tuple[Path, str, str]], Table | None] = _task
    if processes > 1 and len(tasks) > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(min(processes, len(tasks))) as pool:
            tables = pool.map(run, tasks, chunksize=1)
    else:
        tables = [run(t) for t in tasks]
    if any(t is None for t in tables):
        return None
    return session_table([t or {} for t in tables], [w for _, w in files]) or None


def _task(args: tuple[Path, str, str]) -> Table | None:
    """One file's table; None where it fails too (the frames' path reports each failure as
    the other commands do)."""
    try:
        return host_op_table(*args)
    except TraceParseError:
        return None
