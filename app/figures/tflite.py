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
    fig.update_xaxes(title_text="invoke latency (ms)", row=1, col=2)
    fig.update_yaxes(title_text="latency (ms)", row=1, col=1)
    fig.update_yaxes(title_text="invokes", row=1, col=2)
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
    sched: pd.DataFrame,
    counters: pd.DataFrame,
    tid: int | None,
    t0: int,
    t1: int,
    invoke: tuple[int, int] | None = None,
) -> go.Figure:
    """Per CPU: what ran in [t0, t1] (the inference thread in red, other threads grey), and
    the CPU frequencies below it when the trace has them; time in ms since the invoke started
    (``invoke``: its start and end, marked), else since ``t0``. What is missing is said in the
    panel or the title, never drawn over a plot."""
    origin = invoke[0] if invoke else t0
    s = sched[(sched["start_ns"] < t1) & (sched["start_ns"] + sched["dur_ns"] > t0)]
    s = s[s["tid"] != 0]  # the idle task: an idle CPU is drawn empty, as Perfetto does
    freq = counters[counters["name"].astype(str).str.startswith("cpu_frequency")]
    rows = 2 if len(freq) else 1
    title = "CPU scheduling" + (
        ""
        if rows == 2
        else "<br><sup>No CPU frequency counters in this trace (record atrace freq, or "
        "Perfetto's power/cpu_frequency).</sup>"
    )
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.65, 0.35] if rows == 2 else [1.0],
        vertical_spacing=0.16,
        subplot_titles=(title, "CPU frequency")[:rows],
    )
    ours = s["tid"] == tid if tid is not None else pd.Series(False, index=s.index)
    for mine, color in ((False, "#9e9e9e"), (True, "#d62728")):
        part = s[ours == mine]
        fig.add_trace(
            go.Bar(
                y=[f"CPU {c}" for c in part["cpu"]],
                x=part["dur_ns"] / 1e6,
                base=(part["start_ns"] - origin) / 1e6,
                orientation="h",
                marker_color=color,
                customdata=part["comm"].astype(str) + " [" + part["tid"].astype(str) + "]",
                hovertemplate="%{customdata}<br>%{x:.3f} ms<extra></extra>",
                name="inference thread" if mine else "other threads",
                showlegend=True,
            ),
            1,
            1,
        )
    for name, g in freq.groupby(freq["name"].astype(str)):
        fig.add_trace(
            go.Scatter(
                x=(g["ts_ns"] - origin) / 1e6,
                y=g["value"] / 1e6,  # ftrace reports kHz
                mode="lines",
                line_shape="hv",
                name=name.replace("cpu_frequency ", "").replace("cpu", "CPU ") + " frequency",
                hovertemplate="%{y:.2f} GHz<extra>" + name + "</extra>",
            ),
            2,
            1,
        )
    if rows == 2:
        fig.update_yaxes(title_text="GHz", row=2, col=1)
    if invoke:
        for at in invoke:
            fig.add_vline(
                x=(at - origin) / 1e6, line={"color": "#d62728", "dash": "dot", "width": 1}
            )
    since = "ms since the invoke started" if invoke else "ms"
    fig.update_xaxes(
        title_text=since, showticklabels=True, range=[(t0 - origin) / 1e6, (t1 - origin) / 1e6]
    )
    fig.update_layout(
        barmode="overlay",
        height=480 if rows == 2 else 340,
        margin={"l": 10, "r": 10, "t": 70, "b": 40},
        legend={"orientation": "h", "y": -0.2 if rows == 1 else -0.12, "x": 0},
    )
    if s.empty:
        fig.add_annotation(
            text="No CPU scheduling events in this window: record them with the sched ftrace "
            "events (atrace sched, or Perfetto's linux.ftrace sched/sched_switch).",
            xref="x domain",
            yref="y domain",
            x=0.5,
            y=0.5,
            showarrow=False,
            font={"color": "#6c757d"},
        )
    return fig
