"""Bounded decompression for every parser: gzip (one or more members), zlib and zstd.

A trace's compressed form says nothing about its size: a 4 MB ``.xplane.pb.gz`` can inflate to
8.5 GB, a 131 KB zstd Perfetto file to 4.3 GB. Every stream is inflated here, a chunk at a
time, and stops with a ``TraceParseError`` once the output passes the limit (``max_bytes``:
100 times the input, at least 64 MiB, at most ``PODSCOPE_MAX_DECOMPRESSED_MB`` or 8 GiB),
never after having allocated it. gzip and zlib streams are inflated by zlib-ng.

    >>> data = inflate(raw, "w.xplane.pb.gz", "xplane")       # plain data passes through
    >>> inner = inflate_zlib(packet, source, "perfetto", budget)   # a nested stream
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import cast

# zlib-ng: the zlib format, inflated 2.6x faster than the standard library's zlib (a 33 MB
# PyTorch trace: 21 ms against 55 ms here)
from zlib_ng import zlib_ng as zlib

from podscope.trace_parsers.errors import TraceParseError

#: zlib-ng's error (its stub types it as an instance)
_ZLIB_ERROR = cast(type[Exception], zlib.error)

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: Default cap on what one trace file may inflate to (8 GiB: the largest real captures
#: seen are a few GB uncompressed).
DEFAULT_MAX_BYTES = 8 << 30
_CHUNK = 16 << 20


#: Traces compress 5–30×; a stream that inflates more than this many times its size is a
#: bomb, whatever the absolute cap (a 1.3 KB Perfetto file inflated to 4.1 GB).
MAX_RATIO = 100
#: Small inputs may always inflate this far (a few KB of gzip header and tables).
MIN_ALLOWANCE = 64 << 20


def max_bytes(compressed: int = 0, env: Mapping[str, str] | None = None) -> int:
    """What ``compressed`` bytes may inflate to: ``MAX_RATIO`` times as much (at least
    ``MIN_ALLOWANCE``), and never more than ``PODSCOPE_MAX_DECOMPRESSED_MB`` from ``env``
    (default: the process environment), else ``DEFAULT_MAX_BYTES``."""
    value = (os.environ if env is None else env).get("PODSCOPE_MAX_DECOMPRESSED_MB")
    cap = int(float(value) * (1 << 20)) if value else DEFAULT_MAX_BYTES
    return min(cap, max(MIN_ALLOWANCE, MAX_RATIO * compressed))


def too_big(source: str, fmt: str, limit: int) -> TraceParseError:
    return TraceParseError(
        source,
        fmt,
        f"decompresses to more than {limit:,} bytes (the cap; raise "
        "PODSCOPE_MAX_DECOMPRESSED_MB for a trace this large)",
    )


def inflate(data: bytes, source: str, fmt: str, limit: int | None = None) -> bytes:
    """``data`` inflated when it carries the gzip or zstd magic, else unchanged.

    Raises:
        TraceParseError: a corrupt or truncated stream, or output over ``limit``.
    """
    if data[:2] == GZIP_MAGIC:
        return inflate_zlib(data, source, fmt, limit, gzip=True)
    if data[:4] == ZSTD_MAGIC:
        return _inflate_zstd(data, source, fmt, max_bytes(len(data)) if limit is None else limit)
    return data


def inflate_zlib(
    data: bytes, source: str, fmt: str, limit: int | None = None, *, gzip: bool = False
) -> bytes:
    """A zlib stream (or gzip members, one after another) inflated to at most ``limit``.

    Raises:
        TraceParseError: a corrupt or truncated stream, or output over ``limit``.
    """
    limit = max_bytes(len(data)) if limit is None else limit
    wbits, kind = (31, "gzip") if gzip else (15, "zlib")
    chunks: list[bytes] = []  # joined once at the end (a growing buffer is copied as it grows)
    total = 0
    # A gzip trailer's last 4 bytes are its member's size (mod 2**32): the first call asks for
    # that much, so a one-member file (what torch.profiler writes) inflates in one call and is
    # never copied. Only up to half the cap: one call holds its output twice as it ends.
    hint = int.from_bytes(data[-4:], "little") + 1 if gzip else 0
    size = hint if _CHUNK < hint <= limit // 2 else _CHUNK
    d = zlib.decompressobj(wbits)
    pending = data
    try:
        while True:
            chunk = d.decompress(pending, min(size, limit + 1 - total))
            size = _CHUNK
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise too_big(source, fmt, limit)
            pending = d.unconsumed_tail
            if d.eof:
                rest = d.unused_data
                if gzip and rest[:2] == GZIP_MAGIC:  # a concatenated member
                    d, pending = zlib.decompressobj(wbits), rest
                    continue
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if not pending and not chunk:  # input used up, nothing more comes out
                raise TraceParseError(
                    source, fmt, f"corrupt {kind} stream (truncated: it ends mid-stream)"
                )
    except _ZLIB_ERROR as e:
        raise TraceParseError(source, fmt, f"corrupt {kind} stream ({e})") from e


def _inflate_zstd(data: bytes, source: str, fmt: str, limit: int) -> bytes:
    import zstandard

    out = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(data), read_across_frames=True
        ) as reader:
            while chunk := reader.read(min(_CHUNK, limit + 1 - len(out))):
                out += chunk
                if len(out) > limit:
                    raise too_big(source, fmt, limit)
    except zstandard.ZstdError as e:
        raise TraceParseError(source, fmt, f"corrupt zstd stream ({e})") from e
    return bytes(out)
