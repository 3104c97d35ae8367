"""Chrome trace JSON (chrome://tracing, Perfetto's legacy JSON, systrace controller output) →
``TraceFrames``.

    >>> from trace_parsers.chrome_json import parse_chrome_json
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
from typing import Any

from trace_parsers._slices import SliceBuilder
from trace_parsers.compression import inflate
from trace_parsers.errors import TraceParseError
from trace_parsers.schema import TraceFrames, validate

FORMAT = "chrome_json"


def looks_like_chrome_json(head: bytes) -> bool:
    text = head.lstrip()[:4096]
    return text.startswith(b"[") or (
        text.startswith(b"{") and (b'"traceEvents"' in head or b'"systemTraceEvents"' in head)
    )


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


def _us_to_ns(value: Any) -> int:
    return round(float(value) * 1000)


def add_events(sb: SliceBuilder, events: list[Any]) -> None:
    """Adds Chrome trace events to the builder (the per-event loop of this parser)."""
    stacks: dict[tuple[int, int], list[tuple[int, str]]] = {}
    async_open: dict[tuple[Any, ...], tuple[int, int, str]] = {}
    for e in events:
        if not isinstance(e, dict):
            sb.notes["skipped_events"] += 1
            continue
        ph = e.get("ph")
        try:
            pid, tid = int(e.get("pid", 0)), int(e.get("tid", 0))
        except (TypeError, ValueError):
            pid, tid = hash(str(e.get("pid"))) & 0x7FFFFFFF, hash(str(e.get("tid"))) & 0x7FFFFFFF
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
            for key, value in (e.get("args") or {}).items():
                try:
                    sb.counters.append(
                        (pid, f"{name} {key}" if key != "value" else name, ts, float(value))
                    )
                except (TypeError, ValueError):
                    sb.notes["bad_counter"] += 1
        elif ph in ("i", "I", "n", "R"):
            sb.slices.append((pid, tid, ts, ts, name, 2))
        elif ph in ("b", "S"):
            async_open[(pid, e.get("cat"), e.get("id", e.get("id2")), name)] = (ts, pid, name)
        elif ph in ("e", "F"):
            key = (pid, e.get("cat"), e.get("id", e.get("id2")), name)
            opened = async_open.pop(key, None)
            if opened is None:  # e events may omit the name: match on the id alone
                key2 = next((k for k in async_open if k[:3] == key[:3]), None)
                opened = async_open.pop(key2) if key2 else None
            if opened:
                sb.slices.append((pid, -1, opened[0], ts, opened[2], 1))
            else:
                sb.notes["unmatched_async_end"] += 1
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
    for start, pid, name in async_open.values():
        sb.slices.append((pid, -1, start, end, name, 3))
        sb.notes["unclosed_async"] += 1


def parse_chrome_json(data: bytes, *, worker: str, source: str = "<bytes>") -> TraceFrames:
    """Parses Chrome trace JSON (array or object form).

    Raises:
        TraceParseError: not JSON, or JSON without trace events.
    """
    doc = load_json(inflate(data, source, FORMAT), source)  # .json.gz as export writes it
    sb = SliceBuilder()
    if isinstance(doc, dict):
        events = doc.get("traceEvents", [])
        system = doc.get("systemTraceEvents")
        if isinstance(system, str):
            from trace_parsers._ftrace import read_text

            read_text(sb, system)
        if not isinstance(events, list):
            raise TraceParseError(source, FORMAT, "traceEvents is not a list")
    elif isinstance(doc, list):
        events = doc
    else:
        raise TraceParseError(
            source, FORMAT, "JSON is neither an event array nor an object with traceEvents"
        )
    add_events(sb, events)
    if not sb.slices and not sb.counters and not sb.notes.get("events"):
        raise TraceParseError(source, FORMAT, "no trace events in the JSON")
    return validate(sb.frames(worker, source), source)
