"""Every public Android sample parses, with the counts its README gives."""

from __future__ import annotations

import pytest

from podscope.trace_parsers import load, validate
from tests.conftest import shared_trace


def notes(path: str) -> tuple[object, dict[str, int]]:
    frames = validate(load(shared_trace("android", *path.split("/")), cache=False))
    return frames, frames.parse_notes.set_index("key")["value"].to_dict()


def span_s(frames) -> float:  # type: ignore[no-untyped-def]
    w = frames.workers.iloc[0]
    return (w["capture_stop_ns"] - w["capture_start_ns"]) / 1e9


@pytest.mark.parametrize(
    "name", ["catapult_decompressed_atrace_data.txt", "catapult_compressed_atrace_data.bin"]
)
def test_atrace_text_and_compressed(name: str) -> None:
    frames, n = notes(name)
    assert n["events"] == 1042 and n["clock_sync"] == 2
    assert n["markers"] == 463 + 463 + 88 + 17 + 9
    assert n["unclosed_async"] == 8  # 17 S, 9 F: at least 8 async slices never close
    assert len(frames.counters) == 88  # type: ignore[attr-defined]
    assert len(frames.events) == 463 + 9 + 8  # type: ignore[attr-defined]
    assert 0.2 < span_s(frames) < 1.5


def test_legacy_systrace_html_and_the_zero_clock_sync() -> None:
    frames, n = notes("catapult_android_systrace_legacy.html")
    assert n["events"] == 31_479
    assert (
        n["markers"] + n["clock_sync"] == 13_578
        and n["sched_switch"] == 11_074
        and n["sched_wakeup"] == 6_827
    )
    assert len(frames.counters) == 1_611 and len(frames.sched) == 11_074  # type: ignore[attr-defined]
    assert frames.sched["cpu"].nunique() == 2  # type: ignore[attr-defined]
    assert span_s(frames) < 60  # the 0.0 clock-sync line would make it ~50,265 s


def test_modern_systrace_html_text_and_json_blocks() -> None:
    frames, n = notes("trappy_trace_surfaceflinger.html")
    assert n["events"] == 2_506 and n["json_blocks"] == 1
    expected = {
        "sched_switch": 715,
        "cpu_idle": 621,
        "sched_wakeup": 421,
        "sugov_set_iowait_boost": 366,
        "cpu_frequency": 104,
        "clock_set_rate": 88,
        "sched_blocked_reason": 31,
    }
    assert {k: n[k] for k in expected} == expected
    assert n["markers"] == 70 + 70 + 18
    assert span_s(frames) < 5  # the controller's clock_sync JSON event is not trace time


def test_small_systrace_edge_cases() -> None:
    _, n = notes("trappy_trace_systrace.html")
    assert n["events"] == 10 and n["unmatched_end"] == 1
    frames, n = notes("perfetto_small/bad_print.systrace")
    assert n["skipped_lines"] == 2 and len(frames.events) == 1  # type: ignore[attr-defined]
    frames, _ = notes("perfetto_small/unknown_thread_name.systrace")
    assert len(frames.sched) == 1  # type: ignore[attr-defined]
    _, n = notes("perfetto_small/cpu_frequency_limits.systrace")
    assert n["events"] == 12


@pytest.mark.parametrize(
    ("name", "events", "slices"),
    [
        ("catapult_big_trace.json", 1_866, 933),
        ("catapult_async_begin_end.json", 35, None),
        ("catapult_flow_simple.json", 10, None),
        ("catapult_profile_chrome_android.json", 10, None),
    ],
)
def test_chrome_json(name: str, events: int, slices: int | None) -> None:
    frames, n = notes(name)
    assert n["events"] == events
    if slices is not None:
        assert len(frames.events) == slices  # type: ignore[attr-defined]
        assert frames.events["plane"].nunique() == 4  # type: ignore[attr-defined]


def test_perfetto_plain_ftrace() -> None:
    frames, n = notes("ms_test_trace.perfetto-trace")
    assert (
        n["packet_ftrace_events"] == 1_863
        and n["sched_switch"] == 15_267
        and n["sched_wakeup"] == 8_743
    )
    assert 15 < span_s(frames) < 17  # README: about 15.8 s


def test_perfetto_cpu_sampling_trace() -> None:
    frames, n = notes("ms_perfetto_trace_cpu_sampling_not_scoped.pftrace")
    assert n["sched_switch"] == 24_698 and n["cpu_idle"] == 8_032 and n["packet_process_tree"] == 20
    assert len(frames.sched) >= 24_698  # type: ignore[attr-defined]


def test_perfetto_chrome_gzip_with_incremental_clocks() -> None:
    frames, n = notes("ms_chrome.pftrace")
    assert n["packet_track_event"] == 292_326 and n["packet_track_descriptor"] == 864
    assert 1 < span_s(frames) < 600  # seconds, not years: clocks 64/65 converted via snapshots
    assert frames.events["plane"].nunique() >= 10  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "name",
    [
        "perfetto_test_android_b2b_async_begin.pftrace",
        "perfetto_test_track_event_with_atrace.pftrace",
    ],
)
def test_perfetto_synthetic_atrace_prints(name: str) -> None:
    frames, n = notes(f"synthetic/{name}")
    assert n["print"] >= 2 and len(frames.events) >= 1  # type: ignore[attr-defined]


def test_kernel_tmw_counters() -> None:
    frames, n = notes("synthetic/perfetto_test_kernel_tmw_counter.pftrace")
    assert n["g2d_tracing_mark_write"] == 7
    assert len(frames.counters) >= 1  # type: ignore[attr-defined]
