"""Typed errors of the collectors: raised at the source, with per-worker statuses attached."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class CaptureError(Exception):
    """A capture (or a part of one) failed.

    Attributes:
        statuses: per-worker results (``collectors.capture.WorkerResult``) when known.
    """

    def __init__(self, message: str, statuses: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.statuses = tuple(statuses)
