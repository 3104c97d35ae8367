"""``make bench``: PodScope against its peers on the same inputs, in the same run.

Each tool runs in a fresh process (cold), several times; we print medians and ratios, since
machines here are shared and noisy. Peers: XProf's framework_op_stats conversion (Python
package ``xprof``) and ``xprof-rs`` (Rust reimplementation; its CLI ``get_overview`` builds
the same combined op stats as framework_op_stats and is timed as a whole process).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import (
    android,
    app_latency,
    folders,
    kineto,
    pod,
    pod_capture,
    pod_dashboard,
    pod_scale,
    scale,
    transfer,
    watch,
)
from bench.synth import ensure_capture
from bench.tf_capture import ensure_tf_capture

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "bench"


def run_measure(
    tool: str, path: Path, cache_dir: Path | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.measure", tool, str(path)] + (
        [str(cache_dir)] if cache_dir else []
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "GLOG_minloglevel": "3", **(env or {})}
    r = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800, check=False
    )
    if r.returncode != 0:
        raise RuntimeError(f"{tool} failed: {r.stderr.strip().splitlines()[-1:]}")
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def run_binary(cmd: list[str]) -> dict[str, Any]:
    """Wall time and peak RSS of a whole external process (os.wait4 gives its own rusage)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {proc.returncode}")
    return {"seconds": time.perf_counter() - t, "peak_rss_mb": usage.ru_maxrss / 1024}


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        k: statistics.median(r[k] for r in runs)
        for k in runs[0]
        if isinstance(runs[0][k], int | float)
    }


def bench_parse(path: Path, repeat: int) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    results["podscope parse (cold, no cache)"] = median_of(
        [run_measure("podscope_parse", path) for _ in range(repeat)]
    )
    # numpy asks for transparent huge pages on large arrays; where the kernel compacts memory
    # to find them (defrag=madvise, the usual default), a whole parse runs 2-3x slower at
    # random. Shown so the two modes can be told apart; the default stays numpy's.
    results["podscope parse (cold, numpy THP off)"] = median_of(
        [
            run_measure("podscope_parse", path, env={"NUMPY_MADVISE_HUGEPAGE": "0"})
            for _ in range(repeat)
        ]
    )
    cache = Path(tempfile.mkdtemp(prefix="podscope-bench-cache-"))
    try:
        run_measure("podscope_parse", path, cache)  # fills the cache
        results["podscope load (warm cache)"] = median_of(
            [run_measure("podscope_parse", path, cache) for _ in range(repeat)]
        )
        results["podscope load (warm cache, process warm)"] = median_of(
            [run_measure("podscope_reload", path, cache) for _ in range(repeat)]
        )
        results["podscope op table (warm cache)"] = median_of(
            [run_measure("podscope_op_table", path, cache) for _ in range(repeat)]
        )
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    results["podscope op table (parse included)"] = median_of(
        [run_measure("podscope_op_table", path) for _ in range(repeat)]
    )
    results["podscope full analysis (one core)"] = median_of(
        [run_measure("podscope_analyze", path) for _ in range(repeat)]
    )
    try:
        results["xprof framework_op_stats"] = median_of(
            [run_measure("xprof_framework_op_stats", path) for _ in range(repeat)]
        )
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"xprof: not measured ({e})")
    rs = shutil.which("xprof-rs") or str(Path(sys.executable).parent / "xprof-rs")
    if Path(rs).exists():
        results["xprof-rs get_overview (whole process)"] = median_of(
            [run_binary([rs, "get_overview", str(path)]) for _ in range(repeat)]
        )
    else:
        print("xprof-rs: not installed (pip install xprof-rs); not measured")
    return results


def report(title: str, n_events: int, size_mb: float, results: dict[str, dict[str, Any]]) -> None:
    print(f"\n== {title}: {n_events:,} events, {size_mb:.0f} MB ==")
    print(f"{'tool':42} {'median s':>9} {'Mev/s':>7} {'peak MB':>8}")
    for name, r in results.items():
        rate = n_events / r["seconds"] / 1e6
        print(f"{name:42} {r['seconds']:9.3f} {rate:7.2f} {r['peak_rss_mb']:8.0f}")
    cold = results["podscope parse (cold, no cache)"]
    ev_b, all_b = cold["events_bytes_per_event"], cold["all_bytes_per_event"]
    print(f"bytes per event in memory: events frame {ev_b:.0f}, all frames {all_b:.0f}")
    warm = results.get("podscope load (warm cache)")
    rewarm = results.get("podscope load (warm cache, process warm)")
    if warm and rewarm:
        print(
            f"cold parse / warm cache load: {cold['seconds'] / warm['seconds']:.1f}x in a fresh "
            f"process, {cold['seconds'] / rewarm['seconds']:.1f}x in one that has loaded before "
            "(pandas' one-time first-use costs already paid)"
        )
    full = results["podscope full analysis (one core)"]
    print(
        f"full per-worker analysis on one core: {n_events / full['seconds'] / 1e6:.2f} M events/s "
        f"(target >= 1), {n_events / full['first_seconds'] / 1e6:.2f} M events/s in its first "
        "run in a fresh process"
    )
    ours = results["podscope op table (parse included)"]
    for peer in ("xprof framework_op_stats", "xprof-rs get_overview (whole process)"):
        if peer in results:
            p = results[peer]
            speed, op_speed = p["seconds"] / cold["seconds"], p["seconds"] / ours["seconds"]
            mem = cold["peak_rss_mb"] / p["peak_rss_mb"]
            print(
                f"vs {peer}: parse {speed:.1f}x faster, op table (parse incl.) {op_speed:.1f}x "
                f"faster, peak RSS {mem:.2f} of theirs"
            )


