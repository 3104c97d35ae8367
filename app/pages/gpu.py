"""GPU (PyTorch): Holistic Trace Analysis' views of a session's PyTorch ranks
(``analyzers.gpu_views``): a chart and the view's table, the view in the URL."""

from __future__ import annotations

from typing import Any

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
import pandas as pd
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html

from podscope.app import ids
from podscope.app.grid_source import records
from podscope.app.pages._common import (
    card,
    download_buttons,
    download_frame,
    load_session,
    query_of,
    with_query,
)
from podscope.app.units import grid_columns

dash.register_page(__name__, path="/gpu", name="GPU (PyTorch)", order=3)

#: The views, in the order offered, with what each shows (HTA's definitions).
VIEWS = {
    "temporal": (
        "Temporal breakdown",
        "Per rank, from its first GPU event to its last: the time no kernel, copy or set runs "
        "(idle), the union of computation kernels (compute), and the rest (non-compute: "
        "communication and memory), as Holistic Trace Analysis computes them.",
    ),
    "overlap": (
        "Communication overlap",
        "Per rank, the share of its communication kernels' time during which a computation "
        "kernel also runs: low means the collectives wait alone.",
    ),
    "kernel-types": (
        "Kernel types",
        "Over every rank, the time computation, communication and memory kernels run alone "
        "and together.",
    ),
    "kernels": (
        "Top kernels",
        "Per rank and kernel type, the kernels by total time; past the tenth, or past 80 % "
        "of the type's time, the rest summed as 'others'.",
    ),
    "idle": (
        "Idle time",
        "Per rank and stream, the gaps between its GPU events by cause: host wait (the "
        "launch call came after the stream ran dry: the host was late), kernel wait (gaps "
        "under 30 µs: launch overhead), other (the stream waited on something else, e.g. an "
        "event of another stream).",
    ),
    "launches": (
        "Kernel launches",
        "Per launch call and the GPU event it launched: the call's CPU time, the event's GPU "
        "time and the delay from the call's end to the event's start. Long calls or short "
        "kernels behind long delays mean a launch-bound step.",
    ),
    "queues": (
        "Queue length",
        "Per rank and stream, the operations enqueued and not yet started, over the points "
        "where it changes: a queue near empty leaves the GPU waiting on the host.",
    ),
    "memory-bw": (
        "Memory bandwidth",
        "Per rank and copy kind, the bandwidth the copies and sets use while they run (GB/s, "
        "as the profiler reports each), over the points where it changes.",
    ),
}
DEFAULT = "temporal"
#: Columns of long text, given the room to be read.
WIDE = ("kernel_type", "name")
COLORS = {"idle": "#bab0ac", "compute": "#4c78a8", "non_compute": "#f58518"}
IDLE_COLORS = {"host_wait": "#e45756", "kernel_wait": "#f58518", "other": "#bab0ac"}


def figure(view: str, table: pd.DataFrame) -> go.Figure:
    """The view's chart."""
    fig = go.Figure()
    ranks = [f"rank {r}" for r in table.get("rank", [])]
    if view == "temporal":
        for part, label in (
            ("compute", "compute"),
            ("non_compute", "non-compute"),
            ("idle", "idle"),
        ):
            fig.add_bar(
                y=ranks,
                x=table[f"{part}_time_pctg"],
                name=label,
                orientation="h",
                marker_color=COLORS[part],
                customdata=table[f"{part}_time_us"],
                hovertemplate="%{y}: %{x:.2f} % (%{customdata:,.0f} µs)<extra>"
                + label
                + "</extra>",
            )
        fig.update_layout(
            barmode="stack", xaxis={"title": "% of GPU kernel time", "range": [0, 100]}
        )
    elif view == "overlap":
        fig.add_bar(
            y=ranks,
            x=table["comp_comm_overlap_pctg"],
            orientation="h",
            marker_color=COLORS["compute"],
            hovertemplate="%{y}: %{x:.2f} % overlapped<extra></extra>",
        )
        fig.update_layout(xaxis={"title": "% of communication time overlapped", "range": [0, 100]})
    elif view == "kernel-types":
        fig.add_bar(
            y=table["kernel_type"],
            x=table["sum_us"],
            orientation="h",
            marker_color=COLORS["compute"],
            customdata=table["percentage"],
            hovertemplate="%{y}: %{x:,.0f} µs (%{customdata} %)<extra></extra>",
        )
        fig.update_layout(xaxis={"title": "µs, all ranks"}, yaxis={"autorange": "reversed"})
    elif view == "kernels":
        top = table.sort_values("sum_us", ascending=False).head(20)
        labels = [
            f"rank {r} · {t.lower()} · {n[:60]}"
            for r, t, n in zip(top["rank"], top["kernel_type"], top["name"], strict=True)
        ]
        fig.add_bar(
            y=labels,
            x=top["sum_us"],
            orientation="h",
            marker_color=COLORS["compute"],
            hovertemplate="%{y}: %{x:,.0f} µs<extra></extra>",
        )
        fig.update_layout(
            xaxis={"title": "µs (the 20 largest rows)"}, yaxis={"autorange": "reversed"}
        )
    elif view == "idle":
        where = [
            f"rank {r} · stream {s}" for r, s in zip(table["rank"], table["stream"], strict=True)
        ]
        for category, color in IDLE_COLORS.items():
            mine = table["idle_category"] == category
            fig.add_bar(
                y=[w for w, m in zip(where, mine, strict=True) if m],
                x=table.loc[mine, "idle_time"],
                name=category.replace("_", " "),
                orientation="h",
                marker_color=color,
                hovertemplate="%{y}: %{x:,.0f} µs<extra>" + category + "</extra>",
            )
        fig.update_layout(
            barmode="stack",
            xaxis={"title": "idle µs"},
            yaxis={
                "autorange": "reversed",
                "categoryorder": "array",
                "categoryarray": list(dict.fromkeys(where)),
            },
        )
    elif view == "launches":
        for column, label, color in (
            ("cpu_duration", "launch call (CPU)", COLORS["non_compute"]),
            ("launch_delay", "launch delay", COLORS["idle"]),
        ):
            fig.add_histogram(x=table[column], name=label, marker_color=color, opacity=0.75)
        fig.update_layout(
            barmode="overlay", xaxis={"title": "µs", "type": "log"}, yaxis={"title": "launches"}
        )
    else:  # queues, memory-bw: the mean and the largest per row of the summary
        key = "stream" if view == "queues" else "name"
        where = [
            f"rank {r} · {key} {v}" if key == "stream" else f"rank {r} · {v}"
            for r, v in zip(table["rank"], table[key], strict=True)
        ]
        for stat, color in (("mean", COLORS["compute"]), ("max", COLORS["non_compute"])):
            fig.add_bar(y=where, x=table[stat], name=stat, orientation="h", marker_color=color)
        unit = "operations queued" if view == "queues" else "GB/s in use"
        fig.update_layout(barmode="group", xaxis={"title": unit}, yaxis={"autorange": "reversed"})
    rows = len({y for d in fig.data if d.y is not None for y in d.y}) or 8  # 8: a histogram
    fig.update_layout(
        height=max(220, 90 + 26 * rows),
        margin={"l": 10, "r": 10, "t": 20, "b": 40},
        legend={"orientation": "h", "y": 1.08},
    )
    return fig


