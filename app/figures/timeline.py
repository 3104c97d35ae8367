"""Timeline figure: a flame chart per track with server-side level of detail.

Each worker shown has its tracks (plane › line); an event is drawn in its track at its nesting
depth, coloured by category (its op type, else the head of its name), with its name on the bar
where it fits. Whatever the zoom, at most ``max_shapes`` bars reach the browser: search hits
first (at least a pixel wide), then events at least a pixel wide, longest first; the rest of
each row is summarised as density cells (the share of each pixel column that is busy). Step
boundaries of each worker and the selected step are drawn over its rows. Counter tracks
(Android: CPU frequency, idle state) are step lines, each scaled to its own range over the
capture, so that zooming never rescales them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analyzers.timeline import COUNTER_PLANE, TimelineIndex
from app.units import fmt_duration

PIXELS = 1600
MAX_SHAPES = 20_000
#: Step boundaries drawn per redraw at most (more would be a wall of lines).
MAX_STEP_LINES = 400
ROW_PX = 20
#: Rows a counter track takes.
COUNTER_ROWS = 2
#: Colours by category (Tableau 20, darker half first: names stay readable in white).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
)
HIT = "#ffd400"
DENSE = "#9ecae1"
CHAR_PX = 6.5


def colour_of(category: str) -> str:
    """A stable colour per category (by a hash of its name, as Perfetto does)."""
    digest = hashlib.blake2b(category.encode(), digest_size=2).digest()
    return PALETTE[int.from_bytes(digest, "big") % len(PALETTE)]


@dataclass(frozen=True)
class Layout:
    """Rows of the chart: per worker index, the first row of each of its tracks."""

    first_row: list[np.ndarray]
    bands: list[tuple[int, int]]
    ticks: list[int]
    labels: list[str]
    n_rows: int
    counter_row: list[np.ndarray]

    @classmethod
    def of(cls, indexes: Sequence[TimelineIndex], hidden: set[str]) -> Layout:
        first_rows, counter_rows, bands, ticks, labels, row = [], [], [], [], [], 0
        for index in indexes:
            first = np.full(len(index.labels), -1, dtype=np.int64)
            top = row
            for t in np.argsort(index.labels, kind="stable"):
                if _plane_of(index.labels[t]) in hidden:
                    continue
                first[t] = row
                ticks.append(row)
                labels.append(index.labels[t])
                row += int(index.max_depth[t]) + 1
            counter = np.full(len(index.counters.labels), -1, dtype=np.int64)
            for t, label in enumerate(index.counters.labels):
                if COUNTER_PLANE not in hidden:
                    counter[t] = row
                    ticks.append(row)
                    labels.append(label)
                    row += COUNTER_ROWS
            first_rows.append(first)
            counter_rows.append(counter)
            bands.append((top, row - 1))
        return cls(first_rows, bands, ticks, labels, row, counter_rows)


def _plane_of(label: str) -> str:
    """``w0 › GPU:0 › Stream #1`` → ``GPU:0``."""
    parts = label.split(" › ")
    return parts[1] if len(parts) > 2 else ""


def _name_text(names: np.ndarray, px: np.ndarray) -> list[str]:
    """Each name cut to the bar's width (empty where not even a few characters fit)."""
    out = []
    for name, width in zip(names, px, strict=True):
        fit = int((width - 6) / CHAR_PX)
        out.append(name if len(name) <= fit else (name[: fit - 1] + "…") if fit >= 4 else "")
    return out


