"""Helpers for tests that start a server as a subprocess."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

#: How long a server that is still running may take to answer its first request: a state
#: waited for (a fresh venv's first imports beside a busy test took over 20 s), with a cap
#: only so that a hung server fails the test instead of CI.
STARTUP_S = 300.0


def get_when_up(url: str, proc: subprocess.Popen[Any], err: Path | None = None) -> bytes:
    """The body of ``url`` once the server ``proc`` answers (asked every 0.2 s while it runs);
    fails the test, with the server's stderr (its pipe, or the file ``err``), if it exits
    first, or if it runs ``STARTUP_S`` without answering."""
    deadline = time.monotonic() + STARTUP_S
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return bytes(r.read())
        except OSError:
            if proc.poll() is not None:
                out = err.read_bytes() if err else proc.stderr.read() if proc.stderr else b""
                text = out if isinstance(out, str) else out.decode(errors="replace")
                pytest.fail(f"the server exited ({proc.returncode}): {text[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no answer from {url} in {STARTUP_S:.0f} s, the server running")
            time.sleep(0.2)


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
