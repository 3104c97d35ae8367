"""What one input file may cost, all of it together and linear in the file's size.

A small file can ask for unbounded work: a 5 KB zstd Perfetto trace held 5.24 M events, a 62 KB
gzip XPlane 32 M empty events, and a 221 KB ``TRACE:`` file nested a second stream whose own
cap let it inflate to 5.1 GB. One ``Budget`` per input file is handed down to every stream
and parser that reads it:

- **bytes**: everything inflated from the file, nested streams included, at most
  ``compression.max_bytes(size)`` (100 x the file, at least 64 MiB, at most
  ``PODSCOPE_MAX_DECOMPRESSED_MB`` or 8 GiB);
- **rows**: events, counters and stats made from it, at most ``ROWS_FLOOR`` +
  ``ROWS_PER_BYTE`` x the file's size (``PODSCOPE_MAX_ROWS`` sets another cap). Real captures
  stay far below it: a 1.2 M-event tf-keras XPlane is 60 MB (0.02 rows per byte), gzipped 8 MB.

Over either, the parser stops with a ``TraceParseError`` that says which cap and how to raise
it; the XPlane decoder stops in C before storing the row over the cap.

    >>> budget = Budget.for_input(len(raw), source, "xplane")
    >>> data = budget.inflate(raw)          # charges the bytes
    >>> budget.charge_rows(n)               # charges rows as they are made
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from podscope.trace_parsers.compression import inflate, inflate_zlib, max_bytes, too_big
from podscope.trace_parsers.errors import TraceParseError

#: Rows any file may make, whatever its size (a few KB of gzip can legitimately hold this many).
ROWS_FLOOR = 2_000_000
#: Rows per byte of the file as given (compressed): real traces make at most ~0.3.
ROWS_PER_BYTE = 4


@dataclass
class Budget:
    """The caps of one input file and what it has used of them."""

    source: str
    fmt: str
    size: int
    max_bytes: int
    max_rows: int
    inflated: int = 0
    rows: int = 0

    @classmethod
    def for_input(
        cls, size: int, source: str, fmt: str, env: Mapping[str, str] | None = None
    ) -> Budget:
        """The caps of a file of ``size`` bytes (``env``: the process environment by default,
        read here, the library's edge)."""
        e = os.environ if env is None else env
        override = e.get("PODSCOPE_MAX_ROWS")
        rows = int(override) if override else ROWS_FLOOR + ROWS_PER_BYTE * size
        return cls(source, fmt, size, max_bytes(size, e), rows)

    def rows_left(self) -> int:
        return max(0, self.max_rows - self.rows)

    def bytes_left(self) -> int:
        return max(0, self.max_bytes - self.inflated)

    def charge_bytes(self, n: int) -> None:
        """Counts ``n`` inflated bytes.

        Raises:
            TraceParseError: over the bytes cap.
        """
        self.inflated += n
        if self.inflated > self.max_bytes:
            raise too_big(self.source, self.fmt, self.max_bytes)

    def charge_rows(self, n: int) -> None:
        """Counts ``n`` rows (events, counters, stats).

        Raises:
            TraceParseError: over the rows cap.
        """
        self.rows += n
        if self.rows > self.max_rows:
            raise rows_error(self.source, self.fmt, self.max_rows, self.size)

    def inflate(self, data: bytes) -> bytes:
        """``data`` inflated (gzip or zstd; plain data passes through free), within the budget."""
        out = inflate(data, self.source, self.fmt, self.bytes_left())
        if out is not data:
            self.charge_bytes(len(out))
        return out

    def inflate_zlib(self, data: bytes, *, gzip: bool = False) -> bytes:
        """A zlib (or gzip) stream nested in the file, inflated within the budget."""
        out = inflate_zlib(data, self.source, self.fmt, self.bytes_left(), gzip=gzip)
        self.charge_bytes(len(out))
        return out


def rows_error(source: str, fmt: str, limit: int, size: int) -> TraceParseError:
    return TraceParseError(
        source,
        fmt,
        f"makes more than {limit:,} events and stats from {size:,} bytes (the cap is "
        f"{ROWS_FLOOR:,} + {ROWS_PER_BYTE} per byte of the file; set PODSCOPE_MAX_ROWS for a "
        "trace this dense)",
    )
