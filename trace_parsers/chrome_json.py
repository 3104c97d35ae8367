"""Chrome trace JSON (chrome://tracing, Perfetto's legacy JSON, systrace controller output) →
``TraceFrames``.

    >>> from podscope.trace_parsers.chrome_json import parse_chrome_json
    >>> frames = parse_chrome_json(open("trace.json", "rb").read(), worker="app")

Accepts the array form (the closing ``]`` may be missing, a trailing comma is fine) and the
object form (``traceEvents``; ``systemTraceEvents`` holds ftrace text, parsed as systrace).
``ts``/``dur`` are microseconds, possibly fractional; they become integer ns. Phases: B/E
(per thread), X, C (one counter per args key), i/I/n/R (instants), b/e (nestable async, by
category + id), S/F with T steps (legacy async), s/t/f flows (counted), M metadata
(process_name, thread_name). Other phases are counted in ``parse_notes``.
"""

from __future__ import annotations

import json
import math
import zlib
from collections import OrderedDict
from typing import Any

from podscope.trace_parsers._slices import SliceBuilder
from podscope.trace_parsers.budget import Budget
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.schema import TraceFrames, validate

FORMAT = "chrome_json"


def load_json(data: bytes, source: str) -> Any:
    """``json.loads`` with the repairs Chrome traces need (unterminated array, trailing comma).

    Raises:
        TraceParseError: not JSON even after the repairs.
    """
    text = data.decode("utf-8", errors="replace").strip()
    try:
        return json.loads(text)
    except RecursionError as e:  # "[[[[…": json nests one C call per level
        raise TraceParseError(source, FORMAT, "JSON nested too deeply to be a trace") from e
    except ValueError as first:
        if text.startswith("["):
            repaired = text.rstrip().rstrip(",")
            repaired = repaired if repaired.endswith("]") else repaired + "]"
            try:
                return json.loads(repaired)
            except (ValueError, RecursionError):
                # Cut at the last complete event (a capture stopped mid-write).
                cut = repaired.rfind("}")
                if cut > 0:
                    try:
                        return json.loads(repaired[: cut + 1] + "]")
                    except (ValueError, RecursionError):
                        pass
        raise TraceParseError(source, FORMAT, f"not valid trace JSON ({first})") from first


#: Times beyond this many ns (about 292 years) do not fit the frames' int64 columns.
_MAX_NS = (1 << 63) - 1


def _us_to_ns(value: Any) -> int:
    """Chrome's µs (a number or a numeric string) → ns.

    Raises:
        ValueError: not a number, not finite (``1e400`` reads as inf), or out of int64 ns.
    """
    try:
        ns = float(value) * 1000
    except OverflowError:  # an integer of hundreds of digits
        ns = math.inf
    if not math.isfinite(ns) or abs(ns) > _MAX_NS:
        raise ValueError(f"time {value!r} µs is out of range")
    return round(ns)


def _id(value: Any) -> int:
    """A pid or tid as an int32: numbers as they are, anything else (a string, a 1e20) by a
    hash of its text."""
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        n = None
    if n is not None and -(1 << 31) <= n < (1 << 31):
        return n
    return zlib.crc32(str(value).encode()) & 0x7FFFFFFF


