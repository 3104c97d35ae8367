"""Capture statuses: written by value, and one place decides how each is shown."""

from __future__ import annotations

import json

import pytest

from podscope.collectors.status import Status


@pytest.mark.parametrize(
    ("status", "tone"),
    [
        (Status.OK, "ok"),
        (Status.EMPTY, "retry"),
        (Status.BUSY, "retry"),
        (Status.UNREACHABLE, "lost"),
        (Status.TIMEOUT, "lost"),
        (Status.CRASHED, "lost"),
        (Status.FAILED, "lost"),
        (Status.TRANSFER_FAILED, "lost"),
        (Status.PENDING, "running"),
        (Status.TRANSFERRING, "running"),
    ],
)
def test_tone_of_each_status(status: Status, tone: str) -> None:
    assert status.tone == tone
    assert json.dumps(status) == f'"{status.value}"' and str(status) == status.value
