"""Run comparison figure: ms per step of each category, baseline next to the new run."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from podscope.analyzers.breakdown import CATEGORIES
from podscope.analyzers.torch_view import TORCH_CATEGORIES


def metric_label(metric: str) -> str:
    """A Compare metric as shown: a PyTorch category by its name, others' underscores as
    spaces."""
    return TORCH_CATEGORIES.get(metric, metric.replace("_", " "))


def compare_steps_figure(table: pd.DataFrame, base: str, new: str) -> go.Figure:
    """Grouped horizontal bars of ``analyzers.compare.compare_steps``: the mean step time and
    each category (ms per step), one bar per run; the hover gives the change."""
    rows = table[table["metric"].isin(["step_time (mean)", *CATEGORIES, *TORCH_CATEGORIES])]
    labels = rows["metric"].map(metric_label).tolist()
    change = rows["change"].map(lambda c: "n/a" if pd.isna(c) else f"{c:+.0%}").tolist()
    fig = go.Figure(
        [
            go.Bar(
                name=f"{run} ({label})",
                y=labels,
                x=rows[col],
                orientation="h",
                marker_color=color,
                customdata=change,
                hovertemplate="%{y}: %{x:.3f} ms per step (change %{customdata})<extra></extra>",
            )
            for run, label, col, color in (
                (base, "baseline", "base_ms", "#9ecae9"),
                (new, "new", "new_ms", "#4c78a8"),
            )
        ]
    )
    fig.update_layout(
        barmode="group",
        title="Where a step's time goes, per worker and device",
        xaxis_title="ms per step",
        height=160 + 44 * len(rows),
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
        legend={"orientation": "h", "y": -0.15},
    )
    fig.update_yaxes(autorange="reversed")
    return fig