def add_events(sb: SliceBuilder, events: list[Any]) -> None:
    """Adds Chrome trace events to the builder (the per-event loop of this parser)."""
    stacks: dict[tuple[int, int], list[tuple[int, str]]] = {}
    # Open async slices by (pid, cat, id), then by name: an end finds its begin in O(1),
    # with or without a name (20 k name-less ends were a 48 s scan).
    async_open: dict[tuple[Any, ...], dict[str, list[int]]] = {}
    for e in events:
        if not isinstance(e, dict):
            sb.notes["skipped_events"] += 1
            continue
        ph = e.get("ph")
        pid, tid = _id(e.get("pid", 0)), _id(e.get("tid", 0))
        name = str(e.get("name", ""))
        if ph == "M":
            args = e.get("args") or {}
            if name == "process_name" and isinstance(args, dict):
                sb.processes[pid] = str(args.get("name", ""))
            elif name == "thread_name" and isinstance(args, dict):
                sb.tasks[tid] = str(args.get("name", ""))
            sb.notes["metadata"] += 1
            continue
        if ph == "c" or name == "clock_sync":  # clock-domain sync markers: not trace time
            sb.notes["clock_sync"] += 1
            continue
        if "ts" not in e:
            sb.notes["events_without_ts"] += 1
            continue
        try:
            ts = _us_to_ns(e["ts"])
        except (TypeError, ValueError):
            sb.notes["bad_ts"] += 1
            continue
        sb.time(ts)
        sb.notes["events"] += 1
        if ph == "X":
            try:
                end = ts + _us_to_ns(e.get("dur", 0))
            except (TypeError, ValueError):
                end = ts
            sb.time(end)
            sb.slices.append((pid, tid, ts, end, name, 0))
        elif ph == "B":
            stacks.setdefault((pid, tid), []).append((ts, name))
        elif ph == "E":
            stack = stacks.get((pid, tid))
            if stack:
                start, bname = stack.pop()
                sb.slices.append((pid, tid, start, ts, bname, 0))
            else:
                sb.notes["unmatched_end"] += 1
        elif ph == "C":
            args = e.get("args")
            if not isinstance(args, dict):
                sb.notes["bad_counter"] += 1
                continue
            for key, value in args.items():
                try:
                    sb.counters.append(
                        (pid, f"{name} {key}" if key != "value" else name, ts, float(value))
                    )
                except (TypeError, ValueError, OverflowError):
                    sb.notes["bad_counter"] += 1
        elif ph in ("i", "I", "n", "R"):
            sb.slices.append((pid, tid, ts, ts, name, 2))
        elif ph in ("b", "S"):
            key = (pid, str(e.get("cat")), str(e.get("id", e.get("id2"))))
            # An OrderedDict: next(reversed(...)) stays O(1) after deletions, where a dict
            # walks the deleted entries (40 k name-less ends took 6x as long as 10 k).
            async_open.setdefault(key, OrderedDict()).setdefault(name, []).append(ts)
        elif ph in ("e", "F"):
            key = (pid, str(e.get("cat")), str(e.get("id", e.get("id2"))))
            by_name = async_open.get(key, OrderedDict())
            # e events may omit the name: then the latest open slice of that id
            opened = name if name in by_name else next(reversed(by_name), None)
            if opened is None:
                sb.notes["unmatched_async_end"] += 1
                continue
            begin = by_name[opened].pop()
            if not by_name[opened]:
                del by_name[opened]
            sb.slices.append((pid, -1, begin, ts, opened, 1))
        elif ph in ("s", "t", "f"):
            sb.notes["flow_events"] += 1
        elif ph == "T":
            sb.notes["async_steps"] += 1
        else:
            sb.notes[f"phase_{ph}"] += 1
    end = sb.last or 0
    for (pid, tid), stack in stacks.items():
        for start, name in stack:
            sb.slices.append((pid, tid, start, end, name, 3))
            sb.notes["unclosed_begin"] += 1
    for (pid, _, _), by_name in async_open.items():
        for name, starts in by_name.items():
            for start in starts:
                sb.slices.append((pid, -1, start, end, name, 3))
                sb.notes["unclosed_async"] += 1


def parse_chrome_json(data: bytes, *, worker: str, source: str = "<bytes>") -> TraceFrames:
    """Parses Chrome trace JSON (array or object form).

    Raises:
        TraceParseError: not JSON, or JSON without trace events.
    """
    budget = Budget.for_input(len(data), source, FORMAT)
    doc = load_json(budget.inflate(data), source)  # .json.gz as export writes it
    sb = SliceBuilder()
    if isinstance(doc, dict):
        events = doc.get("traceEvents", [])
        system = doc.get("systemTraceEvents")
        if isinstance(system, str):
            from podscope.trace_parsers._ftrace import read_text

            read_text(sb, system)
        if not isinstance(events, list):
            raise TraceParseError(source, FORMAT, "traceEvents is not a list")
    elif isinstance(doc, list):
        events = doc
    else:
        raise TraceParseError(
            source, FORMAT, "JSON is neither an event array nor an object with traceEvents"
        )
    budget.charge_rows(len(events))  # before the work: one row per event at most
    add_events(sb, events)
    if not sb.slices and not sb.counters and not sb.notes.get("events"):
        raise TraceParseError(source, FORMAT, "no trace events in the JSON")
    return validate(sb.frames(worker, source), source)
