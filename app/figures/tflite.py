"""TFLite figures: invoke latency over time and its distribution, one invoke's op waterfall,
CPU scheduling of the inference thread."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots


def invoke_latency_figure(invokes: pd.DataFrame) -> go.Figure:
    """Latency (ms) per invoke over time, and its histogram."""
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.7, 0.3],
        subplot_titles=("Invoke latency over time", "Distribution"),
    )
    t0 = invokes["start_ns"].min()
    ms = invokes["dur_ns"] / 1e6
    fig.add_trace(
        go.Scatter(
            x=(invokes["start_ns"] - t0) / 1e6,
            y=ms,
            mode="markers+lines",
            name="invoke",
            customdata=invokes["invoke"],
            hovertemplate="invoke %{customdata}: %{y:.3f} ms<extra></extra>",
        ),
        1,
        1,
    )
    fig.add_trace(go.Histogram(x=ms, nbinsx=30, name="count", marker_color="#4c78a8"), 1, 2)
    fig.update_xaxes(title_text="ms since the first invoke", row=1, col=1)
    fig.update_xaxes(title_text="ms", row=1, col=2)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_layout(height=340, showlegend=False, margin={"l": 10, "r": 10, "t": 40, "b": 40})
    return fig


def waterfall_figure(ops: pd.DataFrame, title: str) -> go.Figure:
    """The op sections of one invoke as a waterfall (one row per op, in order)."""
    ops = ops.sort_values("start_ns")
    t0 = ops["start_ns"].min() if len(ops) else 0
    labels = [f"{n}" for n in ops["name"].astype(str)]
    fig = go.Figure(
        go.Bar(
            y=labels,
            x=ops["dur_ps"] / 1e9,
            base=(ops["start_ns"] - t0) / 1e6,
            orientation="h",
            marker_color="#4c78a8",
            hovertemplate="%{y}<br>%{x:.3f} ms<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        xaxis_title="ms since the invoke started",
        height=140 + 22 * len(ops),
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
    )
    fig.update_yaxes(autorange="reversed")
    return fig


def cpu_figure(
    sched: pd.DataFrame, counters: pd.DataFrame, tid: int | None, t0: int, t1: int
) -> go.Figure:
    """Per CPU: what ran in [t0, t1] (the inference thread in red), and CPU frequencies."""
    s = sched[(sched["start_ns"] < t1) & (sched["start_ns"] + sched["dur_ns"] > t0)]
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.65, 0.35],
        vertical_spacing=0.08,
        subplot_titles=("CPU scheduling", "CPU frequency"),
    )
    ours = s["tid"] == tid if tid is not None else pd.Series(False, index=s.index)
    for mine, color in ((False, "#c7c7c7"), (True, "#d62728")):
        part = s[ours == mine]
        fig.add_trace(
            go.Bar(
                y=[f"cpu {c}" for c in part["cpu"]],
                x=part["dur_ns"] / 1e6,
                base=(part["start_ns"] - t0) / 1e6,
                orientation="h",
                marker_color=color,
                customdata=part["comm"].astype(str),
                hovertemplate="%{customdata}<br>%{x:.3f} ms<extra></extra>",
                name="inference thread" if mine else "other threads",
            ),
            1,
            1,
        )
    freq = counters[counters["name"].astype(str).str.startswith("cpu_frequency")]
    for name, g in freq.groupby(freq["name"].astype(str)):
        fig.add_trace(
            go.Scatter(
                x=(g["ts_ns"] - t0) / 1e6, y=g["value"], mode="lines", line_shape="hv", name=name
            ),
            2,
            1,
        )
    fig.update_layout(barmode="overlay", height=460, margin={"l": 10, "r": 10, "t": 40, "b": 40})
    fig.update_xaxes(title_text="ms", row=2, col=1)
    # An empty panel says why, where the data would be (not a blank plot).
    for row, missing, why in (
        (
            1,
            s.empty,
            "No CPU scheduling events in this window: record them with the sched "
            "ftrace events (atrace sched, or Perfetto's linux.ftrace sched/sched_switch).",
        ),
        (
            2,
            freq.empty,
            "No CPU frequency counters in this trace (atrace freq, or Perfetto's "
            "power/cpu_frequency).",
        ),
    ):
        if missing:
            fig.add_annotation(
                text=why,
                xref=f"x{row if row > 1 else ''} domain",
                yref=f"y{row if row > 1 else ''} domain",
                x=0.5,
                y=0.5,
                showarrow=False,
                font={"color": "#6c757d"},
            )
    return fig
