"""Every install line the README and the docs give works as written: each is run verbatim, by a
shell, in a fresh venv, in a copy of this checkout whose ``dist/`` holds the wheel that
``make wheel`` built there, then what it promises is checked.

The agent-only line runs in ``make test``; the lines that install the dashboard, Dask or the
engine (hundreds of MB each) are marked ``long`` (``make verify``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

#: Documented line → (a check run with the venv's python after it, in make test).
LINES: dict[str, tuple[str, bool]] = {
    "pip install .": ("import podscope.trace_parsers, pandas; print(podscope.__version__)", False),
    "pip install '.[dashboard]'": ("import dash, dash_ag_grid, waitress, podscope.app", True),
    "pip install '.[dask]'": ("import distributed, podscope.analyzers.execution", True),
    "pip install '.[engine]'": ("import tensorflow, jax, podscope.reference_engine", True),
    "pip install '.[all]'": ("import dash, distributed, tensorflow, jax", True),
    "pip install dist/podscope-*.whl": (
        "import podscope.trace_parsers._xplane_fast, pandas; print(podscope.__version__)",
        True,
    ),
    "pip install --no-deps dist/podscope-*.whl grpcio protobuf hpack typing_extensions": (
        "import sys, podscope\n"
        "a = podscope.agent.start()\n"
        "a.stop()\n"
        "assert 'pandas' not in sys.modules\n"
        "print(podscope.__version__)",
        False,
    ),
}


def documented_lines() -> set[str]:
    """``pip install …`` lines of the README and docs: in code blocks (comments cut), and in
    inline code."""
    found: set[str] = set()
    for doc in DOCS:
        text = doc.read_text()
        for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, flags=re.S):
            for line in block.splitlines():
                line = line.split(" #", 1)[0].strip()
                if line.startswith("pip install"):
                    found.add(line)
        for code in re.findall(r"`(pip install [^`\n]+)`", text):
            found.add(code.strip())
    return found


def test_every_documented_install_line_is_run_here() -> None:
    assert documented_lines() == set(LINES)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of this checkout (its files as git sees them) where ``make wheel`` has run."""
    copy = tmp_path_factory.mktemp("checkout")
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        source = REPO / name
        if source.is_file() and not source.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
        elif source.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).symlink_to(os.readlink(source))
    out = subprocess.run(
        ["make", "wheel"], cwd=copy, capture_output=True, text=True, timeout=600, env=_clean_env()
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    (wheel,) = (copy / "dist").glob("podscope-*.whl")
    assert re.search(r"\.manylinux_2_17_\w+\.whl$", wheel.name), wheel.name
    return copy


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}


@pytest.mark.slow
@pytest.mark.parametrize(
    "line",
    [pytest.param(line, marks=[pytest.mark.long] * long) for line, (_, long) in LINES.items()],
)
def test_install_line_works_as_written(checkout: Path, tmp_path: Path, line: str) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {
        **_clean_env(),
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    install = subprocess.run(
        ["bash", "-c", line], cwd=checkout, env=env, capture_output=True, text=True, timeout=1200
    )
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]
    check = subprocess.run(
        [str(venv / "bin" / "python"), "-c", LINES[line][0]],
        cwd=tmp_path,  # not the checkout: what was installed, not the source tree
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stderr[-3000:]