def _no_ranks(session: str, pytorch: bool) -> Any:
    """Why the page has nothing to show: no PyTorch trace, or PyTorch ranks without a GPU."""
    where = [
        dcc.Link("Ops", href=f"/ops?session={session}"),
        " and ",
        dcc.Link("Timeline", href=f"/timeline?session={session}"),
    ]
    text = (
        [
            f"Session {session} is a PyTorch capture without GPU events (a CPU-only run): "
            "Holistic Trace Analysis' views are about GPU time. Its CPU ops are on the ",
            *where,
            " pages.",
        ]
        if pytorch
        else [
            f"Session {session} holds no PyTorch profiler trace: this page shows Holistic "
            "Trace Analysis' views of PyTorch ranks. TensorFlow and JAX sessions are on the ",
            dcc.Link("Pod Viewer", href=f"/pod?session={session}"),
            " and ",
            dcc.Link("XLA", href=f"/xla?session={session}"),
            ".",
        ]
    )
    return dbc.Alert(text, color="secondary", id=ids.GPU_NOTE)


def layout(session: str | None = None, view: str | None = None, **_: str) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None or session is None:
        return alert
    view = view if view in VIEWS else DEFAULT
    table = analysis.gpu_view(view)
    ranks = len(analysis.gpu_view("temporal"))
    if not ranks:
        return _no_ranks(session, analysis.trace_kind == "pytorch")
    title, about = VIEWS[view]
    return html.Div(
        [
            card(
                dbc.Row(
                    [
                        dbc.Col(
                            dbc.RadioItems(
                                id=ids.GPU_VIEW,
                                value=view,
                                inline=True,
                                options=[{"label": t, "value": k} for k, (t, _) in VIEWS.items()],
                            ),
                            md=9,
                        ),
                        dbc.Col(
                            download_buttons(ids.GPU_CSV, ids.GPU_PARQUET),
                            md=3,
                            className="text-end",
                        ),
                    ],
                    id=ids.GPU_VIEW_BOX,
                ),
                html.P(about, className="podscope-muted mt-2 mb-0", id=ids.GPU_NOTE),
                dcc.Download(id=ids.GPU_DOWNLOAD),
            ),
            card(
                html.H6(f"{title} · {ranks} rank{'s' if ranks > 1 else ''}"),
                dcc.Graph(
                    id=ids.GPU_GRAPH, figure=figure(view, table), config={"displayModeBar": False}
                ),
            ),
            card(
                dag.AgGrid(
                    id=ids.GPU_TABLE,
                    rowData=records(table),
                    columnDefs=[
                        {**c, "minWidth": 320} if c["field"] in WIDE else c
                        for c in grid_columns(table.columns)
                    ],
                    defaultColDef={"sortable": True, "resizable": True, "filter": True},
                    dashGridOptions={"pagination": True, "paginationPageSize": 25},
                    style={"height": "480px"},
                ),
            ),
        ]
    )


@dash.callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.GPU_VIEW, "value"),
    Input(ids.GPU_VIEW_BOX, "id"),  # see page_drawn
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def choose(view: str | None, _: str, search: str | None) -> Any:
    """The view chosen goes into the URL; the page is drawn from it (``layout``)."""
    return with_query(search, view=None if view == DEFAULT else view)


@dash.callback(
    Output(ids.GPU_DOWNLOAD, "data"),
    Input(ids.GPU_CSV, "n_clicks"),
    Input(ids.GPU_PARQUET, "n_clicks"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def download(_csv: int | None, _pq: int | None, search: str | None) -> Any:
    """The view's table, as ``podscope gpu --csv`` writes it (or Parquet)."""
    query = query_of(search)
    session, analysis, _ = load_session(query.get("session"))
    if analysis is None or session is None:
        return dash.no_update
    asked = query.get("view")
    view = asked if asked is not None and asked in VIEWS else DEFAULT
    name = f"gpu_{view}_{session}".replace("/", "_")
    return download_frame(analysis.gpu_view(view), name, ids.GPU_PARQUET)
