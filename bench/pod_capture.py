"""Capture at pod size: one window for N agents on loopback (several agents per process, as
the agent allows), some of them lost mid-capture; measured: the spread of the agents' actual
trace starts around the common start, the capture's wall and transfer times, the collector's
peak RSS and threads, and every host's status.

    python -m bench.pod_capture --agents 256 --processes 8 --lose 0.1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

TOKEN = "pod-capture-bench-token-0123456789"


def _host_agents(first: int, count: int, folder: str, lose: list[int], trace: bytes) -> None:
    """A process hosting ``count`` agents (indexes from ``first``); the ones in ``lose`` stop
    mid-window. Writes ``ready-<first>.json`` (addresses) once all listen, and one line per
    trace started (its lag behind the common start, ns) to ``starts-<first>.jsonl``."""
    from podscope.collectors.export_service import TraceLevels, WorkerInfo, serve

    out_dir = Path(folder)
    starts = (out_dir / f"starts-{first}.jsonl").open("a", buffering=1)
    servers: dict[int, Any] = {}

    def tracer_for(index: int) -> Any:
        def tracer(out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> None:
            time.sleep(max(0.0, (start_ns - time.time_ns()) / 1e9))
            starts.write(json.dumps({"agent": index, "lag_ns": time.time_ns() - start_ns}) + "\n")
            if index in lose:  # the host goes away half-way through the window
                time.sleep(duration_ms / 2000)
                servers[index].stop(0)
                time.sleep(duration_ms / 1000)
                return
            time.sleep(duration_ms / 1000)
            out.write_bytes(trace)

        return tracer

    for i in range(first, first + count):
        root = out_dir / "agents" / str(i)
        servers[i] = serve(
            root, token=TOKEN, info=WorkerInfo(role="worker", index=i), tracer=tracer_for(i)
        )
    ready = {str(i): f"127.0.0.1:{s.port}" for i, s in servers.items()}
    tmp = out_dir / f".ready-{first}.json"
    tmp.write_text(json.dumps(ready))
    tmp.replace(out_dir / f"ready-{first}.json")
    while not (out_dir / "done").exists():
        time.sleep(0.2)
    for s in servers.values():
        s.stop(0)


def run(
    agents: int = 256,
    processes: int = 8,
    lose: float = 0.1,
    duration_ms: int = 2000,
    delay_ms: int = 1500,
    trace: bytes | None = None,
) -> dict[str, Any]:
    """Starts the agents, captures them in one window, and measures it (see the module)."""
    import psutil

    from bench.synth import synth_xspace
    from podscope.collectors.capture import CaptureOptions, Target, capture

    trace = trace if trace is not None else synth_xspace(60)
    lost = set(range(0, agents, max(1, round(1 / lose)))) if lose else set()
    with tempfile.TemporaryDirectory(prefix="podscope-pod-capture-") as tmp:
        folder = Path(tmp)
        ctx = mp.get_context("spawn")  # grpc and fork do not mix
        per = -(-agents // processes)
        children = []
        for first in range(0, agents, per):
            count = min(per, agents - first)
            losing = [i for i in lost if first <= i < first + count]
            p = ctx.Process(target=_host_agents, args=(first, count, tmp, losing, trace))
            p.start()
            children.append((first, p))
        try:
            addresses: dict[int, str] = {}
            for first, p in children:
                ready = folder / f"ready-{first}.json"
                while not ready.exists():  # wait for the state, not for a time
                    if not p.is_alive():
                        raise RuntimeError(f"agent process {first} exited {p.exitcode}")
                    time.sleep(0.05)
                addresses |= {int(k): v for k, v in json.loads(ready.read_text()).items()}
            targets = [Target(addresses[i], label=f"host{i:04d}_8470") for i in range(agents)]
            me = psutil.Process()
            peak = {"rss": me.memory_info().rss, "threads": threading.active_count()}
            base = dict(peak)
            stop = threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    peak["rss"] = max(peak["rss"], me.memory_info().rss)
                    peak["threads"] = max(peak["threads"], threading.active_count())
                    stop.wait(0.02)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            opts = CaptureOptions(
                logdir=folder / "logdir",
                duration_ms=duration_ms,
                delay_ms=delay_ms,
                token=TOKEN,
                retries=1,
            )
            t = time.perf_counter()
            result = capture(targets, opts)
            wall = time.perf_counter() - t
            stop.set()
            sampler.join()
        finally:
            (folder / "done").touch()
            for _, p in children:
                p.join(timeout=30)
        lags = [
            json.loads(line)["lag_ns"] / 1e6
            for f in folder.glob("starts-*.jsonl")
            for line in f.read_text().splitlines()
        ]
        statuses = Counter(w.status.value for w in result.workers)
        ok = [w for w in result.workers if w.status.value == "ok"]
        kept = sum(1 for w in ok if w.file and Path(w.file).stat().st_size == len(trace))
        return {
            "agents": agents,
            "processes": len(children),
            "lost": sorted(lost),
            "statuses": dict(statuses),
            "kept": kept,
            "lost_status": sorted({result.workers[i].status.value for i in lost}),
            "start_spread_ms": (max(lags) - min(lags)) if lags else float("nan"),
            "start_lag_median_ms": statistics.median(lags) if lags else float("nan"),
            "traced": len(lags),
            "wall_s": wall,
            "transfer_s": max((w.transfer_s or 0.0) for w in ok) if ok else 0.0,
            "transfer_sum_s": sum((w.transfer_s or 0.0) for w in ok),
            "bytes": sum(w.bytes for w in ok),
            "collector_rss_mb": (peak["rss"] - base["rss"]) / 2**20,
            "collector_peak_rss_mb": peak["rss"] / 2**20,
            "collector_threads": peak["threads"] - base["threads"],
        }


def report(r: dict[str, Any]) -> None:
    print(
        f"\n== Capture at pod size: {r['agents']} agents in {r['processes']} processes on "
        f"loopback, {len(r['lost'])} lost mid-window =="
    )
    print(
        f"statuses: {r['statuses']}; traces kept: {r['kept']}; lost agents: {r['lost_status']}\n"
        f"trace starts: spread {r['start_spread_ms']:.1f} ms across {r['traced']} agents "
        f"(median {r['start_lag_median_ms']:.1f} ms after the common start)\n"
        f"capture {r['wall_s']:.1f} s in all; transfers {r['bytes'] / 1e6:.0f} MB, the last done "
        f"{r['transfer_s']:.2f} s after its trace ({r['transfer_sum_s']:.1f} s summed)\n"
        f"collector: peak RSS {r['collector_peak_rss_mb']:.0f} MB "
        f"(+{r['collector_rss_mb']:.0f} MB during the capture), at most "
        f"{r['collector_threads']} threads more"
    )


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.pod_capture")
    ap.add_argument("--agents", type=int, default=256)
    ap.add_argument("--processes", type=int, default=max(2, (os.cpu_count() or 2) * 2))
    ap.add_argument("--lose", type=float, default=0.1, help="share of agents lost mid-window")
    args = ap.parse_args()
    report(run(args.agents, args.processes, args.lose))


if __name__ == "__main__":
    main()
