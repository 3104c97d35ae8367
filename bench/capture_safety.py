"""Crash rate of captures on a 3-worker MultiWorkerMirroredStrategy job, per plan, and worker
memory across captures: ``python -m bench.capture_safety [--trials N]``.

Plans: ``safe`` (PodScope's default: full host trace of the chief, Python tracer on the other
workers) and ``unsafe`` (full host trace everywhere; TF 2.20/2.21 crash non-chief workers).
A trial = a fresh cluster, one 2 s capture, then 3 s more training; it crashed if any worker
died. Memory: RSS of each worker after each of 10 captures on one cluster.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from podscope.collectors.capture import CaptureOptions, Target, capture
from podscope.reference_engine import cluster
from podscope.reference_engine.config import EngineConfig


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def start(root: Path, i: int, preload: str | None = None) -> cluster.Manifest:
    """A 3-worker MWMS cluster; ``preload`` is put in the workers' LD_PRELOAD (an allocator)."""
    old = os.environ.get("LD_PRELOAD")
    if preload:
        os.environ["LD_PRELOAD"] = preload  # the task processes get it at exec; this one does not
    try:
        m = cluster.up(
            EngineConfig(workload="mwms-loop", steps=None), workers=3, run_dir=root / f"run{i}"
        )
    finally:
        if preload and old is None:
            os.environ.pop("LD_PRELOAD", None)
        elif preload:
            os.environ["LD_PRELOAD"] = old or ""
    time.sleep(3)
    return m


def trial(root: Path, i: int, unsafe: bool, preload: str | None = None) -> bool:
    m = start(root, i, preload)
    try:
        opts = CaptureOptions(
            logdir=root / f"logdir{i}", duration_ms=2000, unsafe_full_trace=unsafe, timeout_s=30
        )
        capture([Target(t.agent_address) for t in m.tasks], opts)
        time.sleep(3)
        return not all(cluster.alive(t.pid) for t in m.tasks)
    finally:
        cluster.down(m, grace_s=2)


def memory(root: Path, captures: int) -> list[list[float]]:
    m = start(root, 999)
    rows = [[rss_mb(t.pid) for t in m.tasks]]
    try:
        for i in range(captures):
            capture(
                [Target(t.agent_address) for t in m.tasks],
                CaptureOptions(logdir=root / "mem", session=f"m{i}"),
            )
            time.sleep(1)
            rows.append([rss_mb(t.pid) for t in m.tasks])
    finally:
        cluster.down(m, grace_s=2)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.capture_safety")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--memory-captures", type=int, default=10)
    ap.add_argument(
        "--preload",
        help="also try the unsafe plan with this allocator in LD_PRELOAD (e.g. jemalloc)",
    )
    ap.add_argument("--only-preload", action="store_true", help="run only the LD_PRELOAD trials")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="podscope-safety-") as tmp:
        root = Path(tmp)
        plans = (
            []
            if args.only_preload
            else [("safe (default)", False, None), ("unsafe full trace", True, None)]
        )
        if args.preload:
            plans.append((f"unsafe + {Path(args.preload).name}", True, args.preload))
        for k, (name, unsafe, preload) in enumerate(plans):
            crashed = sum(trial(root, i + 100 * k, unsafe, preload) for i in range(args.trials))
            print(f"{name:34} crashed jobs: {crashed}/{args.trials}", flush=True)
        if args.only_preload:
            return
        rows = memory(root, args.memory_captures)
        print("worker RSS MB after each capture (worker:0 full trace, worker:1/2 python tracer):")
        for i, row in enumerate(rows):
            print(f"  after {i:2d}: " + "  ".join(f"{v:7.0f}" for v in row))


if __name__ == "__main__":
    main()
