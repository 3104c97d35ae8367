"""Pod-size figures: a host (or group) × step heat map with zoom, each category's spread
across hosts, and step time as the pod's median and spread with its outliers drawn."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from podscope.app.figures.margins import reserve
from podscope.app.figures.pod import COLORS, LABELS, step_time_line

#: What the heat map can show, as the picker names it.
METRIC_LABELS = {
    "step_time": "Step time",
    "lateness": "Lateness (after the others' median)",
    **LABELS,
}
#: The heat map's height: a row of at least this many pixels up to the figure's cap.
ROW_PX, MAX_HEIGHT = 14, 820


def host_heatmap_figure(
    grid: pd.DataFrame, metric: str, rows_are: str, zoom: tuple[float, ...] | None = None
) -> go.Figure:
    """``grid``: rows (hosts or groups) × steps in ms (``analyzers.hosts``); ``zoom``: the
    x and y ranges (x0, x1, y0, y1) the user zoomed to, kept in the URL."""
    fig = go.Figure(
        go.Heatmap(
            z=grid.to_numpy(),
            x=grid.columns.tolist(),
            y=[str(i) for i in grid.index],
            colorscale="Reds",
            colorbar={"title": "ms"},
            hovertemplate=f"{rows_are} %{{y}}<br>step %{{x}}: %{{z:.3f}} ms<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"{METRIC_LABELS.get(metric, metric)} per {rows_are} and step (ms); drag to zoom",
        xaxis_title="step",
        height=min(MAX_HEIGHT, 160 + ROW_PX * len(grid)),
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
        uirevision=metric,
    )
    fig.update_yaxes(autorange="reversed", type="category")
    if zoom is not None and len(zoom) == 4:
        fig.update_xaxes(range=[zoom[0], zoom[1]])
        fig.update_yaxes(range=[zoom[2], zoom[3]], autorange=False)
    return reserve(fig)


def distribution_figure(dist: pd.DataFrame) -> go.Figure:
    """Each category's per-host mean across hosts (``analyzers.hosts.category_distribution``):
    a bar from p5 to p95, a darker one from p25 to p75, the median, and the maximum with its
    host named on hover."""
    fig = go.Figure()
    if dist.empty:
        return fig
    names = [METRIC_LABELS.get(c, c) for c in dist["category"]]
    colors = [COLORS.get(c, "#6c757d") for c in dist["category"]]
    for low, high, opacity in (("p5", "p95", 0.35), ("p25", "p75", 1.0)):
        fig.add_trace(
            go.Bar(
                y=names,
                x=dist[f"{high}_ms"] - dist[f"{low}_ms"],
                base=dist[f"{low}_ms"],
                orientation="h",
                marker_color=colors,
                opacity=opacity,
                name=f"{low}–{high}",
                hovertemplate=f"%{{y}}: {low} %{{base:.3f}} ms, %{{x:.3f}} ms wide<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            y=names,
            x=dist["median_ms"],
            mode="markers",
            marker={"symbol": "line-ns-open", "size": 18, "color": "#212529"},
            name="median",
            hovertemplate="%{y}: median %{x:.3f} ms<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            y=names,
            x=dist["max_ms"],
            mode="markers",
            marker={"symbol": "x", "size": 9, "color": "#dc3545"},
            customdata=dist["max_host"],
            name="max",
            hovertemplate="%{y}: max %{x:.3f} ms on %{customdata}<extra></extra>",
        )
    )
    fig.update_layout(
        title="Each category across hosts: p5–p95, p25–p75, median and maximum (ms per step)",
        barmode="overlay",
        xaxis_title="ms per step",
        height=120 + 36 * len(dist),
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
        legend={"orientation": "h", "x": 0, "y": -0.25},
    )
    fig.update_yaxes(autorange="reversed")
    return reserve(fig)


def median_band(
    fig: go.Figure,
    x: object,
    lines: tuple[object, object, object],
    *,
    band: str,
    median: str,
    color: str,
    hover: str,
) -> None:
    """Adds a median line inside its band: ``lines`` are the low edge, the median and the high
    edge over ``x`` (the pod's step-time spread, the watched job's workers per minute)."""
    low, middle, high = lines
    fig.add_trace(
        go.Scatter(x=x, y=high, mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip")
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=low,
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=color,
            opacity=0.2,
            name=band,
            hovertemplate=f"{band}: low {hover}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=middle,
            mode="lines",
            line={"color": color, "width": 2},
            name=median,
            hovertemplate=f"{median}: {hover}<extra></extra>",
        )
    )


def step_spread_figure(pod: pd.DataFrame, shown: list[str]) -> go.Figure:
    """Step time per step across hosts: the median line in a p5–p95 band, and the lines of
    ``shown`` hosts (the outliers), so that 512 hosts draw as a handful of lines."""
    fig = go.Figure()
    if pod.empty:
        return fig
    per_step = pod.assign(ms=pod["step_time_ns"].astype(float) / 1e6).groupby("step")["ms"]
    q = per_step.quantile([0.05, 0.5, 0.95]).unstack()
    median_band(
        fig,
        q.index,
        (q[0.05], q[0.5], q[0.95]),
        band="p5–p95 of hosts",
        median="median host",
        color="#1f77b4",
        hover="step %{x}: %{y:.3f} ms",
    )
    named = pod[pod["worker"].astype(str).isin(shown)].sort_values("step")
    for worker, g in named.groupby(named["worker"].astype(str)):
        fig.add_trace(step_time_line(str(worker), g))
    fig.update_layout(
        title="Step time: the pod's median and spread, and its outliers",
        xaxis_title="step",
        yaxis_title="ms",
        height=320,
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
    )
    return reserve(fig)
