"""Fuzz: mutated inputs of every format give a parse or a TraceParseError, nothing else.

``make test`` runs a bounded count per format (PODSCOPE_FUZZ_N, default 300); ``make fuzz``
runs 5,000 per format.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import zlib
from pathlib import Path

import pytest

from tests.analyzers.test_breakdown import worker_trace
from tests.conftest import SHARED_TRACES
from trace_parsers import TraceParseError, load

N = int(os.environ.get("PODSCOPE_FUZZ_N", "300"))
ATRACE = (
    b"# tracer: nop\n"
    + b"".join(
        f"  app-{100 + i % 3} ({100:>5}) [00{i % 2}] ...1 {1.0 + i / 1e4:.6f}: tracing_mark_write: {p}\n".encode()
        for i, p in enumerate(
            [
                "B|100|invoke@-1/0",
                "B|100|CONV_2D@0/0",
                "E|100",
                "C|100|q|1.5",
                "S|100|a|7",
                "E|100",
                "F|100|a|7",
                "I|100|tick",
            ]
            * 5
        )
    )
    + b"  <idle>-0 [000] d..3 1.100000: sched_switch: prev_comm=swapper prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=app next_pid=100 next_prio=120\n"
)
CHROME = json.dumps(
    {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}},
            {"ph": "B", "name": "a", "pid": 1, "tid": 2, "ts": 1.5},
            {"ph": "E", "pid": 1, "tid": 2, "ts": 9.25},
            {"ph": "X", "name": "b", "pid": 1, "tid": 2, "ts": 3, "dur": 2},
            {"ph": "C", "name": "c", "pid": 1, "ts": 4, "args": {"v": 3}},
            {"ph": "b", "name": "d", "cat": "x", "id": "0x1", "pid": 1, "ts": 5},
            {"ph": "e", "name": "d", "cat": "x", "id": "0x1", "pid": 1, "ts": 8},
        ]
    }
).encode()


def samples() -> dict[str, bytes]:
    out = {
        "atrace": ATRACE,
        "ctrace": b"TRACE:\n" + zlib.compress(ATRACE),
        "html": b'<!DOCTYPE html><html><body><script class="trace-data" type="application/text">'
        + ATRACE
        + b"</script></body></html>",
        "chrome": CHROME,
        "xplane": worker_trace("w_1", 5, input_us=10),
        "xplane_gz": gzip.compress(worker_trace("w_1", 3)),
    }
    perfetto = SHARED_TRACES / "android" / "synthetic" / "synthetic_tflite.pftrace"
    if perfetto.exists():
        out["perfetto"] = perfetto.read_bytes()
    return out


def mutate(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return data[: rng.randrange(len(data) + 1)]
    buf = bytearray(data)
    if kind == 1:
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        return bytes(buf)
    if kind == 2:
        lines = data.split(b"\n")
        i = rng.randrange(len(lines))
        junk = bytes(rng.randrange(32, 127) for _ in range(rng.randint(0, 80)))
        lines.insert(i, junk) if rng.random() < 0.5 else lines.pop(i)
        return b"\n".join(lines)
    start = rng.randrange(len(buf))
    return bytes(
        buf[:start] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) + buf[start:]
    )


@pytest.mark.parametrize("fmt", sorted(samples()))
def test_mutations_parse_or_raise_trace_parse_error(fmt: str, tmp_path: Path) -> None:
    rng = random.Random(f"podscope-{fmt}")
    data = samples()[fmt]
    path = tmp_path / "input.bin"
    parsed = 0
    for _ in range(N):
        path.write_bytes(mutate(data, rng))
        try:
            load(path, cache=False)
            parsed += 1
        except TraceParseError:
            pass
    assert 0 <= parsed <= N
