"""The Docker build's helpers: the dependency layer's requirements and make docker-test's skip."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def requirements_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "requirements", ROOT / "docker" / "requirements.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dependency_layer_lists_the_project_and_its_extras() -> None:
    base = requirements_module().requirements(str(ROOT / "pyproject.toml"), [])
    assert any(r.startswith("grpcio") for r in base) and not any("dash" in r for r in base)
    reqs = requirements_module().requirements(str(ROOT / "pyproject.toml"), ["dashboard"])
    assert any(r.startswith("dash") for r in reqs) and not any("tensorflow" in r for r in reqs)
    engine = requirements_module().requirements(str(ROOT / "pyproject.toml"), ["all"])
    assert any(r.startswith("tensorflow") for r in engine) and set(reqs) < set(engine)
    dev = requirements_module().requirements(str(ROOT / "pyproject.toml"), ["dev"])
    assert not any(r.startswith("podscope") for r in dev)  # self-references expanded
    with pytest.raises(SystemExit, match="no extra"):
        requirements_module().requirements(str(ROOT / "pyproject.toml"), ["nope"])


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker client")
def test_docker_test_says_why_it_skips_without_a_daemon() -> None:
    out = subprocess.run(
        ["bash", str(ROOT / "docker" / "test.sh")],
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "DOCKER_HOST": "unix:///nonexistent.sock"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "skipped: no Docker daemon answers" in out.stdout, out


#: A stand-in docker client: a daemon answers, builds succeed, each ``run -d`` prints a new
#: container id and is healthy at once, and ``exec`` (the first smoke test) fails.
FAKE_DOCKER = """#!/usr/bin/env bash
echo "$*" >> "$DOCKER_CALLS"
case "$1" in
  info) echo 28.2.2 ;;
  build) ;;
  run) if [ "$2" = -d ]; then n=$(grep -c '^run -d' "$DOCKER_CALLS"); echo "cid-$n"; else echo PODSCOPE_DASHBOARD_TOKEN; exit 1; fi ;;
  inspect) echo healthy ;;
  exec) exit 1 ;;
  *) ;;
esac
"""


def test_docker_test_removes_its_containers_when_a_step_fails(tmp_path: Path) -> None:
    """The containers a failing run started are removed on the way out (they were started in
    a subshell once, which lost the list, and left running)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    calls = tmp_path / "calls"
    out = subprocess.run(
        ["bash", str(ROOT / "docker" / "test.sh")],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "DOCKER_CALLS": str(calls)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0, out  # the smoke test failed
    lines = calls.read_text().splitlines()
    started = [line for line in lines if line.startswith("run -d")]
    assert len(started) == 1
    assert "rm -f cid-1" in lines, lines
