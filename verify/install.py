"""``make verify`` (part): the package as users install it, on every Python this machine has.

For each CPython 3.10+ found (on the PATH and under pyenv): build the platform wheel with it,
install it into a fresh venv from the package index (the base install: no extras), and run the
CLI on the committed fixtures (``--version``, ``stragglers``, ``parse``), the agent's import,
and ``serve``'s one-line answer without the dashboard extra. On this machine's Python it also
measures what each role adds to an image: the base install, and the agent alone
(``pip install --no-deps dist/podscope-*.whl grpcio protobuf hpack typing_extensions``).
Writes ``verify/INSTALL.md``.

    python -m verify.install --report verify/INSTALL.md
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "ps_baseline"
#: Not the package's: what a venv brings by itself.
VENV_OWN = ("pip", "setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth")


def pythons() -> list[Path]:
    """One interpreter per minor version 3.10+, the PATH's first, then pyenv's."""
    found: dict[str, Path] = {}
    candidates = [shutil.which(f"python3.{m}") for m in range(10, 20)]
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates += [str(p) for p in sorted(Path(root).glob("versions/3.*/bin/python3"))]
    for c in candidates:
        if not c:
            continue
        out = subprocess.run(
            [c, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        )
        version = out.stdout.strip()
        if out.returncode == 0 and tuple(map(int, version.split("."))) >= (3, 10):
            found.setdefault(version, Path(c))
    return [found[v] for v in sorted(found, key=lambda v: tuple(map(int, v.split("."))))]


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def footprint(venv: Path) -> tuple[int, float]:
    """Distributions and MB a venv's installs added (the venv's own pip/setuptools left out)."""
    site = site_packages(venv)
    entries = [p for p in site.iterdir() if not p.name.startswith(VENV_OWN)]
    dists = [p for p in entries if p.name.endswith(".dist-info")]
    size = sum(f.stat().st_size for p in entries for f in [p, *p.rglob("*")] if f.is_file())
    return len(dists), size / 2**20


def sh(*cmd: str | Path, cwd: Path = REPO, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, env=env, timeout=1800
    )
    if out.returncode != 0:
        raise RuntimeError(
            f"{' '.join(map(str, cmd))}: exit {out.returncode}\n{out.stderr[-2000:]}"
        )
    return out.stdout


def check(python: Path, work: Path) -> dict[str, str]:
    """Builds, installs and runs the package with ``python``; a row of the report."""
    t0 = time.monotonic()
    dist = work / "dist"
    sh(python, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, REPO)
    (wheel,) = dist.glob("podscope-*.whl")
    venv = work / "venv"
    sh(python, "-m", "venv", venv)
    sh(venv / "bin" / "pip", "install", "-q", wheel)
    # Run where no compiler is and outside the repository (its folders are not on the path).
    env = {**os.environ, "PATH": f"{venv / 'bin'}:/nonexistent", "CC": "/nonexistent/cc"}
    env.pop("PYTHONPATH", None)
    run = work / "elsewhere"
    run.mkdir()
    podscope = venv / "bin" / "podscope"
    version = sh(podscope, "--version", cwd=run, env=env).strip()
    stragglers = sh(podscope, "stragglers", FIXTURE, "--no-cache", cwd=run, env=env)
    parse = sh(podscope, "parse", FIXTURE, "--no-cache", "--json", cwd=run, env=env)
    sh(venv / "bin" / "python", "-c", "import podscope.agent", cwd=run, env=env)
    serve = subprocess.run(
        [podscope, "serve", "--logdir", work / "logdir"], cwd=run, env=env, capture_output=True
    )
    serve_line = serve.stderr.decode().strip()
    ok = (
        "worker" in stragglers
        and '"failures": []' in parse
        and serve.returncode == 2
        and serve_line.count("\n") == 0
        and "podscope[dashboard]" in serve_line
    )
    dists, mb = footprint(venv)
    return {
        "python": sh(python, "-c", "import sys; print(sys.version.split()[0])").strip(),
        "wheel": wheel.name,
        "result": "ok" if ok else f"FAILED: {stragglers[-300:]} {serve_line}",
        "version": version,
        "base": f"{dists} packages, {mb:.0f} MB",
        "seconds": f"{time.monotonic() - t0:.0f}",
    }


def agent_only(python: Path, work: Path, wheel: Path) -> str:
    venv = work / "agent"
    sh(python, "-m", "venv", venv)
    # the documented agent-only line (README, docs/install.md)
    sh(venv / "bin" / "pip", "install", "-q", "--no-deps", wheel, "grpcio", "protobuf", "hpack")
    sh(venv / "bin" / "pip", "install", "-q", "--no-deps", "typing_extensions")
    sh(venv / "bin" / "python", "-c", "import podscope.agent")
    dists, mb = footprint(venv)
    names = sorted(
        p.name.split("-")[0]
        for p in site_packages(venv).glob("*.dist-info")
        if not p.name.startswith(VENV_OWN)
    )
    return f"{dists} packages ({', '.join(names)}), {mb:.0f} MB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--report", type=Path, default=REPO / "verify" / "INSTALL.md")
    args = ap.parse_args(argv)
    rows, failed, agent = [], 0, ""
    for python in pythons():
        with tempfile.TemporaryDirectory(prefix="podscope-install-") as tmp:
            try:
                row = check(python, Path(tmp))
                if Path(python).resolve() == Path(sys.executable).resolve() or not agent:
                    agent = agent_only(python, Path(tmp), next(Path(tmp, "dist").glob("*.whl")))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                row = {"python": str(python), "result": f"FAILED: {e}"}
        failed += not row["result"].startswith("ok")
        rows.append(row)
        print(row, flush=True)
    lines = [
        "# Install check (`make verify`, `python -m verify.install`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on this machine: for each Python, the platform "
        "wheel built with it, installed into a fresh venv from the package index (no extras), "
        "then `podscope --version`, `stragglers` and `parse` on `tests/fixtures/ps_baseline`, "
        "`import podscope.agent`, and `serve`'s one line without the dashboard extra, with no "
        "compiler on the PATH. Sizes leave out the venv's own pip and setuptools.",
        "",
        "| Python | wheel | result | `--version` | base install | s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r.get(k, "") for k in ("python", "wheel", "result", "version", "base", "seconds")]
        lines.append("| " + " | ".join(re.sub(r"\s+", " ", c) for c in cells) + " |")
    lines += [
        "",
        f"Agent alone (`--no-deps` wheel, grpcio, protobuf, hpack, typing_extensions): {agent}.",
        "",
    ]
    args.report.write_text("\n".join(lines))
    print(f"{len(rows) - failed}/{len(rows)} Pythons ok; report: {args.report}")
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
