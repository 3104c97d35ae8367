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
