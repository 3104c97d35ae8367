"""The timeline's level-of-detail index: every event as flat numpy columns with integer track
codes, built once per session, so that a redraw of any window is a few vectorized passes.

    >>> index = TimelineIndex.build(frames.events)
    >>> index.tracks[:2]                     # "worker / plane / line" per track code
    >>> rows = index.rows[index.matching("MatMul")]   # event rows whose name contains MatMul
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class TimelineIndex:
    """Events as flat arrays: times, track code (worker / plane / line), name code."""

    start: np.ndarray
    end: np.ndarray
    track: np.ndarray
    tracks: list[str]
    worker_of_track: list[str]
    name: np.ndarray
    names: pd.Index
    rows: np.ndarray

    @classmethod
    def build(cls, events: pd.DataFrame) -> TimelineIndex:
        cols = [events[c] for c in ("worker", "plane", "line")]
        sizes = [len(c.cat.categories) + 1 for c in cols]
        key = np.zeros(len(events), dtype=np.int64)
        for c, size in zip(cols, sizes, strict=True):
            key = key * size + (c.cat.codes.to_numpy().astype(np.int64) + 1)
        uniq, codes = np.unique(key, return_inverse=True)
        parts = []
        for c, size in zip(reversed(cols), reversed(sizes), strict=True):
            labels = np.append(c.cat.categories.astype(str).to_numpy(dtype=object), "")
            parts.append(labels[(uniq % size) - 1])
            uniq = uniq // size
        uniques = list(zip(*reversed(parts), strict=True))
        tracks = [f"{w} / {p} / {ln}" for w, p, ln in uniques]
        start = events["start_ns"].to_numpy()
        return cls(
            start=start,
            end=start + events["dur_ps"].to_numpy() // 1000,
            track=codes.astype(np.int32),
            tracks=tracks,
            worker_of_track=[str(w) for w, _, _ in uniques],
            name=events["name"].cat.codes.to_numpy(),
            names=events["name"].cat.categories,
            rows=events.index.to_numpy(),
        )

    def matching(self, text: str) -> np.ndarray:
        """Row mask of events whose name contains ``text`` (tested per distinct name)."""
        hit = np.append(np.asarray(self.names.str.contains(text, regex=False), dtype=bool), False)
        return hit[self.name]


#: Event columns shown for one event, in this order (when set).
DETAIL_COLUMNS = (
    "worker",
    "plane",
    "line",
    "name",
    "start_ns",
    "dur_ps",
    "self_ps",
    "depth",
    "step_num",
    "group_id",
    "tf_op",
    "op_type",
    "is_eager",
)


def event_details(events: pd.DataFrame, stats: pd.DataFrame, row: int) -> dict[str, object]:
    """One event's set columns (``DETAIL_COLUMNS``) and its other stats, by name.

    Args:
        events, stats: a session's ``events`` and ``stats`` frames.
        row: an index label of ``events``.

    Returns:
        ``{column or stat key: value}``; a stat's value is its string, integer or float value,
        whichever is set.

    Raises:
        KeyError: ``row`` is not an event of the session.
    """
    ev = events.loc[row]
    fields: dict[str, object] = {k: ev[k] for k in DETAIL_COLUMNS if pd.notna(ev[k])}
    for s in stats[stats["event_row"] == row].itertuples():
        fields[str(s.key)] = next(
            (v for v in (s.str_value, s.int_value, s.float_value) if pd.notna(v)), ""
        )
    return fields
