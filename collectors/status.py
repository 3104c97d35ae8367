"""Per-worker capture statuses: what happened to each worker of a capture.

>>> from podscope.collectors.status import Status
>>> Status.OK == "ok", str(Status.TRANSFER_FAILED)
(True, 'transfer_failed')
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """A worker's state during and after a capture; written to ``capture.json`` by value."""

    PENDING = "pending"
    CONNECTING = "connecting"
    TRACING = "tracing"
    TRANSFERRING = "transferring"
    #: the trace is in the logdir
    OK = "ok"
    #: no events in the window
    EMPTY = "empty"
    #: busy with another capture
    BUSY = "busy"
    #: never answered
    UNREACHABLE = "unreachable"
    #: the Profile call passed its deadline
    TIMEOUT = "timeout"
    #: answered, then went away mid-capture
    CRASHED = "crashed"
    #: the profiler or agent returned another error
    FAILED = "failed"
    #: captured, but the file could not be brought back
    TRANSFER_FAILED = "transfer_failed"

    def __str__(self) -> str:
        return self.value

    @property
    def is_failure(self) -> bool:
        """The worker's trace is lost for this capture (``empty`` and ``busy`` are not
        failures of the worker: retrying later can succeed)."""
        return self in _FAILURES

    @property
    def is_final(self) -> bool:
        """No further change for this capture."""
        return self not in _IN_PROGRESS

    @property
    def tone(self) -> str:
        """How a display should colour it: ``ok``, ``lost`` (a failure), ``retry`` (empty or
        busy: may succeed later) or ``running``."""
        if self == Status.OK:
            return "ok"
        if self.is_failure:
            return "lost"
        return "retry" if self.is_final else "running"


_FAILURES = frozenset(
    {Status.UNREACHABLE, Status.TIMEOUT, Status.CRASHED, Status.FAILED, Status.TRANSFER_FAILED}
)
_IN_PROGRESS = frozenset({Status.PENDING, Status.CONNECTING, Status.TRACING, Status.TRANSFERRING})
