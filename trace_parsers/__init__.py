"""PodScope trace parsers: profiler traces → typed pandas frames, usable without the dashboard.

>>> from podscope import trace_parsers

>>> frames = trace_parsers.load("logdir")            # newest session, every worker
>>> frames.events.groupby(["worker", "op_type"], observed=True)["self_ps"].sum()

The package's names are loaded on first use (PEP 562), so importing one small module
(``trace_parsers.layout``, standard library only) does not import pandas and every parser.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podscope.trace_parsers.errors import TraceParseError
    from podscope.trace_parsers.loader import PARSERS, chosen_session, load, resolve, sessions
    from podscope.trace_parsers.schema import SCHEMA, TraceFrames, validate

#: Public name → the module that defines it.
_EXPORTS = {
    "PARSERS": "podscope.trace_parsers.loader",
    "chosen_session": "podscope.trace_parsers.loader",
    "load": "podscope.trace_parsers.loader",
    "resolve": "podscope.trace_parsers.loader",
    "sessions": "podscope.trace_parsers.loader",
    "SCHEMA": "podscope.trace_parsers.schema",
    "TraceFrames": "podscope.trace_parsers.schema",
    "validate": "podscope.trace_parsers.schema",
    "TraceParseError": "podscope.trace_parsers.errors",
}

__all__ = [
    "PARSERS",
    "SCHEMA",
    "TraceFrames",
    "TraceParseError",
    "chosen_session",
    "load",
    "resolve",
    "sessions",
    "validate",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trace_parsers' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value
