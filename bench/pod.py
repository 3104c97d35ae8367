"""Pod Viewer analysis at scale: 8 workers × 1,000 steps, PodScope vs XProf's pod_viewer."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.synth import _b, _event, _map_entry, _stat_int, _v

US = 1_000_000


def worker_bytes(steps: int, straggler_us: int = 0) -> bytes:
    """A host plane: per step a train marker, an input wait, a MatMul, an all-reduce."""
    names = [
        "train",
        "IteratorGetNextOp::DoCompute",
        "dense/MatMul:MatMul",
        "allreduce/CollectiveReduceV2:CollectiveReduceV2",
    ]
    em = {n: i + 1 for i, n in enumerate(names)}
    py, ops = bytearray(), bytearray()
    for i in range(steps):
        t0 = i * 1000 * US
        py += _event(
            em["train"],
            t0 + straggler_us * US,
            (900 - straggler_us) * US,
            _stat_int(1, i) + _stat_int(2, 1),
        )
        ops += _event(em["IteratorGetNextOp::DoCompute"], t0 + 10 * US, 50 * US)
        ops += _event(em["dense/MatMul:MatMul"], t0 + 70 * US, 300 * US)
        ops += _event(
            em["allreduce/CollectiveReduceV2:CollectiveReduceV2"], t0 + 400 * US, 400 * US
        )
    lines = _b(3, _v(1, 1) + _b(2, b"python") + bytes(py)) + _b(
        3, _v(1, 2) + _b(2, b"tf_Compute") + bytes(ops)
    )
    meta = b"".join(_map_entry(4, i, _v(1, i) + _b(2, n.encode())) for n, i in em.items())
    meta += _map_entry(5, 1, _v(1, 1) + _b(2, b"step_num")) + _map_entry(
        5, 2, _v(1, 2) + _b(2, b"_r")
    )
    env = _b(
        1,
        _v(1, 1)
        + _b(2, b"Task Environment")
        + _map_entry(5, 1, _v(1, 1) + _b(2, b"profile_start_time"))
        + _b(6, _v(1, 1) + _v(3, 1_796_000_000_000_000_000)),
    )
    return _b(1, _v(1, 0) + _b(2, b"/host:CPU") + lines + meta) + env


def bench_pod(workers: int = 8, steps: int = 1000, repeat: int = 3) -> dict[str, Any]:
    from podscope.analyzers.session import SessionAnalysis
    from podscope.trace_parsers import load

    with tempfile.TemporaryDirectory(prefix="podscope-pod-") as tmp:
        run = Path(tmp)
        for w in range(workers):
            (run / f"10.0.0.{w}_6000.xplane.pb").write_bytes(
                worker_bytes(steps, straggler_us=400 if w == 3 else 0)
            )
        frames = load(run, cache=False)
        ours = []
        for _ in range(repeat):
            t = time.perf_counter()
            s = SessionAnalysis(frames).stragglers  # a fresh analysis: nothing cached
            ours.append(time.perf_counter() - t)
        result: dict[str, Any] = {
            "podscope_s": statistics.median(ours),
            "events": len(frames.events),
            "named": s.loc[s["straggler"], "worker"].tolist(),
        }
        try:
            from xprof.convert import raw_to_tool_data

            files = [str(p) for p in sorted(run.glob("*.xplane.pb"))]
            theirs = []
            for _ in range(repeat):
                t = time.perf_counter()
                data, _ = raw_to_tool_data.xspace_to_tool_data(
                    files, "pod_viewer", {"use_saved_result": False}
                )
                theirs.append(time.perf_counter() - t)
            result["xprof_s"] = statistics.median(theirs)
            result["xprof_steps"] = len(json.loads(data)["podStatsSequence"].get("podStatsMap", []))
        except ImportError:
            result["xprof_s"] = None
    return result


def report(r: dict[str, Any], workers: int = 8, steps: int = 1000) -> None:
    print(
        f"\n== Pod Viewer analysis: {workers} workers x {steps} steps ({r['events']:,} events, parsed) =="
    )
    print(
        f"podscope steps+breakdown+stragglers: {r['podscope_s']:.3f} s (target < 2 s); straggler named: {r['named']}"
    )
    if r["xprof_s"] and not r.get("xprof_steps"):
        print(
            f"xprof pod_viewer found no steps in these synthetic files ({r['xprof_s']:.3f} s): not comparable"
        )
    elif r["xprof_s"]:
        print(
            f"xprof pod_viewer (parse included): {r['xprof_s']:.3f} s; ratio {r['xprof_s'] / r['podscope_s']:.1f}x"
        )
