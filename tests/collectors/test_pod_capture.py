"""Capture at pod size: 256 agents in one window on loopback, 10 % of them lost mid-window;
every host comes back with its status, the rest keep their traces, the collector stays small
(its memory and its threads). ``make bench`` captures 1,024."""

from __future__ import annotations

import pytest

from bench.pod_capture import run

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_256_agents_in_one_window_and_a_tenth_lost_keeps_the_rest() -> None:
    r = run(agents=256, processes=8, lose=0.1, duration_ms=1500, delay_ms=2000)
    lost = len(r["lost"])
    assert lost == 26
    assert sum(r["statuses"].values()) == 256  # a status for every host
    assert r["statuses"] == {"ok": 256 - lost, "crashed": lost}, r["statuses"]
    assert r["lost_status"] == ["crashed"]
    assert r["kept"] == 256 - lost  # each trace home, whole
    assert r["traced"] == 256  # every agent's trace started, in one window: any two traces
    # share at least half of it (the requests all left before the common start). How tight
    # the starts are is the bench's figure: 584 ms of spread on a loaded fresh clone.
    assert r["start_spread_ms"] < 1500 / 2, r
    assert r["start_lag_median_ms"] < 1500 / 3, r
    assert r["collector_rss_mb"] < 300, r  # traces stream to disk, not through memory
    # one event loop for every channel: the synchronous client held a polling thread per
    # channel through the window (289 threads at 256 agents)
    assert r["collector_threads"] <= 16, r
