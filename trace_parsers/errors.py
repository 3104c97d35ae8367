"""Typed errors of the trace parsers: every failure names the file, the format and the reason.

>>> from podscope.trace_parsers.errors import TraceParseError
>>> str(TraceParseError("w0.xplane.pb", "xplane", "truncated varint at byte 12"))
'w0.xplane.pb: cannot parse as xplane: truncated varint at byte 12'
"""

from __future__ import annotations

from pathlib import Path


class TraceParseError(Exception):
    """A trace could not be parsed.

    Attributes:
        path: the file (or a description such as ``<bytes>``) that failed.
        fmt: the format it was parsed as (``xplane``, ``unknown``, …).
        reason: one line saying what is wrong, with a byte offset when there is one.
    """

    def __init__(self, path: str | Path, fmt: str, reason: str) -> None:
        self.path = str(path)
        self.fmt = fmt
        self.reason = reason
        super().__init__(f"{self.path}: cannot parse as {fmt}: {reason}")

    def __reduce__(self) -> tuple[type[TraceParseError], tuple[str, str, str]]:
        return (type(self), (self.path, self.fmt, self.reason))


class SchemaError(TraceParseError):
    """A parser produced a frame that does not match ``trace_parsers.schema`` (a PodScope bug)."""


class TraceNotFound(TraceParseError, FileNotFoundError):
    """No file or folder at the path: both a ``TraceParseError`` (what the CLI and the pages
    catch) and a ``FileNotFoundError`` (what a Python user expects of a missing path)."""

    def __init__(self, path: str | Path, fmt: str = "unknown", reason: str = "") -> None:
        TraceParseError.__init__(self, path, fmt, reason or "no such file or folder")
        self.errno, self.strerror, self.filename = 2, "No such file or directory", self.path

    def __str__(self) -> str:
        return f"{self.path}: cannot parse as {self.fmt}: {self.reason}"
