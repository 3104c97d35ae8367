"""Android trace parsing throughput: the largest public sample and a generated ~100 MB atrace
file, PodScope against Python's own line splitting (the floor any text parser pays)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "android"


def generated_atrace(path: Path, target_mb: int) -> Path:
    """A systrace text file of nested TFLite-style B/E sections, sched_switch and counters."""
    if path.exists():
        return path
    lines = ["# tracer: nop\n"]
    size, i, ts = 14, 0, 1.0
    ops = ["CONV_2D@0/0", "DEPTHWISE_CONV_2D@1/0", "CONV_2D@2/0", "SOFTMAX@3/0"]
    while size < target_mb * 2**20:
        block = [
            f"       inference-1709  ( 1650) [004] ...1 {ts:.6f}: tracing_mark_write: B|1650|invoke@-1/0\n"
        ]
        for k, op in enumerate(ops):
            t = ts + (k + 1) * 2e-5
            block.append(
                f"       inference-1709  ( 1650) [004] ...1 {t:.6f}: tracing_mark_write: B|1650|{op}\n"
            )
            block.append(
                f"       inference-1709  ( 1650) [004] ...1 {t + 1e-5:.6f}: tracing_mark_write: E|1650\n"
            )
        block.append(
            f"       inference-1709  ( 1650) [004] ...1 {ts + 1.2e-4:.6f}: tracing_mark_write: E|1650\n"
        )
        block.append(
            f"          <idle>-0     (-----) [00{i % 4}] d..3 {ts + 1.3e-4:.6f}: sched_switch: prev_comm=swapper "
            f"prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=inference next_pid=1709 next_prio=120\n"
        )
        block.append(
            f"       inference-1709  ( 1650) [004] ...1 {ts + 1.4e-4:.6f}: tracing_mark_write: C|1650|queue|{i % 7}\n"
        )
        chunk = "".join(block)
        lines.append(chunk)
        size += len(chunk)
        ts += 2e-4
        i += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return path


def _measure(path: Path, repeat: int) -> dict[str, Any]:
    from podscope.trace_parsers import load

    data = path.read_bytes()
    runs, events = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        frames = load(path, cache=False)
        runs.append(time.perf_counter() - t)
        events = int(frames.parse_notes.set_index("key")["value"].get("events", 0))
    t = time.perf_counter()
    data.decode("utf-8", "replace").splitlines()
    split = time.perf_counter() - t
    s = statistics.median(runs)
    return {
        "file": path.name,
        "mb": len(data) / 2**20,
        "events": events,
        "seconds": s,
        "split_seconds": split,
    }


def bench_android(out: Path, target_mb: int = 100, repeat: int = 3) -> list[dict[str, Any]]:
    results = []
    largest = SHARED / "catapult_android_systrace_legacy.html"
    if largest.exists():
        results.append(_measure(largest, repeat))
    results.append(
        _measure(
            generated_atrace(out / f"generated_{target_mb}mb.systrace", target_mb),
            max(1, repeat - 2),
        )
    )
    return results


def report(results: list[dict[str, Any]]) -> None:
    print("\n== Android text/HTML parse throughput ==")
    for r in results:
        print(
            f"{r['file']:40} {r['mb']:7.1f} MB  {r['seconds']:7.2f} s  {r['mb'] / r['seconds']:6.1f} MB/s  "
            f"{r['events'] / r['seconds'] / 1e6:5.2f} M events/s (target 1)  "
            f"line split alone: {r['split_seconds']:.3f} s ({r['seconds'] / r['split_seconds']:.0f}x of it)"
        )
