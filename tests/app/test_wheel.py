"""The package as the Docker image installs it: a non-editable wheel that serves its assets."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.app.helpers import free_port, get_when_up

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_wheel_ships_assets_protos_and_decoder_and_serves_them(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(REPO),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("podscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for expected in (
        "assets/bootstrap.min.css",
        "assets/podscope.css",
        "assets/plotly-podscope.min.js",  # without it the pages load Dash's full plotly.js
        "assets/PLOTLY_LICENSE",
        "collectors/proto/trace_export_pb2.py",
        "trace_parsers/proto/xplane_pb2.py",
        "app/pages/pod_viewer.py",
    ):
        assert expected in names, expected
    for ext in ("_xplane_fast", "_ftrace_fast"):
        assert any(n.startswith(f"trace_parsers/{ext}") and n.endswith(".so") for n in names), ext

    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = (
        "import app, sys; assert app.__file__.startswith(sys.argv[1]), app.__file__; "
        "from app.cli import main; sys.argv = ['podscope', 'serve', '--logdir', sys.argv[2], '--port', sys.argv[3]]; main()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(target), str(tmp_path / "logdir"), str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        css = get_when_up(f"http://127.0.0.1:{port}/assets/bootstrap.min.css", proc)
        assert b"Bootstrap" in css[:200]
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
        assert "bootstrap.min.css" in page and "cdn" not in page.lower()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
