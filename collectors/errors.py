"""Typed errors of the collectors: raised at the source, with per-worker statuses attached."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from podscope.collectors.status import Status


class CaptureError(Exception):
    """A capture (or a part of one) failed.

    Attributes:
        statuses: per-worker results (``collectors.capture.WorkerResult``) when known.
        status: for a failure of one worker, the status it gives that worker.
    """

    def __init__(
        self, message: str, statuses: Sequence[Any] = (), status: Status = Status.FAILED
    ) -> None:
        super().__init__(message)
        self.statuses = tuple(statuses)
        self.status = status