def timeline_figure(
    indexes: Sequence[TimelineIndex],
    t0: int,
    t1: int,
    base: int,
    *,
    highlight: str = "",
    steps: pd.DataFrame | None = None,
    selected_step: int | None = None,
    hidden_planes: Sequence[str] = (),
    max_shapes: int = MAX_SHAPES,
) -> go.Figure:
    """The flame chart of ``indexes`` (one per worker shown) in the window [t0, t1).

    Args:
        indexes: the workers' indexes (``SessionAnalysis.timeline``), top to bottom.
        t0, t1: window in epoch ns.
        base: time origin of the x axis (the session's first event), so zoom ranges stay
            comparable across redraws.
        highlight: a substring (any case); matching events are drawn in yellow, the others
            dimmed, and hits are drawn even when narrower than a pixel.
        steps: aligned steps (``worker, step, start_ns, end_ns``) to mark per worker.
        selected_step: this aligned step is shaded.
        hidden_planes: planes (``CPU``, ``GPU:0``) whose tracks are collapsed away.
        max_shapes: upper bound on bars sent to the browser.
    """
    rows = Layout.of(indexes, set(hidden_planes))
    pixel_ns = max(1, (t1 - t0) // PIXELS)
    cand: list[dict[str, np.ndarray]] = []
    for i, index in enumerate(indexes):
        first = rows.first_row[i]
        sel = np.flatnonzero((index.start < t1) & (index.end > t0) & (first[index.track] >= 0))
        hits = index.matching(highlight)[sel] if highlight else np.zeros(len(sel), dtype=bool)
        cand.append(
            {
                "worker": np.full(len(sel), i),
                "at": sel,
                "y": first[index.track[sel]] + index.depth[sel],
                "start": index.start[sel],
                "dur": index.end[sel] - index.start[sel],
                "hit": hits,
            }
        )
    c = {k: np.concatenate([x[k] for x in cand]) for k in cand[0]} if cand else {}
    n = len(c["at"]) if c else 0
    # hits first, then the widest: a score that orders them so
    score = (
        np.where(c["hit"], np.iinfo(np.int64).max, np.where(c["dur"] >= pixel_ns, c["dur"], -1))
        if n
        else np.array([])
    )
    drawn = score >= 0 if n else np.zeros(0, dtype=bool)
    # density cells of the sub-pixel rows get up to a quarter of the budget
    dense_rows = len(np.unique(c["y"][~drawn])) if n else 0
    bar_budget = max_shapes - min(max_shapes // 4, dense_rows * PIXELS)
    if drawn.sum() > bar_budget:
        keep = np.argpartition(-score, bar_budget)[:bar_budget]
        drawn = np.zeros(n, dtype=bool)
        drawn[keep] = True
    fig = go.Figure()
    n_bars = int(drawn.sum())
    if n_bars:
        fig.add_trace(_bars(indexes, c, drawn, base, pixel_ns, bool(highlight)))
    dense_rows = _density(fig, c, ~drawn, t0, t1, base, pixel_ns, max_shapes - n_bars)
    _counters(fig, indexes, rows, t0, t1, base, pixel_ns)
    shapes = _step_marks(indexes, rows, steps, selected_step, t0, t1, base)
    fig.update_layout(
        barmode="overlay",
        height=90 + ROW_PX * max(4, rows.n_rows),
        showlegend=False,
        xaxis={
            "title": {"text": "ms since the session start", "standoff": 4},
            "range": [(t0 - base) / 1e6, (t1 - base) / 1e6],
            "side": "top",
        },
        yaxis={
            "tickvals": rows.ticks,
            "ticktext": rows.labels,
            "range": [rows.n_rows - 0.5, -0.5],
            "fixedrange": True,
            "showgrid": False,
            "zeroline": False,
            "automargin": True,
        },
        shapes=shapes,
        uniformtext={"minsize": 8, "mode": "hide"},
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        # the window is the server's to set: a new window wins over what Plotly kept (an
        # autorange after a double click would range over the bars drawn, not the capture)
        uirevision=f"{t0}:{t1}",
        dragmode="zoom",
        meta={
            "base": int(base),
            "bars": n_bars,
            "dense_tracks": dense_rows,
            "hits": int(c["hit"].sum()) if n else 0,
            "rows": rows.n_rows,
        },
    )
    return fig


def _bars(
    indexes: Sequence[TimelineIndex],
    c: dict[str, np.ndarray],
    drawn: np.ndarray,
    base: int,
    pixel_ns: int,
    searching: bool,
) -> go.Bar:
    sel = {k: v[drawn] for k, v in c.items()}
    start = sel["start"]
    name = np.empty(len(start), dtype=object)
    category = np.empty(len(start), dtype=object)
    row = np.empty(len(start), dtype=np.int64)
    worker = np.empty(len(start), dtype=object)
    for i, index in enumerate(indexes):
        mine = sel["worker"] == i
        at = sel["at"][mine]
        name[mine] = index.names.to_numpy(dtype=object)[index.name[at]]
        category[mine] = np.asarray(index.categories, dtype=object)[index.category[at]]
        row[mine] = index.rows[at]
        worker[mine] = index.worker
    dur = sel["dur"]
    shown = np.maximum(dur, pixel_ns)  # a hit narrower than a pixel still shows
    hot = sel["hit"]
    colours = np.where(hot, HIT, [colour_of(str(k)) for k in category])
    custom = np.stack(
        [
            worker,
            row,
            name,
            category,
            [fmt_duration(float(d)) for d in dur],
            [fmt_duration(float(s - base)) for s in start],
        ],
        axis=1,
    )
    return go.Bar(
        name="events",
        orientation="h",
        y=sel["y"],
        base=(start - base) / 1e6,
        x=shown / 1e6,
        width=0.9,
        marker={
            "color": colours,
            "opacity": np.where(hot | (not searching), 1.0, 0.35),
            "line": {"width": np.where(hot, 1.0, 0.0), "color": "#000"},
        },
        text=_name_text(name, shown / pixel_ns),
        textposition="inside",
        insidetextanchor="start",
        textfont={"size": 10, "color": np.where(hot, "#000", "#fff")},
        cliponaxis=True,
        customdata=custom,
        hovertemplate="<b>%{customdata[2]}</b><br>%{customdata[3]} · %{customdata[4]}"
        "<br>starts at %{customdata[5]} · %{customdata[0]}<extra></extra>",
    )


def _density(
    fig: go.Figure,
    c: dict[str, np.ndarray],
    rest: np.ndarray,
    t0: int,
    t1: int,
    base: int,
    pixel_ns: int,
    budget: int,
) -> int:
    """Adds density cells for the events not drawn; returns the rows that have some."""
    if not len(rest) or not rest.any() or budget <= 0:
        return 0
    y, starts, dur = c["y"][rest], c["start"][rest], c["dur"][rest]
    n_rows = len(np.unique(y))
    columns = int(max(1, min(PIXELS, budget // max(1, n_rows))))
    cell_ns = max(pixel_ns, (t1 - t0) // columns + 1)
    col = ((starts - t0) // cell_ns).clip(0, columns - 1)
    key = y.astype(np.int64) * columns + col
    cells, inverse = np.unique(key, return_inverse=True)
    busy = np.bincount(inverse, weights=np.minimum(dur, cell_ns).astype(float))
    fig.add_trace(
        go.Bar(
            name="dense (sub-pixel events)",
            orientation="h",
            y=cells // columns,
            base=(t0 + (cells % columns) * cell_ns - base) / 1e6,
            x=np.full(len(cells), cell_ns / 1e6),
            width=0.9,
            marker={"color": DENSE, "opacity": np.clip(busy / cell_ns, 0.15, 1.0)},
            hovertemplate="many short events (zoom in)<extra></extra>",
        )
    )
    return n_rows


def counter_text(name: str, value: float) -> str:
    """A counter's value in its unit: ftrace's ``cpu_frequency`` is in kHz; ``cpu_idle`` -1
    means the CPU is running."""
    if name.startswith("cpu_frequency"):
        return f"{value / 1e6:.2f} GHz" if value >= 1e6 else f"{value / 1e3:.0f} MHz"
    if name.startswith("cpu_idle"):
        return "running" if value < 0 else f"idle state {value:.0f}"
    return f"{value:,.6g}"


def _counters(
    fig: go.Figure,
    indexes: Sequence[TimelineIndex],
    rows: Layout,
    t0: int,
    t1: int,
    base: int,
    pixel_ns: int,
) -> None:
    """Adds the counter tracks shown as one step-line trace: per track the samples in the
    window (and the one before it, the value at t0), at most one per pixel."""
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    texts: list[np.ndarray] = []
    for index, first in zip(indexes, rows.counter_row, strict=True):
        c = index.counters
        for t, row in enumerate(first):
            if row < 0:
                continue
            lo, hi = np.searchsorted(c.track, [t, t + 1])
            times, values = c.t[lo:hi], c.value[lo:hi]
            a = max(0, int(np.searchsorted(times, t0)) - 1)
            b = int(np.searchsorted(times, t1))
            wt, wv = times[a:b], values[a:b]
            if not len(wt):
                continue
            pixel = (wt - t0) // pixel_ns
            keep = np.append(pixel[1:] != pixel[:-1], True)  # the last sample per pixel
            wt, wv = np.append(wt[keep], t1), np.append(wv[keep], wv[keep][-1])
            vmin, vmax = float(values.min()), float(values.max())
            frac = (wv - vmin) / (vmax - vmin) if vmax > vmin else np.full(len(wv), 0.5)
            ys.append(np.append(row + COUNTER_ROWS - 0.6 - frac * (COUNTER_ROWS - 0.8), np.nan))
            xs.append(np.append((wt - base) / 1e6, np.nan))
            name = c.labels[t].rsplit(" › ", 1)[-1]
            texts.append(np.array([f"{name}: {counter_text(name, v)}" for v in wv] + [""]))
    if not xs:
        return
    fig.add_trace(
        go.Scatter(
            name="counters",
            x=np.concatenate(xs),
            y=np.concatenate(ys),
            mode="lines",
            line={"shape": "hv", "width": 1.5, "color": "#3182bd"},
            fill=None,
            text=np.concatenate(texts),
            hovertemplate="%{text}<extra></extra>",
            connectgaps=False,
        )
    )


def _step_marks(
    indexes: Sequence[TimelineIndex],
    rows: Layout,
    steps: pd.DataFrame | None,
    selected: int | None,
    t0: int,
    t1: int,
    base: int,
) -> list[dict[str, object]]:
    """Per worker shown: a dotted line at each step start in the window, and the selected
    step shaded over the worker's rows."""
    if steps is None or steps.empty:
        return []
    shapes: list[dict[str, object]] = []
    for index, (top, bottom) in zip(indexes, rows.bands, strict=True):
        if bottom < top:
            continue
        mine = steps[steps["worker"].astype(str) == index.worker]
        band = {"yref": "y", "y0": top - 0.5, "y1": bottom + 0.5, "xref": "x"}
        for r in mine[mine["step"] == selected].itertuples():
            shapes.append(
                {
                    "type": "rect",
                    **band,
                    "x0": (r.start_ns - base) / 1e6,
                    "x1": (r.end_ns - base) / 1e6,
                    "fillcolor": "rgba(255, 170, 0, 0.15)",
                    "line": {"color": "rgba(255, 140, 0, 0.9)", "width": 1},
                    "layer": "below",
                }
            )
        inside = mine[(mine["start_ns"] >= t0) & (mine["start_ns"] <= t1)]
        if len(inside) <= MAX_STEP_LINES:
            shapes += [
                {
                    "type": "line",
                    **band,
                    "x0": (s - base) / 1e6,
                    "x1": (s - base) / 1e6,
                    "line": {"color": "rgba(80, 80, 80, 0.6)", "width": 1, "dash": "dot"},
                }
                for s in inside["start_ns"].to_numpy()
            ]
        if top > 0:  # a rule between workers
            shapes.append(
                {
                    "type": "line",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "yref": "y",
                    "y0": top - 0.5,
                    "y1": top - 0.5,
                    "line": {"color": "#444", "width": 1},
                }
            )
    return shapes
