"""XLA figures: the roofline (each op a point against the device's roofs) and the op profile
(program → category → op as a treemap)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from podscope.analyzers.roofline import GIB

#: One colour per XLA category (the rest grey), stable across pages.
_PALETTE = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#eeca3b",
    "#b279a2",
    "#ff9da6",
    "#9d755d",
    "#bab0ac",
)


def category_colors(categories: list[str]) -> dict[str, str]:
    """A colour per category, in order of first appearance."""
    return {c: _PALETTE[i % len(_PALETTE)] for i, c in enumerate(dict.fromkeys(categories))}


def program_points(table: pd.DataFrame) -> pd.DataFrame:
    """Each program's own point, as XProf's roofline has one: all its ops' measured FLOPs
    over their bytes and over their time (``program, operational_intensity,
    measured_flop_rate_gflops, total_time_us``), per ``execution`` too where the table has
    one (``hlo_stats`` by execution: XProf's per-step rows); programs without FLOPs or bytes
    left out."""
    ops = table[table["category"].astype(str) != "IDLE"]
    time_us = ops["total_time_us"].astype(float)
    keys = ["program", "execution"] if "execution" in ops else ["program"]
    g = (
        pd.DataFrame(
            {
                "program": ops["program"].astype(str),
                **({"execution": ops["execution"].to_numpy()} if "execution" in ops else {}),
                "flops": ops["measured_flop_rate_gflops"].astype(float) * time_us * 1e3,
                "bytes": ops["bytes_accessed"].astype(float),
                "time_us": time_us,
            }
        )
        .groupby(keys, sort=False)[["flops", "bytes", "time_us"]]
        .sum()
        .reset_index()
    )
    g = g[(g["flops"] > 0) & (g["bytes"] > 0) & (g["time_us"] > 0)]
    return pd.DataFrame(
        {
            **{k: g[k].to_numpy() for k in keys},
            "operational_intensity": (g["flops"] / g["bytes"]).to_numpy(),
            "measured_flop_rate_gflops": (g["flops"] / g["time_us"] / 1e3).to_numpy(),
            "total_time_us": g["time_us"].to_numpy(),
        }
    )


#: Per-step program points drawn at most (a long loop's steps: the first ones).
MAX_STEP_POINTS = 2000


def _program_points(fig: go.Figure, table: pd.DataFrame, steps: pd.DataFrame | None) -> None:
    """A star per program, beside its ops' points; with ``steps`` (the table by execution), a
    small hollow star per program per step, whose spread is the steps' variation."""
    if steps is not None and len(steps):
        each = program_points(steps).head(MAX_STEP_POINTS)
        if len(each):
            fig.add_trace(
                go.Scatter(
                    x=each["operational_intensity"],
                    y=each["measured_flop_rate_gflops"],
                    mode="markers",
                    name="program, per step",
                    marker={"symbol": "star-open", "size": 9, "color": "#555"},
                    customdata=np.column_stack([each["program"], each["execution"]]),
                    hovertemplate="program %{customdata[0]}, execution %{customdata[1]}<br>"
                    "%{x:.3g} FLOP/B · %{y:,.1f} GFLOP/s<extra></extra>",
                )
            )
    points = program_points(table)
    if points.empty:
        return
    fig.add_trace(
        go.Scatter(
            x=points["operational_intensity"],
            y=points["measured_flop_rate_gflops"],
            mode="markers",
            name="program (all its ops)",
            marker={"symbol": "star", "size": 18, "color": "#000", "line": {"width": 1}},
            text=points["program"],
            hovertemplate="program %{text}: all its ops<br>%{x:.3g} FLOP/B · "
            "%{y:,.1f} GFLOP/s<extra></extra>",
        )
    )


def roofline_figure(
    table: pd.DataFrame,
    peaks: pd.Series | None,
    selected: str | None = None,
    steps: pd.DataFrame | None = None,
) -> go.Figure:
    """Log-log roofline: operational intensity (FLOP/byte) against the measured FLOP rate
    (GFLOP/s), one point per op sized by its self time and coloured by category; the device's
    HBM and compute roofs where the trace states them. Ops without FLOPs or bytes cannot sit
    on log axes: the title counts them.

    Args:
        table: ``hlo_stats`` rows (``customdata`` carries ``program_id/hlo_op_name``, which a
            click reports).
        peaks: the device's ``device_peaks`` row, None when unknown.
        selected: ``program_id/hlo_op_name`` of the op to ring.
        steps: the same ops by execution (``hlo_stats`` with an ``execution`` column): each
            program's point per step beside its overall one.
    """
    flops = table["measured_flop_rate_gflops"].astype(float)
    oi = table["operational_intensity"].astype(float)
    on = (flops > 0) & (oi > 0)
    shown, left_out = table[on], int((~on).sum())
    fig = go.Figure()
    peak_flops = float(peaks["peak_flop_rate_gflops"]) if peaks is not None else 0.0
    peak_bw = float(peaks["peak_hbm_bw_gibs"]) * GIB / 1e9 if peaks is not None else 0.0
    if len(shown):
        lo = float(oi[on].min()) / 4
        hi = float(oi[on].max()) * 4
    else:
        lo, hi = 0.01, 1000.0
    if peak_flops > 0 and peak_bw > 0:
        ridge = peak_flops / peak_bw
        lo, hi = min(lo, ridge / 100), max(hi, ridge * 10)
        xs = np.geomspace(lo, hi, 64)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=np.minimum(peak_flops, xs * peak_bw),
                mode="lines",
                line={"color": "#333", "width": 2},
                name=f"roof: {peak_flops / 1000:,.0f} TFLOP/s, {peak_bw * 1e9 / GIB:,.1f} GiB/s HBM",
                hovertemplate="roof at %{x:.3g} FLOP/B: %{y:,.0f} GFLOP/s<extra></extra>",
            )
        )
    colors = category_colors(list(table["category"].astype(str)))
    keys = (shown["program_id"].astype(str) + "/" + shown["hlo_op_name"].astype(str)).tolist()
    self_us = shown["total_self_time_us"].astype(float)
    size = 8 + 32 * np.sqrt(self_us / max(float(self_us.max()), 1e-9)) if len(shown) else []
    for cat in dict.fromkeys(shown["category"].astype(str)):
        part = (shown["category"].astype(str) == cat).to_numpy()
        rows = shown[part]
        fig.add_trace(
            go.Scatter(
                x=rows["operational_intensity"],
                y=rows["measured_flop_rate_gflops"],
                mode="markers",
                name=cat,
                marker={
                    "size": np.asarray(size)[part],
                    "color": colors[cat],
                    "line": {
                        "width": [3 if k == selected else 0.5 for k in np.asarray(keys)[part]],
                        "color": "#000",
                    },
                },
                customdata=np.column_stack(
                    [
                        np.asarray(keys)[part],
                        rows["hlo_op_name"],
                        rows["bound_by"],
                        rows["total_self_time_us"].round(1),
                        (rows["roofline_efficiency"].astype(float) * 100).round(1),
                        np.where(
                            rows["above_peak"].astype(bool) if "above_peak" in rows else False,
                            "<br><b>measured above the device's peak: the peak or the op's "
                            "cost is wrong</b>",
                            "",
                        ),
                    ]
                ),
                hovertemplate="%{customdata[1]}<br>%{x:.3g} FLOP/B · %{y:,.1f} GFLOP/s<br>"
                "bound by %{customdata[2]} · %{customdata[4]}% of its roof%{customdata[5]}<br>"
                "self %{customdata[3]} µs<extra>%{fullData.name}</extra>",
            )
        )
    _program_points(fig, table, steps)
    note = f" ({left_out} ops without FLOPs or bytes not plotted)" if left_out else ""
    roof = "" if peak_flops > 0 and peak_bw > 0 else " — no roof: the trace states no peaks here"
    fig.update_layout(
        title=f"Roofline{roof}{note}",
        xaxis={"type": "log", "title": "operational intensity (FLOP/byte)"},
        yaxis={"type": "log", "title": "GFLOP/s"},
        height=480,
        margin={"l": 10, "r": 10, "t": 50, "b": 40},
        legend={"orientation": "h", "y": -0.2},
        uirevision="roofline",
    )
    return fig


