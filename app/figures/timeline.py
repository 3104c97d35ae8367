"""Timeline figure with server-side level of detail.

Whatever the zoom, at most ``max_shapes`` shapes reach the browser: events wide enough to see
(≥ one pixel of the window) are drawn as bars, up to the budget by duration; the rest of each
track is summarised as density bars (share of each pixel column that is busy).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

PIXELS = 1600
MAX_SHAPES = 20_000


def track_names(events: pd.DataFrame) -> pd.Series:
    """Track label per event: worker / plane / line."""
    return (
        events["worker"].astype(str)
        + " / "
        + events["plane"].astype(str)
        + " / "
        + events["line"].astype(str)
    )


def window_events(events: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame:
    """Events overlapping [t0, t1) (ns)."""
    end = events["start_ns"] + events["dur_ps"] // 1000
    return events[(events["start_ns"] < t1) & (end > t0)]


def timeline_figure(
    events: pd.DataFrame,
    t0: int,
    t1: int,
    base: int,
    highlight: str = "",
    max_shapes: int = MAX_SHAPES,
) -> go.Figure:
    """Bars for visible events, density bars for the sub-pixel rest.

    Args:
        events: events of the tracks to draw (already filtered by worker etc.).
        t0, t1: window in epoch ns.
        base: time origin of the x axis (the session's first event), so zoom ranges stay
            comparable across redraws.
        highlight: a substring; matching events are drawn in red.
        max_shapes: upper bound on bars sent to the browser.
    """
    ev = window_events(events, t0, t1)
    tracks = track_names(ev)
    order = sorted(tracks.unique())
    pixel_ns = max(1, (t1 - t0) // PIXELS)
    dur_ns = ev["dur_ps"].to_numpy() // 1000
    wide = dur_ns >= pixel_ns
    if wide.sum() > max_shapes:
        keep = np.argsort(-dur_ns * wide)[:max_shapes]
        mask = np.zeros(len(ev), dtype=bool)
        mask[keep] = True
        wide = mask
    fig = go.Figure()
    bars = ev[wide]
    if len(bars):
        name = bars["name"].astype(str)
        color = (
            np.where(name.str.contains(highlight, regex=False), "#d62728", "#4c78a8")
            if highlight
            else "#4c78a8"
        )
        fig.add_trace(
            go.Bar(
                name="events",
                orientation="h",
                y=tracks[wide],
                base=(bars["start_ns"] - base) / 1e6,
                x=bars["dur_ps"] / 1e9,
                marker={"color": color, "line": {"width": 0}},
                customdata=np.stack([bars.index.to_numpy(), name.to_numpy()], axis=1),
                hovertemplate="%{customdata[1]}<br>%{x:.3f} ms<extra></extra>",
            )
        )
    small = ev[~wide]
    if len(small):
        tr = tracks[~wide].to_numpy()
        col = ((small["start_ns"].to_numpy() - t0) // pixel_ns).clip(0, PIXELS - 1)
        key = pd.DataFrame({"track": tr, "col": col, "busy": small["dur_ps"].to_numpy() / 1000})
        dens = key.groupby(["track", "col"])["busy"].sum().reset_index()
        fig.add_trace(
            go.Bar(
                name="dense (sub-pixel events)",
                orientation="h",
                y=dens["track"],
                base=dens["col"] * pixel_ns / 1e6 + (t0 - base) / 1e6,
                x=np.full(len(dens), pixel_ns / 1e6),
                marker={"color": "#9ecae1", "opacity": np.clip(dens["busy"] / pixel_ns, 0.15, 1.0)},
                hovertemplate="%{y}<br>many short events<extra></extra>",
            )
        )
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
    )
    n_dense = int(len(small) and pd.Series(tracks[~wide]).nunique())
    fig.update_layout(meta={"base": int(base), "bars": int(wide.sum()), "dense_tracks": n_dense})
    return fig
