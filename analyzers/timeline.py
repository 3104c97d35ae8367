"""The timeline's index: one worker's events as flat numpy columns (times, track, depth,
name and category codes), built once per worker shown, so that a redraw of any window is a
few vectorized passes.

A track is one (plane, line) of the worker, labelled short (``GPU:0 › Stream #14``); events
nested in a track are drawn at their ``depth`` (a flame chart). Every event has a category,
its TF op type when it has one, else the head of its name (``MemcpyHtoD``, ``Iterator``,
``$python``), which sets its colour.

    >>> index = TimelineIndex.build(worker_events, "w0")
    >>> index.labels[:2]                      # per track: "w0 › CPU › tf_Compute"
    >>> rows = index.rows[index.matching("MatMul")]   # event rows whose name contains MatMul
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

_DIGITS, _ID_SEPARATORS = "0123456789", "/ _:#-"


def _without_long_id(line: str) -> str:
    """``line`` without a trailing id of 6+ digits and the separators before it. String
    methods, not a regex: ``[/ _:#-]*-?\\d{6,}$`` retried from every digit of a long digit run
    (an 80 k-digit line name took 50 s)."""
    head = line.rstrip(_DIGITS)
    return head.rstrip(_ID_SEPARATORS) if len(line) - len(head) >= 6 else line


def short_line(plane: str, line: str) -> str:
    """A track's label without the noise: ``/host:CPU`` → ``CPU``, ``/device:GPU:0`` →
    ``GPU:0``; a line's trailing long numeric id (``tf_Compute/-1481541789699770605``) and
    leading path go."""
    where = plane.rsplit("/", 1)[-1].removeprefix("host:").removeprefix("device:")
    what = _without_long_id(line).rstrip("/") or line
    if "/" in what:
        what = what.rsplit("/", 1)[-1] or what
    return f"{where} › {what}" if where else what


def category_of(name: str) -> str:
    """The head of an event name: ``MemcpyHtoD``, ``Iterator`` for ``Iterator::Map``,
    ``$python`` for Python-tracer events, ``ncclKernel`` for ``ncclKernel_AllReduce_…``."""
    if name.startswith("$"):
        return "$python"
    head = re.split(r"[:(<\s/.]", name, maxsplit=1)[0]
    return head.split("_", 1)[0] if head.startswith("nccl") else head or name[:16]


def _unique(labels: list[str]) -> list[str]:
    """Labels that shortening made equal (threads ``tf_Compute/-14…`` and ``tf_Compute/-92…``)
    numbered apart: ``tf_Compute #1``, ``tf_Compute #2``."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        if counts[label] > 1:
            seen[label] = seen.get(label, 0) + 1
            label = f"{label} #{seen[label]}"
        out.append(label)
    return out


@dataclass(frozen=True)
class TimelineIndex:
    """One worker's events as flat arrays, in start order per track."""

    worker: str
    start: np.ndarray
    end: np.ndarray
    track: np.ndarray
    depth: np.ndarray
    labels: list[str]
    max_depth: np.ndarray
    name: np.ndarray
    names: pd.Index
    category: np.ndarray
    categories: list[str]
    rows: np.ndarray

    @classmethod
    def build(cls, events: pd.DataFrame, worker: str) -> TimelineIndex:
        """The index of ``events`` (one worker's rows; their index labels are kept in
        ``rows`` for ``event_details``)."""
        plane = events["plane"].astype(str).to_numpy()
        line = events["line"].astype(str).to_numpy()
        pairs = pd.MultiIndex.from_arrays([plane, line])
        codes, uniques = pd.factorize(pairs, sort=True)
        labels = _unique([f"{worker} › {short_line(p, ln)}" for p, ln in uniques])
        depth = events["depth"].to_numpy(dtype=np.int64, na_value=0).clip(0, None)
        max_depth = np.zeros(len(uniques), dtype=np.int64)
        np.maximum.at(max_depth, codes, depth)
        names = events["name"].cat.categories
        heads = np.array([category_of(str(n)) for n in names] + ["?"], dtype=object)
        op_type = events["op_type"]
        cat = np.where(
            op_type.notna().to_numpy(),
            op_type.astype(object).to_numpy(),
            heads[events["name"].cat.codes.to_numpy()],
        )
        cat_codes, cat_uniques = pd.factorize(cat)
        start = events["start_ns"].to_numpy()
        return cls(
            worker=worker,
            start=start,
            end=start + events["dur_ps"].to_numpy() // 1000,
            track=codes.astype(np.int32),
            depth=depth,
            labels=labels,
            max_depth=max_depth,
            name=events["name"].cat.codes.to_numpy(),
            names=names,
            category=cat_codes.astype(np.int32),
            categories=[str(c) for c in cat_uniques],
            rows=events.index.to_numpy(),
        )

    def matching(self, text: str) -> np.ndarray:
        """Row mask of events whose name contains ``text``, case-insensitive (tested per
        distinct name)."""
        hit = self.names.str.contains(text, case=False, regex=False)
        return np.append(np.asarray(hit, dtype=bool), False)[self.name]


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
