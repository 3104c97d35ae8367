"""PodScope: capture, parse and explain TensorFlow, JAX and TFLite performance traces.

    >>> import podscope
    >>> frames = podscope.load("logdir")                # newest session, every worker
    >>> analysis = podscope.SessionAnalysis(frames)     # steps, breakdown, stragglers, findings
    >>> analysis.stragglers

    # in every training process (light: grpcio and protobuf, no pandas, no dashboard)
    >>> podscope.agent.start(port=6010, token=...)

The subpackages are ``podscope.trace_parsers`` (traces → typed pandas frames),
``podscope.analyzers`` (frames → derived frames and findings), ``podscope.collectors`` (the
agent and the capture client), ``podscope.reference_engine`` (the bundled training engine) and
``podscope.app`` (the CLI and the dashboard). The names here are loaded on first use (PEP 562):
``import podscope.agent`` in a training image imports neither pandas nor a compiled extension.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podscope import agent
    from podscope.analyzers.session import SessionAnalysis
    from podscope.collectors.capture import CaptureOptions, Target, capture
    from podscope.trace_parsers import TraceFrames, TraceParseError, load, sessions

    __version__: str

#: Public name → the module that defines it.
_EXPORTS = {
    "load": "podscope.trace_parsers.loader",
    "sessions": "podscope.trace_parsers.loader",
    "TraceFrames": "podscope.trace_parsers.schema",
    "TraceParseError": "podscope.trace_parsers.errors",
    "SessionAnalysis": "podscope.analyzers.session",
    "capture": "podscope.collectors.capture",
    "CaptureOptions": "podscope.collectors.capture",
    "Target": "podscope.collectors.capture",
}

__all__ = [
    "CaptureOptions",
    "SessionAnalysis",
    "Target",
    "TraceFrames",
    "TraceParseError",
    "__version__",
    "agent",
    "capture",
    "load",
    "sessions",
]


def __getattr__(name: str) -> Any:
    if name == "agent":
        return import_module("podscope.agent")
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("podscope")
        except metadata.PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'podscope' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value
