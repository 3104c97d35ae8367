"""The ftrace text reader (C, ``_ftrace_fast.c``): every line form and marker kind, checked by
hand, and its line grammar cross-checked against the documented regex on mutated lines."""

from __future__ import annotations

import contextlib
import random
import re
import time

import pytest

from podscope.trace_parsers import TraceParseError
from podscope.trace_parsers._ftrace_fast import read_ftrace, unescape_js
from podscope.trace_parsers.atrace import parse_atrace

TEXT = "\r\n".join(
    [
        "# tracer: nop",
        "#           TASK-PID    TGID   CPU#  ||||    TIMESTAMP  FUNCTION",
        "",
        # tgid column, flags, a task name with '-' and spaces
        "  Binder -worker 2-1701  ( 1650) [001] ...1  10.000100: tracing_mark_write: B|1650|invoke@-1/0",
        "  Binder -worker 2-1701  ( 1650) [001] ...1  10.000200: tracing_mark_write: B|1650|CONV_2D@0/0",
        "  Binder -worker 2-1701  ( 1650) [001] ...1  10.000300: tracing_mark_write: E|1650",
        # (-----) tgid and <...>: the thread keeps its name and tgid from other lines
        "  <...>-1701  (-----) [001] ...1  10.000400: tracing_mark_write: E",
        "  <...>-1701  (-----) [001] ...1  10.000450: tracing_mark_write: E|1650",  # unmatched
        # no tgid column, no flags, an old kernel's "0" event name, pid taken from the thread
        "  legacy-900 [000] 10.000500: 0: B|900|old kernel",
        "  legacy-900 [000] 10.000600: 0: E",
        # counters (one bad), async with cookies (one unmatched F), instants and track markers
        "  app-1702  ( 1650) [002] ...1  10.000700: tracing_mark_write: C|1650|queue|2.5",
        "  app-1702  ( 1650) [002] ...1  10.000710: tracing_mark_write: C|1650|queue|x",
        "  app-1702  ( 1650) [002] ...1  10.000800: tracing_mark_write: S|1650|load|7",
        "  app-1702  ( 1650) [002] ...1  10.000900: tracing_mark_write: F|1650|load|7",
        "  app-1702  ( 1650) [002] ...1  10.000950: tracing_mark_write: F|1650|load|8",
        "  app-1702  ( 1650) [002] ...1  10.001000: tracing_mark_write: I|1650|tick",
        "  app-1702  ( 1650) [002] ...1  10.001100: tracing_mark_write: N|1650|track|mark|5",
        "  app-1702  ( 1650) [002] ...1  10.001150: tracing_mark_write: Q|1650|what",
        "  app-1702  ( 1650) [002] ...1  10.001160: tracing_mark_write: B|1650|never closed",
        # scheduling, with a comm that has a space, and CPU counters
        "  <idle>-0  (-----) [003] d..3  10.001200: sched_switch: prev_comm=swapper/3 prev_pid=0 "
        "prev_prio=120 prev_state=R ==> next_comm=Render Thread next_pid=1703 next_prio=110",
        "  Render Thread-1703  ( 1650) [003] d..3  10.001500: sched_switch: prev_comm=Render Thread "
        "prev_pid=1703 prev_prio=110 prev_state=S ==> next_comm=swapper/3 next_pid=0 next_prio=120",
        "  <idle>-0  (-----) [003] d..3  10.001600: sched_switch: garbage",
        "  <idle>-0  (-----) [003] d..2  10.001700: cpu_frequency: state=1800000 cpu_id=3",
        "  <idle>-0  (-----) [003] d..2  10.001800: cpu_idle: state=1 cpu_id=03",
        # a clock sync at 0.0 never stretches the span; garbage is counted; a lone CR ends a line
        "  <...>-1  (-----) [000] ...1  0.000000: tracing_mark_write: trace_event_clock_sync: "
        "parent_ts=0.0\rnot an ftrace line",
        "##### CPU 2 buffer started ####",
        "  app-1702  ( 1650) [002] ...1  10.002000: sched_wakeup: comm=app pid=1702 prio=120",
    ]
)


@pytest.fixture(scope="module")
def frames():  # type: ignore[no-untyped-def]
    return parse_atrace(TEXT.encode(), worker="phone")


def test_counts(frames) -> None:  # type: ignore[no-untyped-def]
    n = frames.parse_notes.set_index("key")["value"].to_dict()
    assert n["events"] == 23 and n["skipped_lines"] == 1 and n["clock_sync"] == 1
    assert n["markers"] == 15 and n["unknown_marker"] == 1 and n["unmatched_end"] == 1
    assert n["bad_counter"] == 1 and n["unmatched_async_finish"] == 1
    assert n["sched_switch"] == 2 and n["bad_sched_switch"] == 1
    assert n["sched_wakeup"] == 1 and n["cpu_frequency"] == 1 and n["cpu_idle"] == 1
    assert n["unclosed_begin"] == 1
    w = frames.workers.iloc[0]
    assert w["capture_start_ns"] == 10_000_100_000 and w["capture_stop_ns"] == 10_002_000_000


def test_slices_nesting_and_names(frames) -> None:  # type: ignore[no-untyped-def]
    ev = frames.events.set_index("name")
    inv, conv = ev.loc["invoke@-1/0"], ev.loc["CONV_2D@0/0"]
    assert (inv["start_ns"], inv["dur_ps"], inv["depth"]) == (10_000_100_000, 300_000_000, 0)
    assert (conv["dur_ps"], conv["depth"], conv["op_type"]) == (100_000_000, 1, "CONV_2D")
    assert inv["line"] == "Binder -worker 2 (1701)" and inv["plane"].endswith("(1650)")
    old = ev.loc["old kernel"]
    assert old["dur_ps"] == 100_000_000 and old["plane"].endswith("(900)")
    assert ev.loc["load", "dur_ps"] == 100_000_000 and ev.loc["load", "line"] == "async: load"
    assert ev.loc["tick", "dur_ps"] == 0 and ev.loc["track|mark", "dur_ps"] == 0
    assert ev.loc["never closed", "start_ns"] == 10_001_160_000  # kept, closed at the end
    assert len(frames.events) == 7


