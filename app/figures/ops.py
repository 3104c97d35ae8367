"""Op figures: top ops by self time, op type → op treemap, memory in use over time."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go


def _label(row: pd.Series) -> str:
    return str(row.get("kernel") or row.get("op_name") or row["op_type"])


def short_name(name: str, width: int = 60) -> str:
    """``name`` in at most ``width`` characters, keeping its start and its end (kernel names
    differ at the end: ``…<float, 128, 4>`` vs ``…<half, 64, 8>``)."""
    if len(name) <= width:
        return name
    keep = (width - 1) // 2
    return f"{name[:keep]}…{name[-(width - 1 - keep) :]}"


def _unique(labels: list[str]) -> list[str]:
    """Labels made distinct (a bar chart merges equal category labels into one bar)."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return out


def ops_top_figure(table: pd.DataFrame, n: int = 20) -> go.Figure:
    """Horizontal bars of the ``n`` ops with the most self time (ms), labelled by worker/device
    (long names shortened in the middle; the hover shows the whole name)."""
    top = table.nlargest(n, "self_ps")
    names = [_label(r) for _, r in top.iterrows()]
    labels = _unique(
        [
            f"{short_name(name)} · {r['worker']} {r['device']}"
            for name, (_, r) in zip(names, top.iterrows(), strict=True)
        ]
    )
    fig = go.Figure(
        go.Bar(
            y=labels,
            x=top["self_ps"] / 1e9,
            orientation="h",
            marker_color="#4c78a8",
            customdata=list(zip(top["occurrences"], top["op_type"], names, strict=True)),
            hovertemplate="%{customdata[2]}<br>self %{x:.3f} ms · %{customdata[0]} × "
            "%{customdata[1]}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Top {len(top)} by self time",
        xaxis_title="ms",
        height=140 + 22 * len(top),
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
    )
    fig.update_yaxes(autorange="reversed")
    return fig


def ops_treemap_figure(table: pd.DataFrame, max_ops: int = 400) -> go.Figure:
    """Treemap op type → op by self time (the ``max_ops`` largest ops; the rest per type)."""
    t = table[table["self_ps"] > 0]
    keep = t.nlargest(max_ops, "self_ps")
    types = t.groupby("op_type")["self_ps"].sum()
    leaf = keep.assign(name=[_label(r)[:80] for _, r in keep.iterrows()])
    ids = [f"type/{x}" for x in types.index] + [f"op/{i}" for i in range(len(leaf))]
    fig = go.Figure(
        go.Treemap(
            ids=ids,
            labels=list(types.index) + leaf["name"].tolist(),
            parents=[""] * len(types) + [f"type/{x}" for x in leaf["op_type"]],
            values=list(types.to_numpy() / 1e9) + list(leaf["self_ps"] / 1e9),
            branchvalues="total",
            hovertemplate="%{label}<br>%{value:.3f} ms<extra></extra>",
        )
    )
    fig.update_layout(
        title="Self time: op type → op", height=480, margin={"l": 10, "r": 10, "t": 50, "b": 10}
    )
    return fig


def memory_figure(timeline: pd.DataFrame) -> go.Figure:
    """Bytes in use over time per worker and allocator (MiB), each peak marked."""
    fig = go.Figure()
    for (worker, allocator), g in timeline.dropna(subset=["bytes_in_use"]).groupby(
        ["worker", "allocator"]
    ):
        t0 = timeline["t_ns"].min()
        x, y = (g["t_ns"] - t0) / 1e6, g["bytes_in_use"].astype(float) / 2**20
        fig.add_trace(
            go.Scatter(x=x, y=y, mode="lines", line_shape="hv", name=f"{worker} {allocator}")
        )
        i = int(y.to_numpy().argmax())
        fig.add_trace(
            go.Scatter(
                x=[x.iloc[i]],
                y=[y.iloc[i]],
                mode="markers+text",
                text=[f"peak {y.iloc[i]:,.0f} MiB"],
                textposition="top center",
                marker={"size": 9, "color": "#d62728"},
                showlegend=False,
            )
        )
    fig.update_layout(
        title="Memory in use",
        xaxis_title="ms since the first allocation",
        yaxis_title="MiB",
        height=380,
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
    )
    return fig
