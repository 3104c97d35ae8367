"""PyTorch profiler traces: PodScope's parse against Holistic Trace Analysis' own load
(``TraceAnalysis(trace_dir=…)``, the peer every PyTorch user runs first), each in a fresh
process on the same file, cold (no cache), several times; medians and the ratio.

The issue's target is 10× HTA. Today's parser reads the JSON with Python's ``json`` and types
the columns in pandas: the report says how far it is."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "kineto"
ROOT = Path(__file__).resolve().parents[1]

_PODSCOPE = """
import sys, time
t = time.perf_counter()
from podscope.trace_parsers import load
frames = load(sys.argv[1], cache=False)
print(time.perf_counter() - t, len(frames.events))
"""
_HTA = """
import logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
print(time.perf_counter() - t, sum(len(df) for df in a.t.traces.values()))
"""


def _run(script: str, folder: Path) -> tuple[float, int]:
    out = subprocess.run(
        [sys.executable, "-c", script, str(folder)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=600,
    )
    seconds, rows = out.stdout.split()[-2:]
    return float(seconds), int(rows)


def bench_kineto(repeat: int) -> list[dict[str, Any]]:
    """Per shared trace folder: the medians (import and load included, as a user waits) and
    their ratio."""
    results = []
    for folder in sorted(p for p in SHARED.iterdir() if p.is_dir()) if SHARED.is_dir() else []:
        alone = Path(tempfile.mkdtemp()) / folder.name  # HTA reads every file of its folder
        alone.mkdir()
        for f in folder.glob("*.json.gz"):
            shutil.copy(f, alone / f.name)
        ours = [_run(_PODSCOPE, alone) for _ in range(repeat)]
        theirs = [_run(_HTA, alone) for _ in range(repeat)]
        shutil.rmtree(alone.parent, ignore_errors=True)
        results.append(
            {
                "trace": folder.name,
                "mb": sum(f.stat().st_size for f in folder.glob("*.json.gz")) / 2**20,
                "events": ours[0][1],
                "podscope_s": statistics.median(s for s, _ in ours),
                "hta_s": statistics.median(s for s, _ in theirs),
            }
        )
    return results


def report(results: list[dict[str, Any]]) -> None:
    print("\n== PyTorch traces: PodScope's parse vs HTA's load (fresh process each, no cache)")
    if not results:
        print("   ../shared/traces/kineto absent: skipped")
        return
    print(
        f"   {'trace':<22} {'gz MB':>6} {'events':>8} {'podscope s':>11} {'HTA s':>8} {'ratio':>7}"
    )
    for r in results:
        ratio = r["hta_s"] / r["podscope_s"]
        print(
            f"   {r['trace']:<22} {r['mb']:>6.1f} {r['events']:>8,} {r['podscope_s']:>11.2f} "
            f"{r['hta_s']:>8.2f} {ratio:>6.1f}x"
        )
    print("   (medians; ratio = HTA / PodScope; the target is 10x)")


if __name__ == "__main__":
    report(bench_kineto(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