def op_profile_figure(profile: pd.DataFrame, node: str = "", color: str = "flops") -> go.Figure:
    """The op profile as a treemap: area the self time, colour the utilization of the peak
    FLOP rate (``color="flops"``) or HBM bandwidth (``"bandwidth"``); ``node`` (an ``id`` of
    ``op_profile``) is the level shown."""
    column = "flops_utilization" if color == "flops" else "bandwidth_utilization"
    util = profile[column].astype(float)
    known = util.notna().any()
    fig = go.Figure(
        go.Treemap(
            ids=profile["id"].where(profile["id"] != "", "(all)"),
            parents=profile["parent"]
            .where(profile["level"] != "root", "")
            .where((profile["parent"] != "") | (profile["level"] == "root"), "(all)"),
            labels=profile["label"],
            values=profile["self_time_us"],
            branchvalues="total",
            level=node or "(all)",
            marker={
                "colors": (util.fillna(0) * 100) if known else None,
                "colorscale": "RdYlGn",
                "cmin": 0,
                "cmax": 100,
                "colorbar": {"title": "% of peak"} if known else None,
            },
            customdata=np.column_stack(
                [
                    profile["time_share"].astype(float) * 100,
                    (util * 100).round(2).astype(str),
                    profile["occurrences"],
                ]
            ),
            hovertemplate="%{label}<br>%{value:,.1f} µs self · %{customdata[0]:.2f}% of XLA op time"
            "<br>"
            + ("FLOP rate" if color == "flops" else "HBM bandwidth")
            + " %{customdata[1]}% of peak<br>%{customdata[2]} occurrences<extra></extra>",
        )
    )
    fig.update_layout(
        title="Op profile (area: self time; colour: % of the device's peak"
        + ("" if known else " — unknown: the trace states no peaks")
        + ")",
        height=480,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        uirevision=node,
    )
    return fig


