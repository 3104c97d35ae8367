"""Ops: which ops cost what, on which worker and device; workers compared; memory over time."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
import pandas as pd
from dash import Input, Output, State, dcc, html

from analyzers.compare import with_per_step
from analyzers.ops import op_comparison
from app import ids
from app.figures.ops import memory_figure, ops_top_figure, ops_treemap_figure
from app.pages._common import (
    card,
    chosen_worker,
    device_summary,
    download_buttons,
    download_frame,
    load_session,
    session_of,
    worker_picker,
)
from app.units import grid_columns

dash.register_page(__name__, path="/ops", name="Ops", order=2)


def grid_rows(table: pd.DataFrame, session: str) -> list[dict[str, Any]]:
    """Table rows in ms, with a link that opens the timeline searching for the op."""
    view = table.copy()
    for col in [c for c in view.columns if c.endswith("_ps")]:
        view[col.removesuffix("_ps") + "_ms"] = (view[col] / 1e9).round(4)
    view = view.drop(columns=[c for c in view.columns if c.endswith("_ps")])
    if "kernel" in view:
        name = view["kernel"]
    elif "op_name" in view:
        name = view["op_name"].where(view["op_name"] != "", view["op_type"])
    else:  # per op type: the timeline searches for the type
        name = view["op_type"]
    view["timeline"] = [
        f"[open](/timeline?{urlencode({'session': session, 'worker': w, 'q': q})})"
        for w, q in zip(view["worker"], name, strict=True)
    ]
    # What and what it costs first, where it ran after, most expensive first.
    lead = [c for c in (*NAME_COLUMNS, *COST_COLUMNS, "worker", "device") if c in view]
    view = view[lead + [c for c in view.columns if c not in lead]]
    view = view.sort_values("self_ms", ascending=False, kind="stable")
    return view.astype(object).where(view.notna(), None).to_dict("records")


#: The op's name columns (per GPU kernel: the kernel, then its op).
NAME_COLUMNS = ("kernel", "op_name", "op_type")
COST_COLUMNS = (
    "self_ms",
    "self_per_step_ms",
    "total_ms",
    "occurrences",
    "avg_ms",
    "self_share",
    "p95_ms",
)


def rows_name(rows: list[dict[str, Any]]) -> str | None:
    """The first name column of the grid's rows (pinned on the left)."""
    return next((c for c in NAME_COLUMNS if rows and c in rows[0]), None)


def layout(
    session: str | None = None, worker: str | None = None, by: str | None = None, **_: str
) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None:
        return alert
    mem = analysis.memory
    memory = (
        dcc.Graph(figure=memory_figure(mem))
        if len(mem)
        else html.P(
            "This capture has no allocator events (TensorFlow records them only when memory profiling "
            "is on, e.g. on GPU hosts), so there is no memory timeline.",
            className="podscope-muted",
        )
    )
    return html.Div(
        [
            card(
                dbc.Row(
                    [
                        dbc.Col(
                            worker_picker(ids.OPS_WORKER, analysis, worker),
                            md=4,
                        ),
                        dbc.Col(
                            dbc.RadioItems(
                                id=ids.OPS_BY,
                                value=by or "op",
                                inline=True,
                                options=[
                                    {"label": "per op", "value": "op"},
                                    {"label": "per op type", "value": "type"},
                                    {"label": "per GPU kernel", "value": "kernel"},
                                ],
                            ),
                            md=5,
                        ),
                        dbc.Col(
                            download_buttons(ids.OPS_CSV, ids.OPS_PARQUET),
                            md=3,
                            className="text-end",
                        ),
                    ]
                ),
                device_summary(analysis),
                dcc.Download(id=ids.OPS_DOWNLOAD),
            ),
            card(
                html.Div(id=ids.OPS_NOTE),
                dag.AgGrid(
                    id=ids.OPS_TABLE,
                    defaultColDef={"sortable": True, "filter": True, "resizable": True},
                    dashGridOptions={"pagination": True, "paginationPageSize": 25},
                    style={"height": "560px"},
                ),
            ),
            dbc.Row(
                [
                    dbc.Col(card(dcc.Graph(id=ids.OPS_TOP)), md=6),
                    dbc.Col(card(dcc.Graph(id=ids.OPS_TREEMAP)), md=6),
                ]
            ),
            card(
                html.H5("Across workers (self time, ms): ops that differ most"),
                html.Div(id=ids.OPS_COMPARE),
            ),
            card(html.H5("Memory"), memory),
        ]
    )


