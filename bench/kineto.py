"""PyTorch profiler traces: PodScope's parse against Holistic Trace Analysis' own load
(``TraceAnalysis(trace_dir=…)``, the peer every PyTorch user runs first), each in a fresh
process on the same files, cold (no cache), several times; medians and ratios.

Two times per side: the load itself (``load(folder)`` against ``TraceAnalysis(trace_dir=…)``,
each library already imported: the issue's target, 10×), and the whole process as a user's
script waits for it (imports included: pandas alone is a few tenths of a second on both
sides, so this ratio is bounded well below the load's). PodScope's loader imports a parser
on first use; its PyTorch parser is imported with the library here, as HTA's import holds
its own parser (else the load would count pandas' import on one side only)."""

from __future__ import annotations

import gzip
import json
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
from podscope.trace_parsers import kineto, load
loaded = time.perf_counter()
frames = load(sys.argv[1], cache=False)
done = time.perf_counter()
print(done - t, done - loaded, len(frames.events))
"""
_HTA = """
import logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
loaded = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
done = time.perf_counter()
print(done - t, done - loaded, sum(len(df) for df in a.t.traces.values()))
"""


def _run(script: str, folder: Path) -> tuple[float, float, int]:
    """(whole process s, load s, rows) of one fresh run."""
    out = subprocess.run(
        [sys.executable, "-c", script, str(folder)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=600,
    )
    whole, load, rows = out.stdout.split()[-3:]
    return float(whole), float(load), int(rows)


#: The job of many ranks: the 128-rank job's sampled pair, repeated with their ranks renumbered.
MANY_RANKS = 16


def _many_ranks(into: Path, n: int) -> str | None:
    """``n`` ranks of one job from the shared pair of a 128-rank job (rank ``i`` is the pair's
    ``i % 2`` with ``distributedInfo.rank`` set to ``i``, so HTA keys each apart); the case's
    name, or None when the pair is absent."""
    pair = sorted((SHARED / "gpu_sampled_2of128").glob("*.json.gz"))
    if not pair:
        return None
    docs = [json.loads(gzip.decompress(f.read_bytes())) for f in pair]
    into.mkdir()
    for i in range(n):
        doc = docs[i % len(docs)]
        doc["distributedInfo"]["rank"] = i
        (into / f"rank-{i}.pt.trace.json.gz").write_bytes(
            gzip.compress(json.dumps(doc).encode(), compresslevel=6)
        )
    return f"gpu_sampled x{n // len(docs)} ({n} ranks)"


def bench_kineto(repeat: int) -> list[dict[str, Any]]:
    """Per shared trace folder, and a job of ``MANY_RANKS`` ranks: the medians of the load and
    of the whole process, each side."""
    results = []
    work = Path(tempfile.mkdtemp())
    cases = []
    for folder in sorted(p for p in SHARED.iterdir() if p.is_dir()) if SHARED.is_dir() else []:
        alone = work / folder.name  # HTA reads every file of its folder
        alone.mkdir()
        for f in folder.glob("*.json.gz"):
            shutil.copy(f, alone / f.name)
        cases.append((folder.name, alone))
    many = _many_ranks(work / "many", MANY_RANKS) if SHARED.is_dir() else None
    if many:
        cases.append((many, work / "many"))
    try:
        for name, folder in cases:
            ours = [_run(_PODSCOPE, folder) for _ in range(repeat)]
            theirs = [_run(_HTA, folder) for _ in range(repeat)]
            results.append(
                {
                    "trace": name,
                    "mb": sum(f.stat().st_size for f in folder.glob("*.json.gz")) / 2**20,
                    "events": ours[0][2],
                    "podscope_s": statistics.median(r[1] for r in ours),
                    "hta_s": statistics.median(r[1] for r in theirs),
                    "podscope_process_s": statistics.median(r[0] for r in ours),
                    "hta_process_s": statistics.median(r[0] for r in theirs),
                }
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def report(results: list[dict[str, Any]]) -> None:
    print("\n== PyTorch traces: PodScope's parse vs HTA's load (fresh process each, no cache)")
    if not results:
        print("   ../shared/traces/kineto absent: skipped")
        return
    print(
        f"   {'trace':<28} {'gz MB':>6} {'events':>8} {'load s':>7} {'HTA s':>6} {'ratio':>6}"
        f" {'process s':>10} {'HTA s':>6} {'ratio':>6}"
    )
    for r in results:
        print(
            f"   {r['trace']:<28} {r['mb']:>6.1f} {r['events']:>8,} {r['podscope_s']:>7.3f} "
            f"{r['hta_s']:>6.2f} {r['hta_s'] / r['podscope_s']:>5.1f}x "
            f"{r['podscope_process_s']:>10.2f} {r['hta_process_s']:>6.2f} "
            f"{r['hta_process_s'] / r['podscope_process_s']:>5.1f}x"
        )
    print(
        "   (medians; ratio = HTA / PodScope; load: each library imported first, the target is"
        " 10x; process: imports included)"
    )


if __name__ == "__main__":
    report(bench_kineto(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
