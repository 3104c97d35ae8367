"""A long parse never stops the server: /healthz answers within 1 s while the worst uploads
parse (the C readers release the GIL every few ms; the rest is linear and bounded)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.app.helpers import free_port, get_when_up, upload_body
from tests.trace_parsers.test_budget import empty_events_xspace, ftrace

pytestmark = pytest.mark.slow


def upload_while_polling(base: str, body: bytes) -> list[float]:
    """Posts ``body`` to the upload callback while a thread times /healthz every 20 ms."""
    waits: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            t = time.monotonic()
            urllib.request.urlopen(base + "/healthz", timeout=30).read()
            waits.append(time.monotonic() - t)
            time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    request = urllib.request.Request(
        base + "/_dash-update-component", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as r:
            assert r.status == 200
    finally:
        done.set()
        poller.join()
    return waits


def test_healthz_answers_while_the_worst_uploads_parse(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "podscope", "serve", "--logdir", str(tmp_path), "--port", str(port)],
        env={**os.environ, "PODSCOPE_CACHE_DIR": str(tmp_path / "cache")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        get_when_up(base + "/healthz", proc)
        deps = json.loads(get_when_up(base + "/_dash-dependencies", proc))
        uploads = [
            ("bomb.xplane.pb.gz", gzip.compress(empty_events_xspace(32_000_000), 9)),
            ("big.xplane.pb", empty_events_xspace(1_500_000)),
            ("cr.systrace", ftrace(320_000).replace(b"\n", b"\r")),
        ]
        for name, data in uploads:
            waits = upload_while_polling(
                base,
                json.dumps(
                    upload_body(deps, ["data:x;base64," + base64.b64encode(data).decode()], [name])
                ).encode(),
            )
            assert waits and max(waits) < 1.0, (name, max(waits), len(waits))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
