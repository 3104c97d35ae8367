"""Timeline figure: a flame chart per track with server-side level of detail.

Each worker shown has its tracks (plane › line); an event is drawn in its track at its nesting
depth, coloured by category (its op type, else the head of its name), with its name on the bar
where it fits. Whatever the zoom, at most ``max_shapes`` bars and density cells reach the
browser: search hits first (at least a pixel wide), then events at least a pixel wide, longest
first, from the index's multi-resolution window query (``TimelineIndex.window``); the rest of
each row is summarised as density cells (the share of each cell that is busy). They are sent as
columns of numbers and drawn on a canvas (``assets/timeline_canvas.js``), for the window and a
window's width on each side: Plotly, which took 0.6-1.7 s to draw 16 k SVG bars, keeps only the
axes, the selected step and the counters. Step boundaries of each worker are dotted on the
canvas. Counter tracks (Android: CPU frequency, idle state) are step lines, each scaled to its
own range over the capture, so that zooming never rescales them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from podscope.analyzers.timeline import COUNTER_PLANE, TimelineIndex
from podscope.app.figures.margins import edge_px, labels_px, ticks

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
    """The flame chart of ``indexes`` (one per worker shown) for the window [t0, t1).

    Plotly draws the axes, the row labels, the selected step and the counters; the bars and
    density cells go to the browser as numbers in ``layout.meta["tl"]`` and are drawn on a
    canvas over the plot (``assets/timeline_canvas.js``), for the window and one window's
    width on each side, so that zooming in up to ``REFINE`` times and panning within that
    range are redrawn in the browser without asking the server.

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
        max_shapes: upper bound on bars and density cells sent to the browser.
    """
    rows = Layout.of(indexes, set(hidden_planes))
    span = max(1, t1 - t0)
    f0, f1 = t0 - span, t1 + span  # what the browser can pan over without a request
    pixel_ns = max(1, span // PIXELS)
    bars, sub = _candidates(indexes, rows, f0, f1, pixel_ns, highlight)
    n = len(bars["at"])
    # hits first, then the widest: a score that orders them so
    score = np.where(bars["hit"], np.iinfo(np.int64).max, bars["dur"]) if n else np.zeros(0)
    bar_budget = max_shapes - min(max_shapes // 4, _distinct(sub["y"]) * PIXELS)
    drawn = np.ones(n, dtype=bool)
    if n > bar_budget:
        drawn[:] = False
        drawn[np.argpartition(-score, bar_budget)[:bar_budget]] = True
    rest = (  # the narrow events, and the bars over budget (a copy only when there are some)
        sub
        if drawn.all()
        else {k: np.concatenate([v[~drawn], sub[k]]) for k, v in bars.items() if k in sub}
    )
    tl = _payload(indexes, {k: v[drawn] for k, v in bars.items()}, base, bool(highlight))
    dense = _density(rest, f0, f1, base, pixel_ns, max_shapes - int(drawn.sum()))
    fig = go.Figure()
    _counters(fig, indexes, rows, t0, t1, base, pixel_ns)
    shapes = _step_marks(indexes, rows, steps, selected_step, base)
    fig.update_layout(
        height=90 + ROW_PX * max(4, rows.n_rows),
        showlegend=False,
        xaxis={
            "title": {"text": "ms since the session start", "standoff": 4},
            "range": [(t0 - base) / 1e6, (t1 - base) / 1e6],
            "side": "top",
            "showgrid": True,
            "zeroline": False,
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
        # the track names' room before plotly.js lays it out (``figures.margins``)
        margin={
            "l": max(10, labels_px(rows.labels)),
            "r": max(10, edge_px(ticks([(t0 - base) / 1e6, (t1 - base) / 1e6]))),
            "t": 40,
            "b": 10,
        },
        plot_bgcolor="#f8f9fb",
        # the window is the server's to set: a new window wins over what Plotly kept (an
        # autorange after a double click would range over what is drawn, not the capture)
        uirevision=f"{t0}:{t1}",
        dragmode="zoom",
        meta={
            "base": int(base),
            "base_ns": str(int(base)),  # exact in the browser (a double is not, past 2**53)
            "bars": int(drawn.sum()),
            "dense_tracks": dense["tracks"],
            "hits": int(bars["hit"].sum()),
            "rows": rows.n_rows,
            "tl": {
                **tl,
                "dense": dense,
                "steps": _step_lines(indexes, rows, steps, f0, f1, base),
                "fetched": [(f0 - base) / 1e6, (f1 - base) / 1e6],
                "pixel_ms": pixel_ns / 1e6,
                "searching": bool(highlight),
            },
        },
    )
    return fig


def _distinct(rows: np.ndarray) -> int:
    """How many distinct (small, non-negative) row numbers ``rows`` holds."""
    return int(np.count_nonzero(np.bincount(rows.astype(np.int64)))) if len(rows) else 0


#: Zooming in more than this many times past what the server sent asks it for finer bars.
REFINE = 4


def _candidates(
    indexes: Sequence[TimelineIndex],
    rows: Layout,
    f0: int,
    f1: int,
    pixel_ns: int,
    highlight: str,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The events in [f0, f1) on rows shown: those at least a pixel wide (and every search
    hit) as bar candidates, the narrower ones for the density cells, from each index's
    multi-resolution window query."""
    bars: list[dict[str, np.ndarray]] = []
    sub: list[dict[str, np.ndarray]] = []
    for i, index in enumerate(indexes):
        first = rows.first_row[i]
        wide = index.window(f0, f1, pixel_ns)
        narrow = index.window(f0, f1, pixel_ns, below=True)
        hit_wide = index.matching(highlight)[wide] if highlight else np.zeros(len(wide), bool)
        if highlight:  # a hit narrower than a pixel is still drawn as a bar
            hit_narrow = index.matching(highlight)[narrow]
            wide = np.concatenate([wide, narrow[hit_narrow]])
            hit_wide = np.concatenate([hit_wide, np.ones(int(hit_narrow.sum()), bool)])
            narrow = narrow[~hit_narrow]
        for at, out, hit in ((wide, bars, hit_wide), (narrow, sub, None)):
            at = at[first[index.track[at]] >= 0]
            hit = hit[first[index.track[wide]] >= 0] if hit is not None else None
            out.append(
                {
                    "worker": np.full(len(at), i),
                    "at": at,
                    "y": first[index.track[at]] + index.depth[at],
                    "start": index.start[at],
                    "dur": index.end[at] - index.start[at],
                    **({"hit": hit} if hit is not None else {}),
                }
            )
    empty = {k: np.zeros(0, np.int64) for k in ("worker", "at", "y", "start", "dur")}
    b = _joined(bars) if bars else {**empty}
    b.setdefault("hit", np.zeros(0, bool))
    return b, _joined(sub) if sub else {**empty}


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The workers' columns one after another (one worker's as they are: a copy of a million
    events' columns cost 30 ms)."""
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([x[k] for x in parts]) for k in parts[0]}


