"""``make verify`` (part): the agent in the training images users have, built as venvs from the
package index: TensorFlow 2.16, 2.19 and 2.21, each with the protobuf and grpcio its own
requirements pick. In each, the wheel is installed ``--no-deps`` beside hpack (the agent-only
install: the image's protobuf and grpcio stay), a TensorFlow job starts the agent, and this
process captures it through the agent. Writes ``verify/IMAGES.md``.

    python -m verify.images --report verify/IMAGES.md [--tf 2.16.2 2.19.1 2.21.0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "tests" / "collectors" / "framework_job.py"
TENSORFLOW = ("2.16.2", "2.19.1", "2.21.0")


def sh(*args: str | Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], check=True, text=True, capture_output=True, **kw)  # type: ignore[call-overload]


def image(tf: str, wheel: Path, work: Path) -> dict[str, object]:
    """One image: a venv with ``tensorflow==tf``, the agent-only install, a captured job."""
    from podscope.collectors.capture import CaptureOptions, Target, capture

    t0 = time.monotonic()
    venv = work / f"tf-{tf}"
    sh(sys.executable, "-m", "venv", venv)
    pip = venv / "bin" / "pip"
    sh(pip, "install", "-q", f"tensorflow=={tf}", timeout=1800)
    sh(pip, "install", "-q", "--no-deps", wheel, "hpack", timeout=600)
    python = venv / "bin" / "python"
    found = sh(
        python, "-c", "import google.protobuf as p, grpc; print(p.__version__, grpc.__version__)"
    ).stdout.split()
    row: dict[str, object] = {"tensorflow": tf, "protobuf": found[0], "grpcio": found[1]}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    log = (work / f"job-{tf}.log").open("w")
    job = subprocess.Popen(
        [str(python), str(JOB), "tensorflow", str(work / f"agent-{tf}")],
        cwd=work,  # the installed wheel, not the checkout
        env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert job.stdout is not None and job.stdin is not None
        line = job.stdout.readline()
        if not line:
            raise RuntimeError((work / f"job-{tf}.log").read_text()[-500:])
        result = capture(
            [Target(json.loads(line)["address"], "w0")],
            CaptureOptions(logdir=work / f"logdir-{tf}", duration_ms=1500, delay_ms=500),
        )
        job.stdin.close()
        job.wait(timeout=120)
    finally:
        job.kill()
        log.close()
    (worker,) = result.workers
    row.update(
        status=worker.status.value,
        framework=worker.framework,
        bytes=worker.bytes,
        reason=worker.reason,
        seconds=round(time.monotonic() - t0),
    )
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--report", type=Path, default=REPO / "verify" / "IMAGES.md")
    ap.add_argument("--tf", nargs="*", default=list(TENSORFLOW))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="podscope-images-") as tmp:
        work = Path(tmp)
        sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", work / "dist", REPO)
        (wheel,) = (work / "dist").glob("podscope-*.whl")
        rows = []
        for tf in args.tf:
            try:
                rows.append(image(tf, wheel, work))
            except (subprocess.CalledProcessError, RuntimeError, OSError) as e:
                detail = getattr(e, "stderr", "") or str(e)
                rows.append({"tensorflow": tf, "status": "error", "reason": detail[-300:]})
            print(json.dumps(rows[-1]), flush=True)
    lines = [
        "# The agent in TensorFlow images",
        "",
        f"`python -m verify.images` ({time.strftime('%Y-%m-%d %H:%M')}, Python "
        f"{sys.version.split()[0]}): per TensorFlow release, a venv from the package index with "
        "`tensorflow==X` (and the protobuf and grpcio it picks), the wheel installed `--no-deps` "
        "beside hpack, a TensorFlow job with `podscope.agent.start()`, captured through the agent.",
        "",
        "| TensorFlow | protobuf | grpcio | capture | framework | trace bytes | s | reason |",
        "|---|---|---|---|---|---:|---:|---|",
    ]
    for r in rows:
        keys = ("tensorflow", "protobuf", "grpcio", "status", "framework", "bytes", "seconds")
        cells = [str(r.get(k, "")) for k in keys]
        lines.append("| " + " | ".join([*cells, str(r.get("reason", ""))[:120]]) + " |")
    args.report.write_text("\n".join(lines) + "\n")
    if any(r.get("status") != "ok" for r in rows):
        raise SystemExit(f"an image's capture failed: see {args.report}")


if __name__ == "__main__":
    main()