def main() -> None:
    os.environ.setdefault("GLOG_minloglevel", "3")  # XProf's C++ logging, when run in-process
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    ap = argparse.ArgumentParser(prog="python -m bench")
    ap.add_argument(
        "--tf-steps",
        type=int,
        default=1000,
        help="steps of the real TF capture (~1,240 events each)",
    )
    ap.add_argument(
        "--synthetic-steps",
        type=int,
        default=4000,
        help="synthetic steps (302 events each); 0 skips",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--scale-workers",
        type=int,
        nargs="*",
        default=[4, 16, 64],
        help="Dask scale-out sessions (N workers x 1.2 M events); none skips",
    )
    ap.add_argument("--android-mb", type=int, default=100, help="size of the generated atrace file")
    ap.add_argument(
        "--transfer-mb", type=int, default=200, help="size of the transferred trace; 0 skips"
    )
    ap.add_argument(
        "--only-app", action="store_true", help="only the dashboard in Chromium (app_latency)"
    )
    ap.add_argument(
        "--no-folders", action="store_true", help="skip the many-files sessions (bench.folders)"
    )
    ap.add_argument(
        "--pod-hosts",
        type=int,
        nargs="*",
        default=[16, 64, 128, 256, 512],
        help="pod sessions of N hosts x 18 k events (bench.pod_scale); none skips",
    )
    ap.add_argument(
        "--pod-once", type=int, nargs="*", default=[1024, 2048], help="pod sizes run once"
    )
    ap.add_argument(
        "--pod-dashboard",
        nargs="*",
        default=["512", "1024x8", "2048"],
        help="the dashboard on pods of HOSTS[xGPUS] (bench.pod_dashboard); none skips",
    )
    ap.add_argument(
        "--capture-agents", type=int, default=1024, help="agents in one capture window; 0 skips"
    )
    ap.add_argument(
        "--watch",
        nargs="*",
        default=list(watch.PARTS),
        choices=list(watch.PARTS),
        help="bench.watch parts (heartbeat, history, overhead); none skips",
    )
    args = ap.parse_args()
    if args.only_app:
        tf_path = ensure_tf_capture(OUT, args.tf_steps)
        if tf_path is None:
            sys.exit("TensorFlow not installed: no capture for the dashboard benchmark")
        n_events = int(run_measure("podscope_parse", tf_path)["events"])
        app_latency.report(app_latency.bench_browser(tf_path), n_events)
        return
    inputs = []
    tf_path = ensure_tf_capture(OUT, args.tf_steps)
    if tf_path is None:
        print("TensorFlow not installed: real-capture benchmark skipped (pip install '.[engine]')")
    else:
        inputs.append(("XPlane parse, real TF 2.x capture (tf-keras fit)", tf_path))
    if args.synthetic_steps:
        inputs.append(
            ("XPlane parse, synthetic TF-like capture", ensure_capture(OUT, args.synthetic_steps))
        )
    for title, path in inputs:
        results = bench_parse(path, args.repeat)
        n_events = int(results["podscope parse (cold, no cache)"]["events"])
        report(title, n_events, path.stat().st_size / 1e6, results)
    pod.report(pod.bench_pod(repeat=args.repeat))
    if tf_path is not None:
        n_events = int(bench_parse(tf_path, 1)["podscope parse (cold, no cache)"]["events"])
        app_latency.report(app_latency.bench_browser(tf_path), n_events)
    android.report(android.bench_android(OUT, args.android_mb, args.repeat))
    kineto.report(kineto.bench_kineto(args.repeat))
    if args.transfer_mb:
        transfer.report(transfer.bench_transfer(args.transfer_mb, args.repeat), args.transfer_mb)
    if not args.no_folders:
        folders.report(folders.bench_folders(args.repeat))
    if args.scale_workers:
        scale.report(args.scale_workers, args.repeat)
    if args.pod_hosts:
        sizes = [pod_scale.bench_size(n, args.repeat) for n in args.pod_hosts]
        pod_scale.report(sizes + [pod_scale.bench_size(n, 1) for n in args.pod_once])
    for spec in args.pod_dashboard:
        hosts, _, gpus = spec.partition("x")
        pod_dashboard.report(pod_dashboard.run(int(hosts), int(gpus or 0)))
    if args.capture_agents:
        pod_capture.report(pod_capture.run(args.capture_agents, processes=8, lose=0.1))
    if args.watch:
        watch.report({part: watch.PARTS[part]() for part in args.watch})


if __name__ == "__main__":
    main()
