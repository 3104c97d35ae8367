"""Hostile Chrome JSON: overflowing numbers, odd types and async floods give a typed error or
a partial result, in time linear in the input."""

from __future__ import annotations

import json
import time

import pytest

from podscope.trace_parsers import TraceParseError
from podscope.trace_parsers.chrome_json import parse_chrome_json


def parse(events: list[object]) -> object:
    return parse_chrome_json(json.dumps(events).encode(), worker="w", source="t.json")


def test_overflowing_times_ids_and_list_args_are_skipped_not_tracebacks() -> None:
    text = (
        b'[{"ph": "X", "name": "inf", "ts": 1e400, "dur": 1, "pid": 1, "tid": 1},'
        b'{"ph": "X", "name": "far", "ts": 1e20, "dur": 1, "pid": 1, "tid": 1},'
        b'{"ph": "X", "name": "huge pid", "ts": 5, "dur": 1e400, "pid": 1e20, "tid": 1},'
        b'{"ph": "C", "name": "c", "ts": 6, "pid": 1, "args": [1, 2]},'
        b'{"ph": "X", "name": "ok", "ts": 7, "dur": 2, "pid": 1, "tid": 1}]'
    )
    frames = parse_chrome_json(text, worker="w", source="t.json")
    names = set(frames.events["name"].astype(str))
    assert {"ok", "huge pid"} <= names and "inf" not in names and "far" not in names
    notes = dict(zip(frames.parse_notes["key"], frames.parse_notes["value"], strict=False))
    assert notes.get("bad_ts", 0) == 2 and notes.get("bad_counter", 0) == 1


def test_name_less_async_ends_match_in_linear_time() -> None:
    n = 20_000
    begins = [
        {"ph": "b", "name": f"a{i}", "cat": "c", "id": i, "ts": i, "pid": 1} for i in range(n)
    ]
    # ended newest first: a scan over the open slices from the oldest is quadratic
    ends = [{"ph": "e", "cat": "c", "id": i, "ts": 2 * n - i, "pid": 1} for i in reversed(range(n))]
    t = time.monotonic()
    frames = parse([*begins, *ends])
    assert time.monotonic() - t < 10  # was 47.7 s: each end scanned every open slice
    assert (frames.events["name"].astype(str).str.startswith("a")).sum() == n


def test_only_garbage_is_a_typed_error() -> None:
    with pytest.raises(TraceParseError):
        parse_chrome_json(b'{"traceEvents": 3}', worker="w", source="t.json")
