"""Helpers for tests that start a server as a subprocess."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from typing import Any

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


def free_port() -> int:
    """A port free on loopback now (the server started next binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def upload_body(deps: list[dict[str, Any]], contents: object, names: object) -> dict[str, Any]:
    """The request a browser sends to the Sessions page's upload callback (``contents``: the
    data URLs, ``names``: the file names), with the callback's outputs from
    ``/_dash-dependencies``; a test may put anything in either."""
    up = next(d for d in deps if any(i["id"] == "sessions-upload" for i in d["inputs"]))
    outputs = [o.split(".") for o in str(up["output"]).strip(".").split("...")]
    return {
        "output": up["output"],
        "outputs": [{"id": i, "property": p} for i, p in outputs],
        "inputs": [{"id": "sessions-upload", "property": "contents", "value": contents}],
        "state": [{"id": "sessions-upload", "property": "filename", "value": names}],
        "changedPropIds": ["sessions-upload.contents"],
    }
