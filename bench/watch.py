"""Watching long jobs, measured (``make bench``; ``python -m bench.watch``):

1. ``heartbeat``: the cost of ``podscope.agent.step(n)`` per training step, against the
   cheapest thing a loop can do per step (reading the clock), and as a share of a 10 ms step.
2. ``history``: a logdir of 1,000 watched sessions: the Sessions listing and the History
   page's index, against a rescan of every session (what the listing did before its index),
   and the two pages opened in a browser.
3. ``overhead``: the engine's mean step time with a watcher capturing every ``every_s`` for
   2 s, against the same cluster watched without captures (heartbeats read), phases
   alternated on one cluster; projected to a capture every 5 minutes (the overhead is per
   capture, so it scales with the captures' density).

    python -m bench.watch --part heartbeat history overhead
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def heartbeat(calls: int = 1_000_000, repeat: int = 5) -> dict[str, float]:
    """ns per ``step()`` and per clock read (median of ``repeat`` runs of ``calls``)."""
    from podscope.collectors.heartbeat import Beats

    beats = Beats()

    def per_call(fn: Any) -> float:
        runs = []
        for _ in range(repeat):
            t = time.perf_counter_ns()
            for n in range(calls):
                fn(n)
            runs.append((time.perf_counter_ns() - t) / calls)
        return statistics.median(runs)

    step_ns = per_call(beats.record)
    clock_ns = per_call(lambda n: time.monotonic_ns())
    return {
        "step_ns": step_ns,
        "clock_ns": clock_ns,
        "ratio_to_clock": step_ns / clock_ns,
        "share_of_10ms_step": step_ns / 10e6,
    }


def _history_logdir(root: Path, n: int) -> Path:
    """``n`` watched sessions of two small workers, and their history: one real summary, the
    others its copies at other times with other verdicts."""
    from importlib import import_module

    from podscope.analyzers.history import summarize
    from podscope.analyzers.session import SessionAnalysis
    from podscope.app.history import HistoryIndex
    from podscope.trace_parsers import layout, load

    # the tests' simulated worker trace (imported by name: the tests are not type-checked)
    data = import_module("tests.collectors.fake_agent").xspace(20)
    index = HistoryIndex(root)
    t0 = time.time() - n * 300
    template: dict[str, Any] | None = None
    for i in range(n):
        name = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(t0 + i * 300))
        folder = layout.session_dir(root, name)
        folder.mkdir(parents=True)
        for w in ("w0", "w1"):
            (folder / f"{w}.xplane.pb").write_bytes(data)
        layout.write_manifest(
            folder,
            name,
            int((t0 + i * 300) * 1e9),
            {},
            [{"label": "w0", "status": "ok"}, {"label": "w1", "status": "ok"}],
            label="watch: scheduled",
            watch={"reason": "scheduled", "trigger": {"kind": "scheduled"}},
        )
        if template is None:
            template = summarize(SessionAnalysis(load(folder, cache=False)), name)
        slow = i % 97 == 50
        index.add(
            {
                **template,
                "session": name,
                "start_unix_s": t0 + i * 300,
                "culprits": ["w1"] if slow else [],
                "causes": {"w1": "late start"} if slow else {},
                "metrics": {**template["metrics"], "step_time (p50)": 20.0 + (30 if slow else 0)},
            }
        )
    return root


def history(n: int = 1000, repeat: int = 5) -> dict[str, float]:
    """Seconds (medians) of the listing and the history index at ``n`` sessions, the rescan
    peer, and the two pages' first content in a browser."""
    from podscope.analyzers.history import with_changes
    from podscope.app.history import HistoryIndex
    from podscope.app.store import SessionStore

    root = _history_logdir(Path(tempfile.mkdtemp(prefix="podscope-bench-history-")), n)
    store = SessionStore(root)
    store.summaries()  # the index filled once, as a running server has it

    def timed(fn: Any) -> float:
        runs = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t)
        return statistics.median(runs)

    def rescan() -> None:
        store._listing.clear()  # every folder listed, stat'ed and its manifest read
        store.summaries()

    index = HistoryIndex(root)
    out = {
        "sessions": float(n),
        "listing_s": timed(store.summaries),
        "rescan_s": timed(rescan),
        "history_index_s": timed(lambda: with_changes(HistoryIndex(root).entries())),
        "history_index_warm_s": timed(lambda: with_changes(index.entries())),
    }
    out["listing_vs_rescan"] = out["listing_s"] / out["rescan_s"]
    out.update(_pages(root))
    return out


