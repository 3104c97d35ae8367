"""Dashboard callback latency on a ≥1 M-event session (after the first parse), and payload sizes.

Callbacks are called in-process (the functions Dash runs per request), so the numbers exclude
HTTP and browser rendering; payload = the JSON Dash would send back.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import plotly


def _p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1] if len(samples) >= 2 else samples[0]


def _timed(fn: Callable[[], Any], n: int) -> tuple[list[float], int]:
    out, size = [], 0
    for _ in range(n):
        t = time.perf_counter()
        result = fn()
        out.append(time.perf_counter() - t)
        size = len(json.dumps(result, cls=plotly.utils.PlotlyJSONEncoder))
    return out, size


def bench_app(capture: Path, n: int = 20) -> dict[str, Any]:
    import importlib

    import dash

    from app.main import create_app
    from app.settings import AppSettings

    with tempfile.TemporaryDirectory(prefix="podscope-app-") as tmp:
        root = Path(tmp) / "plugins" / "profile"
        for s in ("session_a", "session_b"):
            (root / s).mkdir(parents=True)
            shutil.copy(capture, root / s / "localhost_6000.xplane.pb")
        create_app(
            AppSettings(logdir=Path(tmp), cache_dir=Path(tmp) / "cache", frame_cache_sessions=4)
        )
        pages = {
            p["path"]: importlib.import_module(p["module"]) for p in dash.page_registry.values()
        }
        pod_viewer, timeline = pages["/pod"], pages["/timeline"]
        t = time.perf_counter()
        pod_viewer.layout(session="session_a")
        pod_viewer.layout(session="session_b")
        first = time.perf_counter() - t
        timeline.layout(session="session_a")  # first use builds the session's timeline index
        flip = iter(["session_a", "session_b"] * n)
        switch, switch_size = _timed(
            lambda: pod_viewer.layout(session=next(flip)).to_plotly_json(), n
        )
        steps = iter(range(n))
        slider, slider_size = _timed(
            lambda: pod_viewer.select_step(next(steps), "step", "?session=session_a"), n
        )
        ev = timeline.load_session("session_a")[1].frames.events
        span_ms = (
            int((ev["start_ns"] + ev["dur_ps"] // 1000).max()) - int(ev["start_ns"].min())
        ) / 1e6
        windows = iter(
            [
                {"xaxis.range[0]": span_ms * f, "xaxis.range[1]": span_ms * (f + w)}
                for f, w in [(0.0, 1.0), (0.3, 0.1), (0.5, 0.01), (0.1, 0.5)] * n
            ]
        )
        zoom, zoom_size = _timed(
            lambda: timeline.redraw(next(windows), "all", "", "?session=session_a"), n
        )
    return {
        "events": len(ev),
        "first_s": first,
        "switch": switch,
        "switch_bytes": switch_size,
        "slider": slider,
        "slider_bytes": slider_size,
        "zoom": zoom,
        "zoom_bytes": zoom_size,
    }


def report(r: dict[str, Any]) -> None:
    print(
        f"\n== Dashboard callbacks, {r['events']:,}-event session (in-process; first parse + analysis of two sessions {r['first_s']:.1f} s) =="
    )
    for key, target in (("switch", 0.300), ("slider", 0.150), ("zoom", 0.300)):
        s = r[key]
        print(
            f"{key:7} median {statistics.median(s) * 1000:6.1f} ms  p95 {_p95(s) * 1000:6.1f} ms  "
            f"(target p95 < {target * 1000:.0f} ms)  payload {r[key + '_bytes'] / 1e3:.0f} kB"
        )
