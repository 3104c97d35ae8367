"""Op figures: top ops by self time, op type → op treemap, memory in use over time."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from podscope.app.figures.margins import reserve


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
            f"{short_name(name)} · "
            + (f"{r['worker']} " if "worker" in r else f"{r['workers']} workers ")
            + str(r["device"])
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
    return reserve(fig)


def ops_treemap_figure(table: pd.DataFrame, max_ops: int = 50) -> go.Figure:
    """Treemap op type → op by self time (the ``max_ops`` largest ops; the rest per type).
    plotly.js measures every tile's label: 400 tiles took 1.1 s of the Ops page's first load,
    100 about 0.15 s, 50 about 0.07 s; smaller tiles had no room for a label, and the table
    lists every op."""
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


#: Peaks labelled on the memory figure (the others are marked, their value in the hover): a
#: TPU host has dozens of allocators, and their labels would be drawn over each other.
LABELLED_PEAKS = 3


def memory_figure(timeline: pd.DataFrame) -> go.Figure:
    """Bytes in use over time per worker and allocator (MiB, or GiB past 10 GiB), each peak
    marked and the ``LABELLED_PEAKS`` highest labelled."""
    fig = go.Figure()
    data = timeline.dropna(subset=["bytes_in_use"])
    giga = float(data["bytes_in_use"].max() or 0) >= 10 * 2**30 if len(data) else False
    unit, scale = ("GiB", 2**30) if giga else ("MiB", 2**20)
    t0 = timeline["t_ns"].min()
    peaks = []
    for (worker, allocator), g in data.groupby(["worker", "allocator"]):
        x, y = (g["t_ns"] - t0) / 1e6, g["bytes_in_use"].astype(float) / scale
        name = f"{worker} {allocator}"
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line_shape="hv", name=name))
        i = int(y.to_numpy().argmax())
        peaks.append((float(y.iloc[i]), float(x.iloc[i]), name))
    fmt = ",.2f" if giga else ",.0f"
    # One label per distinct peak value (allocators of a TPU's cores peak together), the
    # highest first: the label says how many share it.
    shown = {f"{p[0]:{fmt}}" for p in peaks}
    top = sorted(shown, key=lambda v: -float(v.replace(",", "")))[:LABELLED_PEAKS]
    text, done = [], set()
    for y, _, _ in peaks:
        value = f"{y:{fmt}}"
        same = sum(f"{q[0]:{fmt}}" == value for q in peaks)
        label = f"peak {value} {unit}" + (f" ({same} allocators)" if same > 1 else "")
        text.append(label if value in top and value not in done else "")
        done.add(value)
    fig.add_trace(
        go.Scatter(
            x=[p[1] for p in peaks],
            y=[p[0] for p in peaks],
            mode="markers+text",
            text=text,
            customdata=[p[2] for p in peaks],
            hovertemplate="%{customdata}<br>peak %{y:" + fmt + "} " + unit + "<extra></extra>",
            textposition="top center",
            marker={"size": 9, "color": "#d62728"},
            showlegend=False,
        )
    )
    fig.update_layout(
        title="Memory in use",
        xaxis_title="ms since the first allocation",
        yaxis_title=unit,
        height=380,
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
    )
    return fig