def _pages(root: Path) -> dict[str, float]:
    """Seconds from navigation to the Sessions grid's first row and the History page's
    "N captures summarized" (median of 3, a fresh browser context each)."""
    from importlib import import_module

    from playwright.sync_api import sync_playwright

    # the browser tests' helpers (imported by name: the tests are not type-checked)
    helpers = import_module("tests.app.helpers")
    free_port, get_when_up = helpers.free_port, helpers.get_when_up
    chromium = import_module("tests.app.test_browser").CHROMIUM

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "podscope", "serve", "--logdir", str(root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        get_when_up(base + "/healthz", server)
        times: dict[str, list[float]] = {"sessions_page_s": [], "history_page_s": []}
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium)
            for _ in range(3):
                for key, path, ready in (
                    ("sessions_page_s", "/", "#sessions-table .ag-row"),
                    ("history_page_s", "/history", "#hist-table .ag-row"),
                ):
                    page = browser.new_context().new_page()
                    t = time.perf_counter()
                    page.goto(base + path)
                    page.locator(ready).first.wait_for(timeout=120_000)
                    times[key].append(time.perf_counter() - t)
                    page.context.close()
            browser.close()
        return {k: statistics.median(v) for k, v in times.items()}
    finally:
        server.terminate()
        server.wait(timeout=10)


def overhead(
    phase_s: float = 60.0, every_s: float = 30.0, rounds: int = 2, workers: int = 2
) -> dict[str, float]:
    """The engine's mean step time with and without captures (see the module docstring)."""
    from podscope.collectors.capture import CaptureOptions, Target
    from podscope.collectors.watch import Watcher, WatchOptions
    from podscope.reference_engine import cluster
    from podscope.reference_engine.config import EngineConfig
    from verify.run import wait_warm

    root = Path(tempfile.mkdtemp(prefix="podscope-bench-watch-"))
    cfg = EngineConfig(workload="mwms-loop", scenario="baseline", steps=None)
    m = cluster.up(cfg, workers=workers, run_dir=root / "run")
    means: dict[str, list[float]] = {"none": [], "captures": []}
    captures = 0
    try:
        wait_warm(m, cfg, 180)
        for r in range(rounds):
            for kind in ("none", "captures"):
                watcher = Watcher(
                    lambda: [Target(t.agent_address) for t in m.tasks],
                    WatchOptions(
                        CaptureOptions(logdir=root / f"logdir-{r}-{kind}", duration_ms=2000),
                        every_s=every_s if kind == "captures" else None,
                        triggers=None,
                        poll_s=2.0,
                    ),
                )
                start = time.time()
                stop = threading.Event()
                while time.time() - start < phase_s:
                    taken = watcher.step()
                    captures += taken is not None
                    stop.wait(2.0)
                watcher.close()
                means[kind].append(_mean_step_s(m.tasks[0], start, time.time()))
    finally:
        cluster.down(m, grace_s=2)
    none, with_captures = statistics.median(means["none"]), statistics.median(means["captures"])
    measured = with_captures / none - 1
    return {
        "mean_step_ms_none": none * 1e3,
        "mean_step_ms_captures": with_captures * 1e3,
        "captures": float(captures),
        "every_s": every_s,
        "overhead_measured": measured,
        "overhead_at_5min_x_2s": measured * every_s / 300,
    }


def _mean_step_s(task: Any, start: float, end: float) -> float:
    from podscope.reference_engine import cluster

    t = [e["t"] for e in cluster.events(task) if e["event"] == "step" and start <= e["t"] <= end]
    return (t[-1] - t[0]) / max(1, len(t) - 1)


def report(results: dict[str, dict[str, float]]) -> None:
    print("\n## Watching long jobs (bench.watch)\n")
    for part, numbers in results.items():
        print(f"### {part}")
        for k, v in numbers.items():
            print(f"- {k}: {v:.6g}")
    out = ROOT / "build" / "bench" / "watch.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


PARTS: dict[str, Callable[[], dict[str, float]]] = {
    "heartbeat": heartbeat,
    "history": history,
    "overhead": overhead,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", nargs="*", default=list(PARTS), choices=list(PARTS))
    args = ap.parse_args()
    report({p: PARTS[p]() for p in args.part})


if __name__ == "__main__":
    main()
