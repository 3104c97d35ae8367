"""A pod, not a handful: ``podscope stragglers`` on sessions of 16 to 1,024 hosts of one
synthetic synchronous CPU worker (``bench.synth.pod_session``: 60 steps, 18 k events each,
two slow hosts), as a user runs it: a whole process, from a fresh cache and then warm.

Per size: seconds (fresh once, warm the median of ``repeat``), events/s, the driver's and the
largest worker process's peak RSS (the process tree sampled every 50 ms), where the tasks ran,
and the ratio to linear (time per host over the smallest session's; 1 = linear). The fixed
cost per host is the slope of the warm time between the two largest sessions.

    python -m bench.pod_scale --hosts 16 64 128 256 512 [--once 1024]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bench.synth import events_in, pod_session

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "bench"
SLOW = {7: 26, 100: 23}  # two slow hosts: the culprit (30 % longer ops) and a slower one


def run_cli(session: Path, cache: Path) -> dict[str, Any]:
    """``podscope stragglers`` in a fresh process: seconds, peak RSS of the driver and of its
    largest child (a LocalCluster worker), and the first row's worker (the culprit)."""
    env = {**os.environ, "PODSCOPE_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "podscope", "stragglers", str(session), "--csv"]
    t = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    peaks = {"driver": 0, "worker": 0}
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                peaks["driver"] = max(peaks["driver"], root.memory_info().rss)
                for child in root.children(recursive=True):
                    peaks["worker"] = max(peaks["worker"], child.memory_info().rss)
            except psutil.Error:
                pass
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate(timeout=3600)
    seconds = time.perf_counter() - t
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"podscope stragglers exited {proc.returncode}: {err[-500:]}")
    rows = [line.split(",") for line in out.strip().splitlines()]
    return {
        "seconds": seconds,
        "driver_mb": peaks["driver"] / 2**20,
        "worker_mb": peaks["worker"] / 2**20,
        "first": rows[1][0] if len(rows) > 1 else "",
    }


def bench_size(hosts: int, repeat: int) -> dict[str, Any]:
    session = pod_session(OUT, hosts, slow=SLOW)
    cache = Path(tempfile.mkdtemp(prefix="podscope-pod-cache-"))
    try:
        fresh = run_cli(session, cache)
        warm = [run_cli(session, cache) for _ in range(repeat)]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {
        "hosts": hosts,
        "events": hosts * events_in(60, 100, synchronous=True),
        "fresh": fresh,
        "warm": {k: statistics.median(w[k] for w in warm) for k in ("seconds", "driver_mb")},
        "culprit": warm[0]["first"],
    }


def report(results: list[dict[str, Any]]) -> None:
    print("\n== A pod: podscope stragglers, N hosts x 18 k events (whole process) ==")
    print(
        f"{'hosts':>6} {'M events':>9} {'fresh s':>8} {'Mev/s':>6} {'warm s':>7} "
        f"{'driver MB':>9} {'worker MB':>9} {'fresh/lin':>9} {'warm/lin':>8}  culprit"
    )
    base = results[0]
    for r in results:
        scale = r["hosts"] / base["hosts"]
        fresh_lin = r["fresh"]["seconds"] / base["fresh"]["seconds"] / scale
        warm_lin = r["warm"]["seconds"] / base["warm"]["seconds"] / scale
        print(
            f"{r['hosts']:6d} {r['events'] / 1e6:9.2f} {r['fresh']['seconds']:8.1f} "
            f"{r['events'] / r['fresh']['seconds'] / 1e6:6.2f} {r['warm']['seconds']:7.2f} "
            f"{r['fresh']['driver_mb']:9.0f} {r['fresh']['worker_mb']:9.0f} "
            f"{fresh_lin:9.2f} {warm_lin:8.2f}  {r['culprit']}"
        )
    if len(results) >= 2:
        a, b = sorted(results, key=lambda r: r["hosts"])[-2:]
        slope = (b["warm"]["seconds"] - a["warm"]["seconds"]) / (b["hosts"] - a["hosts"])
        fresh_slope = (b["fresh"]["seconds"] - a["fresh"]["seconds"]) / (b["hosts"] - a["hosts"])
        print(
            f"cost per host between {a['hosts']} and {b['hosts']} hosts: warm "
            f"{slope * 1000:.1f} ms (target <= 20), fresh {fresh_slope * 1000:.0f} ms "
            "(parse + per-worker analysis, on the machine's cores)"
        )
    by = {r["hosts"]: r for r in results}
    if 128 in by and 512 in by:
        growth = by[512]["warm"]["seconds"] / by[128]["warm"]["seconds"]
        print(f"warm 128 -> 512 hosts: {growth:.1f}x (target <= 5x)")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.pod_scale")
    ap.add_argument("--hosts", type=int, nargs="*", default=[16, 64, 128, 256, 512])
    ap.add_argument("--once", type=int, nargs="*", default=[1024], help="sizes run once")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    results = [bench_size(n, args.repeat) for n in args.hosts]
    results += [bench_size(n, 1) for n in args.once]
    report(results)


if __name__ == "__main__":
    main()
