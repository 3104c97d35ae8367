"""Pod Viewer figures: per-worker stacked breakdown, step time over steps, worker × step heat map."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from podscope.analyzers.breakdown import CATEGORIES
from podscope.analyzers.torch_view import TORCH_CATEGORIES
from podscope.app.figures.margins import reserve
from podscope.app.units import fmt_duration, fmt_share

COLORS = {
    "device_compute": "#1f77b4",
    "device_to_device": "#17becf",
    "device_collectives": "#9467bd",
    "host_compute": "#2ca02c",
    "kernel_launch": "#bcbd22",
    "input": "#d62728",
    "output": "#ff7f0e",
    "compilation": "#8c564b",
    "all_others": "#c7c7c7",
    "host_offload": "#e377c2",
    "device_idle": "#e7e7e7",
}
LABELS = {
    "device_compute": "Device compute",
    "device_to_device": "Device to device",
    "device_collectives": "Device collectives",
    "host_compute": "Host compute",
    "kernel_launch": "Kernel launch",
    "input": "Input",
    "output": "Output",
    "compilation": "Compilation",
    "all_others": "All others",
    "host_offload": "Host offload",
    "device_idle": "Device idle",
}


#: PyTorch's categories (``analyzers.torch_view``), named as there.
TORCH_COLORS = {
    "gpu_compute": COLORS["device_compute"],
    "comm_wait": "#c5b0d5",
    "comm_transfer": COLORS["device_collectives"],
    "memcpy": COLORS["device_to_device"],
    "cpu_python": COLORS["host_compute"],
    "dataloader": COLORS["input"],
    "gpu_idle": COLORS["device_idle"],
}


def _categories(rows: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """The rows' categories: stem → (name, colour), in stacking order."""
    if "gpu_compute_ns" in rows:
        return {c: (TORCH_CATEGORIES[c], TORCH_COLORS[c]) for c in TORCH_CATEGORIES}
    return {c: (LABELS[c], COLORS[c]) for c in CATEGORIES}


def _row_label(worker: str, device: str, n_devices: int) -> str:
    return f"{worker} · {device}" if n_devices > 1 else worker


