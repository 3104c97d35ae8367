"""Scale-out: sessions of N workers × 1.2 M events analysed per worker on Dask, and the small
case (``podscope ops`` on 4 workers, a whole process) against XProf's framework_op_stats.

Prints, per N: wall time, events/s, the driver's peak RSS (it holds the merged results and
the scheduler) and the largest worker-process peak RSS (one worker's frames at a time), for
one and two Dask worker processes; the 2-process / 1-process throughput ratio; and the
per-core rate the README's 256-worker extrapolation uses.

    python -m bench.scale [--workers 4 16 64]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.synth import ensure_capture, events_in

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4000  # 1.208 M events per worker


def session(root: Path, n: int, source: Path) -> Path:
    """``n`` workers, each a name of one copy of a 1.2 M-event capture (parsed without the
    cache): hard links within the folder, as a session may hold (one to a file outside it is
    refused by the loader)."""
    folder = root / f"n{n}"
    if not folder.exists():
        folder.mkdir(parents=True)
        names = [folder / f"10.1.{i // 250}.{i % 250}_6000.xplane.pb" for i in range(n)]
        shutil.copyfile(source, names[0])
        for name in names[1:]:
            os.link(names[0], name)
    return folder


def _cluster_run(folder: str, processes: int) -> dict[str, Any]:
    """In a fresh process: a LocalCluster of ``processes`` single-thread workers, every part
    of every worker, the merged result; wall time and peak RSS of the driver and workers."""
    from distributed import Client, LocalCluster

    from podscope.analyzers.execution import ExecConfig, run_session
    from podscope.trace_parsers import resolve

    files = resolve(folder)
    with (
        LocalCluster(
            n_workers=processes,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            memory_limit=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        t = time.perf_counter()
        run = run_session(files, ExecConfig(scheduler=cluster.scheduler_address, cache=False))
        seconds = time.perf_counter() - t
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    a = run.analysis
    return {
        "seconds": seconds,
        "driver_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_mb": max(peaks.values()),
        "rows": len(a.breakdown) + len(a.op_table) + len(a.steps),
        "failures": len(run.failures),
    }


def _single_parse_peak(path: str) -> dict[str, Any]:
    """Peak RSS of a process that parses one worker and builds all its parts (the floor a
    Dask worker process cannot go under)."""
    from podscope.analyzers.execution import PARTS, analyze_files

    analyze_files((path,), PARTS, False, None)
    return {"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _in_subprocess(fn: str, *args: Any) -> dict[str, Any]:
    code = (
        f"import json, sys; from bench.scale import {fn} as f; "
        "print(json.dumps(f(*json.loads(sys.argv[1]))))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, json.dumps(list(args))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=3600,
        check=False,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{fn} failed: {r.stderr.strip().splitlines()[-3:]}")
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def _whole_process(cmd: list[str], repeat: int) -> float:
    """Median wall time of a whole process (imports included)."""
    times = []
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "GLOG_minloglevel": "3"}
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(
            cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        times.append(time.perf_counter() - t)
    return statistics.median(times)


XPROF_OPS = (
    "import glob, sys; from xprof.convert import raw_to_tool_data as c; "
    "c.xspace_to_tool_data(sorted(glob.glob(sys.argv[1] + '/*.xplane.pb')), "
    "'framework_op_stats', {'use_saved_result': False})"
)


def small_session_ops(capture: Path, root: Path, repeat: int) -> dict[str, float]:
    """``podscope ops`` (a whole process, no cache) against XProf's framework_op_stats on
    the same 4 copies of ``capture``."""
    folder = session(root / "ops", 4, capture)
    ours = _whole_process(
        [sys.executable, "-m", "podscope", "ops", str(folder), "--no-cache", "--csv"], repeat
    )
    theirs = _whole_process([sys.executable, "-c", XPROF_OPS, str(folder)], repeat)
    return {"podscope_s": ours, "xprof_s": theirs, "ratio": theirs / ours}


def report(workers: list[int], repeat: int) -> None:
    """Runs and prints the scale-out and small-session benchmarks."""
    out = ROOT / "build" / "bench"
    source = ensure_capture(out, STEPS)
    root = Path(tempfile.mkdtemp(prefix="podscope-scale-", dir=out))
    try:
        per_event = events_in(STEPS)
        floor = _in_subprocess("_single_parse_peak", str(source))["peak_mb"]
        print(f"\n== Scale-out on Dask: N workers × {per_event:,} events ==")
        print(f"one worker parsed and reduced in one process: peak {floor:.0f} MB")
        print(
            f"{'N':>4} {'procs':>5} {'wall s':>8} {'Mev/s':>7} {'driver MB':>10} {'worker MB':>10}"
        )
        rates: dict[tuple[int, int], float] = {}
        for n in workers:
            folder = session(root, n, source)
            for procs in (1, 2):
                r = _in_subprocess("_cluster_run", str(folder), procs)
                rate = n * per_event / r["seconds"] / 1e6
                rates[(n, procs)] = rate
                print(
                    f"{n:>4} {procs:>5} {r['seconds']:8.2f} {rate:7.2f} "
                    f"{r['driver_peak_mb']:10.0f} {r['worker_peak_mb']:10.0f}"
                )
        for n in workers:
            print(f"N={n}: 2 processes / 1 process throughput {rates[(n, 2)] / rates[(n, 1)]:.2f}x")
        per_core = max(rates[(n, 1)] for n in workers)
        print(f"per-core rate (best 1-process run): {per_core:.2f} M events/s")
        tf = out / "tf-fit-1000"
        found = sorted(tf.rglob("*.xplane.pb")) if tf.exists() else []
        capture = found[0] if found else source
        r = small_session_ops(capture, root, repeat)
        print(
            f"\npodscope ops, 4 workers ({capture.parent.parent.parent.parent.name}), whole "
            f"process, no cache: {r['podscope_s']:.2f} s; XProf framework_op_stats "
            f"{r['xprof_s']:.2f} s: {r['ratio']:.1f}x faster"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.scale")
    ap.add_argument("--workers", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    report(args.workers, args.repeat)


if __name__ == "__main__":
    main()