def _payload(
    indexes: Sequence[TimelineIndex], sel: dict[str, np.ndarray], base: int, searching: bool
) -> dict[str, object]:
    """The bars as columns of numbers (times in ms since ``base``), names and categories as
    codes into per-figure tables, colours as codes into ``colors``."""
    names: list[str] = []
    cats: list[str] = []
    name_code = np.zeros(len(sel["at"]), np.int64)
    cat_code = np.zeros(len(sel["at"]), np.int64)
    rows = np.zeros(len(sel["at"]), np.int64)
    for i, index in enumerate(indexes):
        mine = sel["worker"] == i
        at = sel["at"][mine]
        n_codes, n_uniq = pd.factorize(index.name[at])
        name_code[mine] = len(names) + n_codes
        names += [str(index.names[c]) if c < len(index.names) else "?" for c in n_uniq]
        c_codes, c_uniq = pd.factorize(index.category[at])
        cat_code[mine] = len(cats) + c_codes
        cats += [index.categories[c] for c in c_uniq]
        rows[mine] = index.rows[at]
    colours = sorted(set(PALETTE))
    colour = np.array([colours.index(colour_of(c)) for c in cats] + [0], np.int64)[cat_code]
    return {
        "x0": np.round((sel["start"] - base) / 1e6, 6).tolist(),
        "dx": np.round(sel["dur"] / 1e6, 6).tolist(),
        "y": sel["y"].tolist(),
        "c": colour.tolist(),
        "hit": sel["hit"].astype(int).tolist(),
        "n": name_code.tolist(),
        "k": cat_code.tolist(),
        "w": sel["worker"].tolist(),
        "row": rows.tolist(),
        "names": names,
        "cats": cats,
        "colors": colours,
        "hit_color": HIT,
        "workers": [i.worker for i in indexes],
        "dim": searching,
    }


