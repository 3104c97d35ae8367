"""Fuzz: mutated inputs of every format give a parse or a TraceParseError, nothing else.

``make test`` runs a bounded count per format (PODSCOPE_FUZZ_N, default 300); ``make fuzz``
runs 5,000 per format.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import zlib
from pathlib import Path

import pytest

from podscope.trace_parsers import TraceParseError, load
from tests.analyzers.test_breakdown import worker_trace
from tests.conftest import SHARED_TRACES

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


KINETO = json.dumps(
    {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU", "numSms": 80}],
        "distributedInfo": {"rank": 0, "world_size": 2, "backend": "nccl"},
        "traceEvents": [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "py"}},
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "ProfilerStep#4",
                "pid": 1,
                "tid": 2,
                "ts": 100.125,
                "dur": 50.5,
                "args": {"External id": 1},
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 2,
                "ts": 101.5,
                "dur": 9,
                "args": {"Input Dims": [[8, 8], [8, 8]], "Input type": ["float", "float"]},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 2,
                "ts": 103,
                "dur": 2,
                "args": {"correlation": 7},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ncclKernel_AllReduce",
                "pid": 0,
                "tid": 7,
                "ts": 106,
                "dur": 20,
                "args": {
                    "device": 0,
                    "stream": 7,
                    "correlation": 7,
                    "Collective name": "allreduce",
                    "In msg nelems": 64,
                },
            },
            {"ph": "s", "cat": "ac2g", "id": 7, "pid": 1, "tid": 2, "ts": 103},
            {"ph": "f", "cat": "ac2g", "id": 7, "pid": 0, "tid": 7, "ts": 106, "bp": "e"},
        ],
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
        "kineto": KINETO,
        "kineto_gz": gzip.compress(KINETO),
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


MANIFEST = json.dumps(
    {
        "session": "2026_01_01_00_00_00",
        "start_timestamp_ns": 1_767_225_600_000_000_000,
        "options": {"duration_ms": 2000, "delay_ms": 500, "logdir": "runs"},
        "workers": [
            {"label": "10.0.0.1_6010", "status": "ok", "role": "worker", "index": 0, "bytes": 9},
            {"label": "10.0.0.2_6010", "status": "busy", "reason": "another", "bytes": 0},
        ],
    }
).encode()


def test_capture_manifest_mutations_read_or_raise_layout_error(tmp_path: Path) -> None:
    """A session's capture.json, mutated: a manifest, or a LayoutError (which marks only that
    session on the Sessions page)."""
    from podscope.trace_parsers import layout

    rng = random.Random("podscope-manifest")
    for _ in range(N):
        (tmp_path / layout.MANIFEST_NAME).write_bytes(mutate(MANIFEST, rng))
        with contextlib.suppress(layout.LayoutError):
            layout.read_manifest(tmp_path)


def test_upload_mutations_import_or_report(tmp_path: Path) -> None:
    """Uploads of every format, mutated, through the dashboard's store: a session, or one
    "name: reason" per file; never an exception (the page would answer HTTP 500)."""
    from podscope.app.store import SessionStore

    store = SessionStore(tmp_path)
    rng = random.Random("podscope-upload")
    names = {
        "xplane": "w.xplane.pb",
        "xplane_gz": "w.xplane.pb.gz",
        "chrome": "w.json",
        "kineto": "w.pt.trace.json",
        "kineto_gz": "w.pt.trace.json.gz",
    }
    for fmt, data in sorted(samples().items()):
        for _ in range(max(1, N // 10)):
            name = names.get(fmt, f"w.{fmt}")
            result = store.import_files([(name, mutate(data, rng))])
            assert result.session or result.errors
