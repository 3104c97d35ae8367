"""The memory the parsed frames hold."""

from __future__ import annotations

import numpy as np

from podscope.trace_parsers.xplane import parse_xplane
from tests.xspace_builder import SpaceBuilder


def _root_bytes(a: np.ndarray) -> int:
    """Bytes of the buffer an array's memory belongs to (following views to their owner)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    root = a.base
    if root is None:
        return a.nbytes
    return memoryview(root).nbytes


def test_stats_columns_hold_no_more_memory_than_they_show() -> None:
    """Long stats are compacted in place in the decoder's buffers; a column cut from a much
    longer buffer (most stats promoted to event columns, or codes narrowed) is copied."""
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "t")
    for i in range(5000):
        extra = {"note": f"n{i % 3}"} if i % 10 == 0 else {}
        p.event(line, "op", i * 100, 50, step_num=i, group_id=i, correlation_id=i, **extra)
    f = parse_xplane(b.bytes(), worker="w")
    assert len(f.stats) == 500
    for col in f.stats.columns:
        arr = f.stats[col].array
        parts = (
            [arr._codes]
            if hasattr(arr, "_codes")
            else [arr._data, arr._mask]
            if hasattr(arr, "_mask")
            else [np.asarray(arr)]
        )
        for part in parts:
            assert _root_bytes(part) <= part.nbytes / 0.9 + 64, col
