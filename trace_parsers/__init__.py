"""PodScope trace parsers: profiler traces → typed pandas frames, usable without the dashboard.

>>> import trace_parsers
>>> frames = trace_parsers.load("logdir")            # newest session, every worker
>>> frames.events.groupby(["worker", "op_type"], observed=True)["self_ps"].sum()
"""

from __future__ import annotations

from trace_parsers.errors import TraceParseError
from trace_parsers.loader import PARSERS, load, resolve, sessions
from trace_parsers.schema import SCHEMA, TraceFrames, validate

__all__ = [
    "PARSERS",
    "SCHEMA",
    "TraceFrames",
    "TraceParseError",
    "load",
    "resolve",
    "sessions",
    "validate",
]
