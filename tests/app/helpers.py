"""Helpers for tests that start a server as a subprocess."""

from __future__ import annotations

import subprocess
import time
import urllib.request

import pytest


def get_when_up(url: str, proc: subprocess.Popen[bytes] | None = None, tries: int = 100) -> bytes:
    """The body of ``url`` once the server answers (every 0.2 s, ``tries`` times); fails the
    test, with the server's stderr when there is one, if it exits or never answers."""
    for _ in range(tries):
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return bytes(r.read())
        except OSError:
            if proc is not None and proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"the server exited ({proc.returncode}): {err[-2000:]}")
            time.sleep(0.2)
    pytest.fail(f"no answer from {url}")
