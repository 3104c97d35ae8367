"""Android tracks on the Timeline, on a real Perfetto capture: one track per CPU of scheduling
slices and one per counter, as Perfetto's UI shows them; the figure draws them."""

from __future__ import annotations

import numpy as np
import pytest

from podscope.analyzers.session import SessionAnalysis
from podscope.analyzers.timeline import COUNTER_PLANE, SCHED_PLANE, TimelineIndex
from podscope.app.figures.timeline import counter_text, timeline_figure
from podscope.trace_parsers import load
from tests.conftest import shared_trace


@pytest.fixture(scope="module")
def perfetto() -> SessionAnalysis:
    return SessionAnalysis(
        load(shared_trace("android", "ms_test_trace.perfetto-trace"), cache=False)
    )


def test_scheduling_slices_are_one_track_per_cpu(perfetto: SessionAnalysis) -> None:
    (worker,) = perfetto.worker_names
    sched = perfetto.frames.sched
    index = perfetto.timeline(worker)
    busy = sched[sched["tid"] != 0]  # the idle task is drawn as an empty CPU
    tracks = [lb for lb in index.labels if f" › {SCHED_PLANE} › " in lb]
    assert sorted(tracks) == sorted(
        f"{worker} › {SCHED_PLANE} › CPU {c}" for c in busy["cpu"].unique()
    )
    slices = index.rows < 0
    assert int(slices.sum()) == len(busy) > 9_000  # every busy slice of ~15 k, none lost
    # each slice row leads back to its sched row: same start, CPU and thread
    i = int(np.flatnonzero(slices)[123])
    details = perfetto.event_details(worker, int(index.rows[i]))
    row = sched.iloc[-1 - int(index.rows[i])]
    assert details["start_ns"] == index.start[i] == row["start_ns"]
    assert details["thread"] == f"{row['comm']} [{row['tid']}]"
    assert index.labels[index.track[i]].endswith(f"CPU {row['cpu']}")
    # searching finds threads by name
    assert index.matching("kworker")[slices].sum() == busy["comm"].str.contains("kworker").sum()


def test_counters_are_tracks_with_idle_exit_as_minus_one(perfetto: SessionAnalysis) -> None:
    (worker,) = perfetto.worker_names
    c = perfetto.timeline(worker).counters
    counters = perfetto.frames.counters
    assert sorted(lb.rsplit(" › ", 1)[-1] for lb in c.labels) == sorted(
        counters["name"].astype(str).unique()
    )
    assert all(f" › {COUNTER_PLANE} › " in lb for lb in c.labels)
    assert len(c.t) == len(counters)
    idle = np.asarray([c.labels[t].endswith("cpu_idle cpu0") for t in c.track])
    assert set(np.unique(c.value[idle])) <= {-1.0, 0.0, 1.0, 2.0, 3.0}  # never 4294967295
    assert counter_text("cpu_frequency cpu0", 1_900_800) == "1.90 GHz"
    assert counter_text("cpu_idle cpu0", -1) == "running"


def test_the_figure_draws_sched_bars_and_counter_lines(perfetto: SessionAnalysis) -> None:
    (worker,) = perfetto.worker_names
    index = perfetto.timeline(worker)
    t0, t1 = int(index.start.min()), int(index.end.max())
    fig = timeline_figure([index], t0, t1, t0)
    # the capture was "0 events drawn": now every CPU row has bars or density cells
    assert fig.layout.meta["bars"] + fig.layout.meta["dense_tracks"] >= 4
    mid = (t0 + t1) // 2
    zoomed = timeline_figure([index], mid, mid + (t1 - t0) // 50, t0)
    assert zoomed.layout.meta["bars"] > 30
    ticks = list(fig.layout.yaxis.ticktext)
    assert any(f"{SCHED_PLANE} › CPU 0" in t for t in ticks)
    assert any("cpu_frequency cpu0" in t for t in ticks)
    lines = [t for t in fig.data if t.name == "counters"]
    assert len(lines) == 1 and np.isfinite(np.asarray(lines[0].y, dtype=float)).sum() > 100
    hidden = timeline_figure([index], t0, t1, t0, hidden_planes=[SCHED_PLANE, COUNTER_PLANE])
    assert not any(SCHED_PLANE in t or COUNTER_PLANE in t for t in hidden.layout.yaxis.ticktext)
    assert not [t for t in hidden.data if t.name == "counters"]


def test_an_index_without_android_tracks_is_unchanged() -> None:
    index = TimelineIndex.build(
        load(shared_trace("android", "ms_test_trace.perfetto-trace"), cache=False).events, "w"
    )
    assert not (index.rows < 0).any() and index.counters.labels == []