def _table(search: str | None, worker: str, by: str) -> tuple[str | None, pd.DataFrame | None]:
    session, analysis, _ = load_session(session_of(search))
    if analysis is None:
        return session, None
    return session, with_per_step(analysis.op_table_for(by, chosen_worker(worker)), analysis.pod)


@dash.callback(
    Output(ids.OPS_TABLE, "rowData"),
    Output(ids.OPS_TABLE, "columnDefs"),
    Output(ids.OPS_TOP, "figure"),
    Output(ids.OPS_TREEMAP, "figure"),
    Output(ids.OPS_COMPARE, "children"),
    Output(ids.OPS_NOTE, "children"),
    Input(ids.OPS_WORKER, "value"),
    Input(ids.OPS_BY, "value"),
    State(ids.URL, "search"),
)
def show(worker: str, by: str, search: str | None) -> tuple[Any, ...]:
    session, table = _table(search, worker, by)
    if table is None or session is None:
        return (dash.no_update,) * 6
    if table.empty:
        note = dbc.Alert(_why_empty(search, worker, by), color="secondary", className="mb-2")
        empty = ops_top_figure(table), ops_treemap_figure(table)
        return [], [], *empty, None, note
    rows = grid_rows(table, session)
    cols = grid_columns(rows[0] if rows else [], pinned=rows_name(rows), markdown=["timeline"])
    comparison = op_comparison(table) if by == "op" and table["worker"].nunique() > 1 else None
    compare = (
        dbc.Table.from_dataframe((comparison / 1e9).round(3).reset_index().head(15), size="sm")
        if comparison is not None
        else html.P("One worker: nothing to compare.", className="podscope-muted")
    )
    return rows, cols, ops_top_figure(table), ops_treemap_figure(table), compare, None


def _why_empty(search: str | None, worker: str, by: str) -> str:
    """Why the op table is empty, for this worker and view (shown above the table)."""
    _, analysis, _ = load_session(session_of(search))
    chosen = chosen_worker(worker)
    if chosen and analysis is not None:
        w = analysis.worker_events
        w = w[w["worker"] == chosen]
        if len(w) and int(w["traced"].iloc[0]) == 0:  # every event is a Python call
            return (
                f"{chosen} was traced with the Python tracer only (the safe capture plan for "
                "workers where the host tracer crashed): its trace has Python calls, no TF ops "
                "or kernels. Pick another worker, or capture it again with host_tracer_level 2."
            )
    if by == "kernel":
        return "No GPU kernels here: kernels live on /device:GPU planes, and this capture has none."
    return (
        "No op events here: no TF ops on the host (name:Type or a tf_op stat), no device "
        "kernels and no XLA ops on a TPU's XLA Ops line."
    )


@dash.callback(
    Output(ids.OPS_DOWNLOAD, "data"),
    Input(ids.OPS_CSV, "n_clicks"),
    Input(ids.OPS_PARQUET, "n_clicks"),
    State(ids.OPS_WORKER, "value"),
    State(ids.OPS_BY, "value"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def download(_csv: int | None, _pq: int | None, worker: str, by: str, search: str | None) -> Any:
    session, table = _table(search, worker, by)
    if table is None:
        return dash.no_update
    return download_frame(table, f"ops_{by}_{session}", ids.OPS_PARQUET)