def memory_figure(heap: pd.DataFrame, program: pd.Series) -> go.Figure:
    """A program's heap after each event of XLA's heap simulation (``hlo_memory``'s heap
    rows, one program), its peak marked with the instruction that reached it."""
    fig = go.Figure(
        go.Scatter(
            x=heap["position"],
            y=heap["heap_mib"],
            mode="lines+markers" if len(heap) <= 200 else "lines",
            line={"shape": "hv", "color": _PALETTE[0]},
            customdata=heap[["instruction"]],
            hovertemplate="event %{x}: %{customdata[0]}<br>%{y:,.1f} MiB<extra></extra>",
            name="heap",
        )
    )
    at = heap[heap["position"] == program["peak_position"]]
    if len(at):
        fig.add_trace(
            go.Scatter(
                x=at["position"],
                y=at["heap_mib"],
                mode="markers",
                marker={"size": 12, "color": _PALETTE[3], "symbol": "diamond"},
                name=f"peak {program['peak_heap_mib']:,.1f} MiB",
                hovertemplate=f"peak at {at['instruction'].iloc[0]}: %{{y:,.1f}} MiB<extra></extra>",
            )
        )
    if program["indefinite_mib"] >= 0.01 * program["peak_heap_mib"]:  # a floor worth a line
        fig.add_hline(
            y=program["indefinite_mib"],
            line_dash="dot",
            line_color="grey",
            annotation_text="parameters, outputs, constants",
        )
    fig.update_layout(
        title=f"{program['program']}: heap over its order of execution",
        xaxis_title="heap simulator event",
        yaxis_title="MiB (memory space 0)",
        yaxis_rangemode="tozero",
        height=340,
        margin={"t": 40, "b": 40, "l": 60, "r": 10},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def hlo_graph_figure(nodes: pd.DataFrame, edges: list[tuple[str, str]]) -> go.Figure:
    """The instructions around an op (``trace_parsers.hlo_graph.neighbourhood``) in data-flow
    order, left to right: each a point coloured by category, the op ringed, a fusion a square
    (a click opens or closes it), the instructions of an open fusion small and shaded; each
    edge an arrow from operand to user."""
    colors = category_colors(sorted(nodes["category"].astype(str)))
    at = {r.name: (r.layer, -r.row) for r in nodes.itertuples()}
    fig = go.Figure()
    for a, b in edges:
        (x0, y0), (x1, y1) = at[a], at[b]
        fig.add_annotation(
            x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y",
            showarrow=True, arrowhead=2, arrowsize=1, arrowwidth=1, arrowcolor="#9aa0a6",
            standoff=9, startstandoff=9, text="",
        )  # fmt: skip
    inside = nodes["inside"] != ""
    fig.add_trace(
        go.Scatter(
            x=nodes["layer"],
            y=-nodes["row"],
            mode="markers+text",
            text=nodes["name"],
            textposition="top center",
            textfont={"size": 10},
            customdata=nodes[["name", "opcode", "shape", "fusion", "inside"]],
            hovertemplate="%{customdata[0]} = %{customdata[2]} %{customdata[1]}"
            "<extra>%{customdata[4]}</extra>",
            marker={
                "size": [9 if i else 16 for i in inside],
                "color": [colors[c] for c in nodes["category"].astype(str)],
                "symbol": ["square" if f else "circle" for f in nodes["fusion"]],
                "opacity": [0.6 if i else 1.0 for i in inside],
                "line": {
                    "width": [3 if o else 0 for o in nodes["is_op"]],
                    "color": "#d62728",
                },
            },
            showlegend=False,
        )
    )
    fig.update_layout(
        height=max(260, 70 * (int(nodes["row"].max()) + 1 if len(nodes) else 1) + 60),
        margin={"t": 20, "b": 20, "l": 20, "r": 20},
        xaxis={"visible": False},
        yaxis={"visible": False},
        plot_bgcolor="white",
    )
    return fig
