"""``make verify`` (part): the engine starts on a busy machine. ``podscope cluster up`` is run
``--n`` times in a row, each cluster stopped before the next, while ``--busy`` processes spin
beside it and another churns through outgoing loopback connections (what took the picked
ports before: TensorFlow binds its port some seconds after the engine picked it); every
failed start is reported with its error.

    python -m verify.starts --n 30 --busy 2 --report verify/STARTS.md
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _spin() -> None:  # a busy loop: one core taken
    while True:
        pass


def _churn() -> None:
    """Opens and closes loopback connections without pause: each takes an ephemeral port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    address = server.getsockname()
    while True:
        with socket.create_connection(address) as c:
            server.accept()[0].close()
            c.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=30, help="cluster starts in a row")
    ap.add_argument("--busy", type=int, default=2, help="busy loops beside them")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--report", type=Path, default=Path("verify/STARTS.md"))
    args = ap.parse_args(argv)
    loads = [mp.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    loads.append(mp.Process(target=_churn, daemon=True))
    for p in loads:
        p.start()
    rows, failed = [], 0
    try:
        with tempfile.TemporaryDirectory(prefix="podscope-starts-") as tmp:
            for i in range(args.n):
                run_dir = Path(tmp) / f"run{i:02d}"
                cmd = [sys.executable, "-m", "podscope", "cluster"]
                t0 = time.monotonic()
                up = subprocess.run(
                    [
                        *cmd,
                        "up",
                        "--workers",
                        str(args.workers),
                        "--forever",
                        "--run-dir",
                        str(run_dir),
                    ],
                    capture_output=True,
                    text=True,
                )
                took = time.monotonic() - t0
                retried = sorted(p.parent.name for p in run_dir.glob("*/task.attempt*.log"))
                subprocess.run([*cmd, "down", "--run-dir", str(run_dir)], capture_output=True)
                ok = up.returncode == 0
                failed += not ok
                error = "" if ok else (up.stderr.strip().splitlines() or ["?"])[-1][:200]
                rows.append((i, ok, took, ", ".join(retried), error))
                print(
                    f"start {i + 1}/{args.n}: {'ok' if ok else 'FAILED'} in {took:.1f} s"
                    + (f" (retried: {', '.join(retried)})" if retried else "")
                    + (f": {error}" if error else ""),
                    flush=True,
                )
    finally:
        for p in loads:
            p.kill()
    lines = [
        "# Engine starts on a busy machine",
        "",
        f"`python -m verify.starts --n {args.n} --busy {args.busy} --workers {args.workers}`: "
        f"{args.n} `podscope cluster up` in a row beside {args.busy} busy loops and a process "
        "opening loopback connections without pause.",
        "",
        f"**{args.n - failed} of {args.n} started** ({failed} failed; target: 0).",
        "",
        "| start | result | seconds | tasks started again on fresh ports | error |",
        "|---|---|---|---|---|",
        *(
            f"| {i + 1} | {'ok' if ok else 'failed'} | {took:.1f} | {retried} | {error} |"
            for i, ok, took, retried, error in rows
        ),
    ]
    args.report.write_text("\n".join(lines) + "\n")
    print(f"report: {args.report}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