def test_counters_and_sched(frames) -> None:  # type: ignore[no-untyped-def]
    c = frames.counters.set_index("name")
    assert c.loc["queue", "value"] == 2.5 and c.loc["queue", "process"] == "pid 1650"
    assert c.loc["cpu_frequency cpu3", "value"] == 1_800_000
    assert c.loc["cpu_idle cpu03", "value"] == 1
    s = frames.sched.sort_values("start_ns")
    assert s["comm"].tolist() == ["Render Thread", "swapper/3"]
    assert s["dur_ns"].iloc[0] == 300_000 and s["end_state"].iloc[0] == "S"
    assert s["cpu"].tolist() == [3, 3]


# The line grammar as the reader documents it, with RE2's ASCII classes spelled out.
_S, _W = r"[\t\n\f\r ]", r"[0-9A-Za-z_.]"
LINE = re.compile(
    rf"^{_S}*(.+?)-(\d+){_S}+(?:\({_S}*(\d+|-----)\){_S}+)?\[(\d+)\]{_S}+"
    rf"(?:{_W}{{4,5}}{_S}+)?(\d+(?:\.\d+)?):{_S}+({_W}+):{_S}?(.*)$".encode(),
    re.S,
)
SEED_LINES = [line.encode() for line in TEXT.split("\r\n") if line and not line.startswith("#")]
ALPHABET = b" -()[]|.:0123456789aZ_\t>="


def test_line_grammar_matches_the_regex() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        line = bytearray(rng.choice(SEED_LINES).split(b"\r")[0])
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(line) + 1)
            op = rng.random()
            if op < 0.4 and at < len(line):
                del line[at]
            elif op < 0.8:
                line.insert(at, rng.choice(ALPHABET))
            elif at < len(line):
                line[at] = rng.choice(ALPHABET)
        got = read_ftrace(bytes(line))["lines"]
        m = LINE.match(bytes(line))
        fits = m is not None and (int(m.group(5).split(b".")[0]) + 1) * 10**9 < 2**63  # int64 ns
        assert got == (1 if fits else 0), bytes(line)


def test_unescape_js() -> None:
    assert unescape_js(b'a\\n\\\nb\\nc \\"q\\" \\t') == b'a\nb\nc "q" \\t'


SCHED = re.compile(
    rf"prev_state=([^\t\n\f\r ]*).*next_comm=(.*?){_S}+next_pid=(\d+)".encode(), re.S
)
SCHED_SEED = (
    b"  <idle>-0  (-----) [003] d..3  10.001200: sched_switch: prev_comm=swapper/3 prev_pid=0 "
    b"prev_prio=120 prev_state=R ==> next_comm=Render Thread next_pid=1703 next_prio=110"
)


def parsed_sched(line: bytes) -> tuple[bytes, bytes, int] | None:
    r = read_ftrace(line)
    if not len(r["w_ts"]):
        return None
    code = {k: int.from_bytes(r[k][:4], "little", signed=True) for k in ("w_state", "w_comm")}
    tid = int.from_bytes(r["w_tid"][:8], "little", signed=True)
    return (
        r["strings"][code["w_state"]].encode(),
        r["strings"][code["w_comm"]].encode(),
        tid,
    )


def test_sched_switch_payload_matches_the_regex() -> None:
    rng = random.Random(11)
    words = [b"prev_state=", b"next_comm=", b"next_pid=", b" ", b"7", b"S", b"x y"]
    head, payload = SCHED_SEED.split(b"sched_switch: ")
    for _ in range(2000):
        body = bytearray(payload)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(body) + 1)
            if rng.random() < 0.3 and at < len(body):
                del body[at : at + rng.randint(1, 12)]
            else:
                body[at:at] = rng.choice(words)
        m = SCHED.search(bytes(body))
        want = (m.group(1), m.group(2), int(m.group(3))) if m and len(m.group(3)) <= 18 else None
        assert parsed_sched(head + b"sched_switch: " + bytes(body)) == want, bytes(body)


def test_a_crafted_sched_switch_line_is_not_slow() -> None:
    """Many prev_state= / next_comm= and no next_pid=: a backtracking search was cubic."""
    body = b"prev_state=R " + b"next_comm=a " * 20_000 + b"prev_state=S " * 20_000
    start = time.perf_counter()
    assert parsed_sched(SCHED_SEED.split(b"sched_switch: ")[0] + b"sched_switch: " + body) is None
    assert time.perf_counter() - start < 5  # linear: milliseconds; cubic: hours


@pytest.mark.parametrize(
    "html",
    [
        b"<html>" + b'<script class="trace-data" type="application/text">x' * 40_000,
        b"<html>" + b'<script id="viewer-data" type="text/plain">x' * 40_000,
        b'<html>var linuxPerfData = "\\\n' + b'";x' * 300_000,
    ],
    ids=["unclosed-trace-data", "unclosed-viewer-data", "legacy-quotes"],
)
def test_crafted_systrace_html_is_not_slow(html: bytes) -> None:
    """Unclosed script tags / many quotes: a lazy regex rescanned the file for each one."""
    start = time.perf_counter()
    with contextlib.suppress(TraceParseError):
        parse_atrace(html, worker="w")
    assert time.perf_counter() - start < 5  # linear: milliseconds; quadratic: hours
