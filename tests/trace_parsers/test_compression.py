"""Decompression bombs end in a typed error within bounded memory and time; a legitimate
compressed trace still parses (``trace_parsers.compression``)."""

from __future__ import annotations

import gzip
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from podscope.trace_parsers import TraceParseError, load
from podscope.trace_parsers.compression import MIN_ALLOWANCE, inflate_zlib, max_bytes

ZEROS = b"\0" * (96 << 20)  # 96 MiB: past the 64 MiB allowance of a small input


def bounded(fn: Callable[[], object], compressed: int) -> str:
    """Runs ``fn``, which must raise a TraceParseError, within 20 s and a peak of 4× the input
    plus the cap; returns the error's text."""
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(TraceParseError) as err:
            fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - t0 < 20
    assert peak < 4 * compressed + max_bytes(compressed) + (32 << 20), peak
    return str(err.value)


def test_a_gzip_xplane_bomb_stops_at_the_cap() -> None:
    from podscope.trace_parsers.xplane import parse_xplane

    bomb = gzip.compress(ZEROS, 9)
    assert len(bomb) < 200_000  # about 1000:1
    text = bounded(lambda: parse_xplane(bomb, worker="w", source="bomb.xplane.pb.gz"), len(bomb))
    assert "bomb.xplane.pb.gz" in text and "decompresses to more than" in text


def test_a_zstd_perfetto_bomb_stops_at_the_cap() -> None:
    zstandard = pytest.importorskip("zstandard")
    from podscope.trace_parsers.perfetto import parse_perfetto

    bomb = zstandard.ZstdCompressor(level=3).compress(ZEROS)
    text = bounded(lambda: parse_perfetto(bomb, worker="w", source="b.pftrace"), len(bomb))
    assert "decompresses to more than" in text


def test_an_atrace_z_bomb_stops_at_the_cap() -> None:
    from podscope.trace_parsers.atrace import parse_atrace

    bomb = b"TRACE:\n" + zlib.compress(ZEROS, 9)
    text = bounded(lambda: parse_atrace(bomb, worker="w", source="b.ctrace"), len(bomb))
    assert "decompresses to more than" in text


def test_nested_compressed_packets_are_refused_not_a_recursion_error() -> None:
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from podscope.trace_parsers.perfetto import parse_perfetto

    inner = pb.Trace(packet=[pb.TracePacket(timestamp=1)]).SerializeToString()
    for _ in range(1500):
        inner = pb.Trace(
            packet=[pb.TracePacket(compressed_packets=zlib.compress(inner))]
        ).SerializeToString()
    text = bounded(lambda: parse_perfetto(inner, worker="w", source="n.pftrace"), len(inner))
    assert "nested over" in text


def test_a_nested_packet_bomb_shares_the_file_cap() -> None:
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from podscope.trace_parsers.perfetto import parse_perfetto

    big = zlib.compress(ZEROS[: 8 << 20], 9)  # 8 MiB each, 16 of them: 128 MiB from ~130 KB
    packets = [pb.TracePacket(compressed_packets=big) for _ in range(16)]
    data = gzip.compress(pb.Trace(packet=packets).SerializeToString())
    text = bounded(lambda: parse_perfetto(data, worker="w", source="p.pftrace"), len(data))
    assert "decompresses to more than" in text


def test_truncated_and_multi_member_gzip() -> None:
    payload = b"x" * 100_000
    two = gzip.compress(payload[:50_000]) + gzip.compress(payload[50_000:])
    assert inflate_zlib(two, "s", "f", gzip=True) == payload
    with pytest.raises(TraceParseError, match="truncated"):
        inflate_zlib(gzip.compress(payload)[:-20], "s", "f", gzip=True)
    assert max_bytes(1000, {"PODSCOPE_MAX_DECOMPRESSED_MB": "1"}) == 1 << 20
    assert max_bytes(10, {}) == MIN_ALLOWANCE


def test_an_exported_json_gz_parses_back(tmp_path: Path) -> None:
    from podscope.trace_parsers.chrome import write_chrome_trace
    from tests.analyzers.test_breakdown import worker_trace

    (tmp_path / "w.xplane.pb").write_bytes(worker_trace("w", 3))
    frames = load(tmp_path / "w.xplane.pb", cache=False)
    n = write_chrome_trace(frames, tmp_path / "trace.json.gz")
    back = load(tmp_path / "trace.json.gz", cache=False)
    assert len(back.events) == n > 0
