"""``podscope serve`` as an operator sees it: a production WSGI server, a quiet terminal."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_serve_is_quiet_and_not_flasks_development_server(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--logdir", str(tmp_path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PODSCOPE_CACHE_DIR": str(tmp_path / "cache")},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        for _ in range(20):  # a browser's page load is dozens of requests
            urllib.request.urlopen(base + "/", timeout=5).read()
            urllib.request.urlopen(base + "/_dash-layout", timeout=5).read()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines == [f"serving on http://127.0.0.1:{port}"], out
    assert proc.returncode == 0