def _density(
    c: dict[str, np.ndarray], f0: int, f1: int, base: int, pixel_ns: int, budget: int
) -> dict[str, object]:
    """Density cells of the events not drawn as bars: per row, the share of each cell that
    is busy (at most ``budget`` cells, at least a pixel wide)."""
    if not len(c["y"]) or budget <= 0:
        return {"y": [], "x0": [], "a": [], "dx": 0.0, "tracks": 0}
    y, starts, dur = c["y"].astype(np.int64), c["start"], c["dur"]
    n_rows = _distinct(y)
    columns = int(max(1, min(3 * PIXELS, budget // max(1, n_rows))))
    cell_ns = max(pixel_ns, (f1 - f0) // columns + 1)
    col = ((starts - f0) // cell_ns).clip(0, columns - 1)
    key = y * columns + col  # rows × columns is small: counted, not sorted
    per_key = np.bincount(key, weights=np.minimum(dur, cell_ns).astype(float))
    cells = np.flatnonzero(np.bincount(key))
    busy = per_key[cells]
    return {
        "y": (cells // columns).tolist(),
        "x0": np.round((f0 + (cells % columns) * cell_ns - base) / 1e6, 6).tolist(),
        "a": np.round(np.clip(busy / cell_ns, 0.15, 1.0), 3).tolist(),
        "dx": cell_ns / 1e6,
        "color": DENSE,
        "tracks": n_rows,
    }


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
    base: int,
) -> list[dict[str, object]]:
    """Plotly shapes: the selected step shaded over each worker's rows, and a rule between
    workers (step starts are drawn on the canvas: ``_step_lines``)."""
    shapes: list[dict[str, object]] = []
    for index, (top, bottom) in zip(indexes, rows.bands, strict=True):
        if bottom < top:
            continue
        if steps is not None and len(steps) and selected is not None:
            mine = steps[
                (steps["worker"].astype(str) == index.worker) & (steps["step"] == selected)
            ]
            shapes += [
                {
                    "type": "rect",
                    "yref": "y",
                    "y0": top - 0.5,
                    "y1": bottom + 0.5,
                    "xref": "x",
                    "x0": (r.start_ns - base) / 1e6,
                    "x1": (r.end_ns - base) / 1e6,
                    "fillcolor": "rgba(255, 170, 0, 0.15)",
                    "line": {"color": "rgba(255, 140, 0, 0.9)", "width": 1},
                    "layer": "below",
                }
                for r in mine.itertuples()
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


def _step_lines(
    indexes: Sequence[TimelineIndex],
    rows: Layout,
    steps: pd.DataFrame | None,
    f0: int,
    f1: int,
    base: int,
) -> list[dict[str, object]]:
    """Per worker shown: its rows and the step starts in [f0, f1] (ms), drawn dotted on the
    canvas; none where there would be more than ``MAX_STEP_LINES`` (a wall of lines)."""
    if steps is None or steps.empty:
        return []
    out: list[dict[str, object]] = []
    for index, (top, bottom) in zip(indexes, rows.bands, strict=True):
        mine = steps[steps["worker"].astype(str) == index.worker]
        inside = mine[(mine["start_ns"] >= f0) & (mine["start_ns"] <= f1)]
        if bottom >= top and 0 < len(inside) <= MAX_STEP_LINES:
            x = np.round((inside["start_ns"].to_numpy() - base) / 1e6, 6)
            out.append({"y0": top - 0.5, "y1": bottom + 0.5, "x": x.tolist()})
    return out
