"""Android ftrace/atrace text (systrace), ``atrace -z`` (``TRACE:`` + zlib) and systrace HTML →
``TraceFrames``.

    >>> from podscope.trace_parsers.atrace import parse_atrace
    >>> frames = parse_atrace(open("trace.html", "rb").read(), worker="pixel7")
    >>> frames.events[["plane", "line", "name", "start_ns", "dur_ps", "depth"]]

Line grammar (Perfetto's systrace tokenizer): ``<task>-<tid> [(<tgid>|-----)] [cpu] [flags]
<ts>: <event>: <payload>``; old kernels have no tgid/flags and call tracing_mark_write ``0``.
Markers: ``B|pid|name`` (everything after pid is the name), ``E|pid`` or ``E``, ``C|pid|name|value``,
``S|pid|name|cookie`` / ``F|pid|name|cookie`` (async), ``I|pid|name`` (instant); ``N``/``G``/``H``
(newer track markers) are counted and kept as instants. ``sched_switch`` lines become CPU
scheduling slices; ``cpu_frequency``/``cpu_idle`` counters. Unmatched ``E`` and unclosed ``B``
are counted in ``parse_notes`` (an unclosed B is kept, ending at the last timestamp); lines
that do not parse are skipped and counted. Clock-sync markers (one real sample has a 0.0
timestamp) never stretch the span.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterator
from typing import Any

from podscope.trace_parsers._ftrace import _ftrace_fast, read_text
from podscope.trace_parsers._slices import SliceBuilder
from podscope.trace_parsers.budget import Budget
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.schema import TraceFrames, validate

FORMAT = "atrace"
_KV = re.compile(r"(\w+)=(\S+)")
_MARKER_EVENTS = frozenset({"tracing_mark_write", "0", "print"})


def extract_text(
    data: bytes, source: str, budget: Budget | None = None
) -> tuple[list[str | bytes], list[Any]]:
    """The ftrace text blocks of a file (plain text stays UTF-8 bytes), and the JSON blocks of
    systrace HTML, unparsed.

    The ``TRACE:`` stream and a trace2html viewer-data stream inside it share the file's
    ``budget`` (each had its own cap: 221 KB inflated to 5.1 GB).

    Raises:
        TraceParseError: a corrupt ``TRACE:`` zlib stream, a file with no trace text, or over
            the budget.
    """
    budget = budget or Budget.for_input(len(data), source, FORMAT)
    if data.startswith(b"TRACE:"):
        data = budget.inflate_zlib(data[6:].lstrip(b"\r\n"))
    if not data[:4096].lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        return [data], []
    text = data.decode("utf-8", errors="replace")
    blocks: list[str | bytes] = []
    jsons: list[Any] = []
    legacy = _legacy_block(data)
    if legacy is not None:
        blocks.append(legacy)
    for raw in _script_bodies(text, _TRACE_DATA):
        body = html.unescape(raw).strip()
        if body.startswith(("{", "[")):
            try:
                jsons.append(json.loads(body))
            except (ValueError, RecursionError):
                jsons.append(None)  # counted as an unreadable JSON block in parse_notes
            continue
        blocks.append(body)
    viewer = next(_script_bodies(text, _VIEWER_DATA), None)
    if viewer is not None:
        try:
            packed = base64.b64decode(viewer.strip())
            blocks.append(budget.inflate_zlib(packed, gzip=True).decode("utf-8", "replace"))
        except ValueError as e:
            raise TraceParseError(
                source, FORMAT, f"corrupt trace2html viewer-data block ({e})"
            ) from e
    if not blocks and not jsons:
        raise TraceParseError(
            source, FORMAT, "HTML without systrace data (no linuxPerfData or trace-data block)"
        )
    return blocks, jsons


_TRACE_DATA = re.compile(r'<script class="trace-data" type="application/text">')
_VIEWER_DATA = re.compile(r'<script id="viewer-data" type="(?:application/json|text/plain)">')


def _script_bodies(text: str, opening: re.Pattern[str]) -> Iterator[str]:
    """The bodies of the ``<script>`` elements whose tag is ``opening``, in order; each ends at
    the next ``</script>`` (found with ``find``: ``<tag>(.*?)</script>`` rescanned the rest of
    the file for every unclosed tag, quadratic on a crafted file)."""
    m = opening.search(text)
    while m:
        end = text.find("</script>", m.end())
        if end < 0:
            return
        yield text[m.end() : end]
        m = opening.search(text, end)


_JS_STRING_END = re.compile(rb'";[^\S\n]*(?:\n|\Z)')


def _legacy_block(data: bytes) -> bytes | None:
    """The ftrace text of old systrace HTML: a JS string ``var linuxPerfData = "\\⏎ … ";`` whose
    lines end in ``\\n\\⏎``, unescaped in one C pass (a lazy regex over a multi-MB file cost
    ~20 ms, three ``replace`` passes ~15 ms)."""
    head = data.find(b'var linuxPerfData = "')
    if head < 0:
        return None
    start = head + len(b'var linuxPerfData = "')
    end = -1
    if data.startswith(b"\\\n", start):  # continued string: ends at a line ending in ";
        line_end = _JS_STRING_END.search(data, start + 2)
        if line_end:
            end, start = line_end.start(), start + 2
    if end < 0:
        end = data.find(b'";', start)
        if end < 0:
            return None
    return _ftrace_fast.unescape_js(memoryview(data)[start:end])


def _marker(st: SliceBuilder, tid: int, tgid: int, ts: int, payload: str) -> None:
    kind, _, rest = payload.partition("|")
    kind = kind.strip()
    if kind == "E":
        stack = st.stacks[tid]
        if stack:
            start, name, pid = stack.pop()
            st.slices.append((pid, tid, start, ts, name, 0))
        else:
            st.notes["unmatched_end"] += 1
        st.notes["markers"] += 1
        return
    pid_s, _, rest = rest.partition("|")
    pid = int(pid_s) if pid_s.strip().lstrip("-").isdigit() else tgid
    if kind == "B":
        st.stacks[tid].append((ts, rest.rstrip("\n"), pid))
    elif kind == "C":
        name, _, value = rest.rpartition("|")
        try:
            st.counters.append((pid, name, ts, float(value)))
        except ValueError:
            st.notes["bad_counter"] += 1
    elif kind in ("S", "F"):
        name, _, cookie = rest.rpartition("|")
        key = (pid, name, cookie)
        if kind == "S":
            st.async_open[key] = ts
        elif key in st.async_open:
            st.slices.append((pid, -1, st.async_open.pop(key), ts, name, 1))
        else:
            st.notes["unmatched_async_finish"] += 1
    elif kind in ("I", "N", "G", "H"):
        st.slices.append((pid, tid, ts, ts, rest.rpartition("|")[0] if kind != "I" else rest, 2))
    else:
        st.notes["unknown_marker"] += 1
        return
    st.notes["markers"] += 1


def _sched_switch(st: SliceBuilder, cpu: int, ts: int, payload: str) -> None:
    kv = dict(_KV.findall(payload.replace(" ==> ", " ")))
    if "next_pid" not in kv or not kv["next_pid"].isdigit():
        st.notes["bad_sched_switch"] += 1
        return
    prev = st.running.pop(cpu, None)
    if prev is not None:
        start, tid, comm = prev
        st.sched.append((cpu, start, ts - start, tid, comm, kv.get("prev_state", "")))
    st.running[cpu] = (ts, int(kv["next_pid"]), kv.get("next_comm", ""))
    st.notes["sched_switch"] += 1


def parse_atrace(data: bytes, *, worker: str, source: str = "<bytes>") -> TraceFrames:
    """Parses systrace text / ``atrace -z`` / systrace HTML into frames.

    Raises:
        TraceParseError: no parsable trace line at all, or a corrupt compressed block.
    """
    budget = Budget.for_input(len(data), source, FORMAT)
    blocks, jsons = extract_text(data, source, budget)
    st = SliceBuilder()
    for block in blocks:
        read_text(st, block)
        budget.charge_rows(st.rows() - budget.rows)
    for doc in jsons:  # the systrace controller's JSON block(s)
        if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
            from podscope.trace_parsers.chrome_json import add_events

            add_events(st, doc["traceEvents"])
    st.notes["json_blocks"] = len(jsons)
    st.notes["unreadable_json_blocks"] = sum(j is None for j in jsons)
    if st.notes["events"] == 0:
        raise TraceParseError(
            source,
            FORMAT,
            f"no ftrace line could be read ({st.notes['skipped_lines']} lines skipped)",
        )
    end = st.last if st.last is not None else 0
    for tid, stack in st.stacks.items():
        for start, name, pid in stack:
            st.slices.append((pid, tid, start, end, name, 3))
            st.notes["unclosed_begin"] += 1
    for (pid, name, _cookie), start in st.async_open.items():
        st.slices.append((pid, -1, start, end, name, 3))
        st.notes["unclosed_async"] += 1
    for cpu, (start, tid, comm) in st.running.items():
        st.sched.append((cpu, start, end - start, tid, comm, ""))
    return validate(st.frames(worker, source), source)