def breakdown_bars_figure(rows: pd.DataFrame, title: str) -> go.Figure:
    """Stacked horizontal bars, one per worker (and device when a worker has several).

    Args:
        rows: one row per worker × device with ``step_time_ns`` and ``<category>_ns`` (means
            in the all-steps mode; XProf's categories, or PyTorch's of
            ``analyzers.torch_view``), optional ``<category>_std_ns``; ``split`` False rows
            show their step time as one grey "not split" bar.
        title: figure title.
    """
    rows = rows.sort_values(["worker", "device"])
    n_dev = int(rows.groupby("worker")["device"].nunique().max()) if len(rows) else 1
    y = [_row_label(w, d, n_dev) for w, d in zip(rows["worker"], rows["device"], strict=True)]
    fig = go.Figure()
    step_ms = rows["step_time_ns"].astype(float) / 1e6
    for cat, (name, color) in _categories(rows).items():
        ms = rows[f"{cat}_ns"].astype("Float64").fillna(0).astype(float) / 1e6
        if cat in ("device_idle", "host_offload", "gpu_idle") and not ms.any():
            continue  # only XLA programs (GPU ranks) have them
        pct = (ms / step_ms.where(step_ms > 0) * 100).fillna(0)
        fig.add_trace(
            go.Bar(
                name=name,
                y=y,
                x=ms,
                orientation="h",
                marker_color=color,
                customdata=pct,
                hovertemplate="%{y}<br>"
                + name
                + ": %{x:.3f} ms (%{customdata:.1f} %)<extra></extra>",
            )
        )
    unsplit = ~rows["split"].astype(bool)
    if unsplit.any():
        fig.add_trace(
            go.Bar(
                name="Not split (Python tracer only)",
                y=[v for v, u in zip(y, unsplit, strict=True) if u],
                x=step_ms[unsplit],
                orientation="h",
                marker_color="#e9ecef",
                marker_line_color="#6c757d",
                marker_line_width=1,
                hovertemplate="%{y}<br>step time %{x:.3f} ms; categories not traced<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        title=title,
        xaxis_title="ms",
        height=150 + (40 if len(y) <= 16 else 24) * len(y),  # thinner bars for many rows
        margin={"l": 10, "r": 10, "t": 90, "b": 40},
        # the legend above the bars: below them it sat on the axis title
        legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
    )
    fig.update_yaxes(autorange="reversed")
    return reserve(fig)


#: Up to this many steps per worker, each step is a marker on its line: plotly.js draws a
#: marker as an SVG path of its own (1000 steps took 0.2 s to draw), a line as one path.
MARKED_STEPS = 200


def step_time_line(worker: str, rows: pd.DataFrame) -> go.Scatter:
    """One worker's step time (ms) over its steps (``rows`` of ``pod``, in step order), with a
    marker per step up to ``MARKED_STEPS`` steps."""
    return go.Scatter(
        x=rows["step"],
        y=rows["step_time_ns"] / 1e6,
        mode="lines+markers" if len(rows) <= MARKED_STEPS else "lines",
        name=worker,
        marker={"size": 4},
        hovertemplate=f"{worker}<br>step %{{x}}: %{{y:.3f}} ms<extra></extra>",
    )


def step_time_lines_figure(pod: pd.DataFrame, selected_step: int | None = None) -> go.Figure:
    """Step time (ms) over steps, one line per worker (with a marker per step, up to
    ``MARKED_STEPS`` steps); the selected step marked."""
    fig = go.Figure()
    for worker, g in pod.sort_values("step").groupby("worker"):
        fig.add_trace(step_time_line(str(worker), g))
    if selected_step is not None:
        fig.add_vline(x=selected_step, line_dash="dot", line_color="#6c757d")
    fig.update_layout(
        title="Step time per worker",
        xaxis_title="step",
        yaxis_title="ms",
        height=320,
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
    )
    return fig


def step_heatmap_figure(lateness: pd.DataFrame) -> go.Figure:
    """Worker × step heat map of arrival lateness in ms (``SessionAnalysis.lateness``: after
    the other workers' median arrival, so a straggler's "late per step" is its row's mean)."""
    grid = lateness.pivot_table(index="worker", columns="step", values="lateness_ns") / 1e6
    fig = go.Figure(
        go.Heatmap(
            z=grid.to_numpy(),
            x=grid.columns.tolist(),
            y=grid.index.tolist(),
            colorscale="Reds",
            colorbar={"title": "ms"},
            hovertemplate="%{y}<br>step %{x}: %{z:.3f} ms<extra></extra>",
        )
    )
    fig.update_layout(
        title="Arrival lateness per step: ms after the others' median arrival",
        xaxis_title="step",
        height=140 + 30 * len(grid),
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
    )
    return fig


def straggler_evidence(stragglers: pd.DataFrame) -> tuple[list[str], str]:
    """Per named straggler (``analyzers.attribution.stragglers``), what names it (``straggler:
    w2 (arrives 1.200 ms late per step, 0.40× the median step; last in 97.0 % of steps)``),
    and for a synchronous job why its own step-time line can be the lowest (else "")."""
    named = stragglers[stragglers["straggler"]]
    texts = []
    for r in named.itertuples():
        late = fmt_duration(max(0.0, r.late_ms) * 1e6)
        if r.mode == "synchronous":
            why = (
                f"arrives {late} late per step, its heat-map row's mean; "
                f"{r.score:.2f}× the median step of {fmt_duration(r.median_step_ns)}; last in "
                f"{fmt_share(r.last_share)} of steps"
            )
        else:
            why = (
                f"steps {late} longer than the others', its heat-map row's mean; "
                f"{r.score:.2f}× the median step of {fmt_duration(r.median_step_ns)}; "
                f"slowest in {fmt_share(r.last_share)} of steps"
            )
        texts.append(f"straggler: {r.worker} ({why})")
    note = (
        "Synchronous job: the straggler arrives at the all-reduce late and the others wait for "
        "it there, so their steps are the long ones and its own step-time line can be the "
        "lowest. Its lateness is in the heat map."
        if (named["mode"] == "synchronous").any()
        else ""
    )
    return texts, note
