"""Timeline figure with server-side level of detail.

Whatever the zoom, at most ``max_shapes`` bars reach the browser: events wide enough to see
(≥ one pixel of the window) are drawn as bars, the longest first up to the budget; the rest of
each track is summarised as density bars (share of each pixel column that is busy). Per session
the events are indexed once (``TimelineIndex``: numpy columns, integer track codes), so a
redraw is a few vectorized passes, never per-event Python.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from analyzers.timeline import TimelineIndex

PIXELS = 1600
MAX_SHAPES = 20_000


def timeline_figure(
    index: TimelineIndex,
    t0: int,
    t1: int,
    base: int,
    *,
    worker: str | None = None,
    highlight: str = "",
    max_shapes: int = MAX_SHAPES,
) -> go.Figure:
    """Bars for visible events, density bars for the sub-pixel rest.

    Args:
        index: the session's events (``TimelineIndex.build``).
        t0, t1: window in epoch ns.
        base: time origin of the x axis (the session's first event), so zoom ranges stay
            comparable across redraws.
        worker: only this worker's tracks (None: all).
        highlight: a substring; matching events are drawn in red.
        max_shapes: upper bound on bars sent to the browser.
    """
    sel = (index.start < t1) & (index.end > t0)
    if worker:
        keep_tracks = np.array([w == worker for w in index.worker_of_track], dtype=bool)
        sel &= keep_tracks[index.track]
    idx = np.flatnonzero(sel)
    pixel_ns = max(1, (t1 - t0) // PIXELS)
    dur = index.end[idx] - index.start[idx]
    wide = dur >= pixel_ns
    if wide.sum() > max_shapes:
        cut = np.argpartition(-np.where(wide, dur, -1), max_shapes)[:max_shapes]
        wide = np.zeros(len(idx), dtype=bool)
        wide[cut] = True
    used = np.unique(index.track[idx])
    labels = np.array(index.tracks, dtype=object)
    fig = go.Figure()
    bars = idx[wide]
    if len(bars):
        hot = index.matching(highlight)[bars] if highlight else np.zeros(len(bars), dtype=bool)
        fig.add_trace(
            go.Bar(
                name="events",
                orientation="h",
                y=labels[index.track[bars]],
                base=(index.start[bars] - base) / 1e6,
                x=(index.end[bars] - index.start[bars]) / 1e6,
                marker={"color": np.where(hot, "#d62728", "#4c78a8"), "line": {"width": 0}},
                customdata=np.stack(
                    [index.rows[bars], index.names.to_numpy()[index.name[bars]]], axis=1
                ),
                hovertemplate="%{customdata[1]}<br>%{x:.3f} ms<extra></extra>",
            )
        )
    small = idx[~wide]
    n_dense = 0
    if len(small):
        col = ((index.start[small] - t0) // pixel_ns).clip(0, PIXELS - 1)
        busy = np.bincount(
            index.track[small].astype(np.int64) * PIXELS + col,
            weights=index.end[small] - index.start[small],
            minlength=len(index.tracks) * PIXELS,
        )
        cells = np.flatnonzero(busy)
        tr, cl = cells // PIXELS, cells % PIXELS
        n_dense = len(np.unique(tr))
        fig.add_trace(
            go.Bar(
                name="dense (sub-pixel events)",
                orientation="h",
                y=labels[tr],
                base=(t0 + cl * pixel_ns - base) / 1e6,
                x=np.full(len(cells), pixel_ns / 1e6),
                marker={"color": "#9ecae1", "opacity": np.clip(busy[cells] / pixel_ns, 0.15, 1.0)},
                hovertemplate="%{y}<br>many short events<extra></extra>",
            )
        )
    order = sorted(labels[used].tolist())
    fig.update_layout(
        barmode="overlay",
        height=120 + 28 * max(1, len(order)),
        showlegend=False,
        xaxis={
            "title": "ms since the session start",
            "range": [(t0 - base) / 1e6, (t1 - base) / 1e6],
        },
        yaxis={"categoryorder": "array", "categoryarray": order[::-1]},
        margin={"l": 10, "r": 10, "t": 30, "b": 40},
        uirevision="timeline",
        meta={"base": int(base), "bars": len(bars), "dense_tracks": n_dense},
    )
    return fig
