"""Android / TFLite: invoke latency, per-op table, one invoke's waterfall, CPU scheduling."""

from __future__ import annotations

from typing import Any

import dash
import dash_ag_grid as dag
from dash import Input, Output, State, dcc, html

from podscope.analyzers.session import SessionAnalysis
from podscope.analyzers.tflite import invokes, tflite_op_stats
from podscope.app import ids
from podscope.app.figures.tflite import cpu_figure, invoke_latency_figure, waterfall_figure
from podscope.app.grid_source import records
from podscope.app.pages._common import (
    card,
    download_frame,
    index_of,
    load_session,
    session_of,
    table_header,
    with_query,
)
from podscope.app.units import fmt_duration, grid_columns, plural

dash.register_page(__name__, path="/android", name="TFLite", order=6)


def layout(session: str | None = None, invoke: str | None = None, **_: str) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None:
        return alert
    ev = analysis.frames.events
    inv = invokes(ev)
    ops = tflite_op_stats(ev)
    if inv.empty and ops.empty:
        return card(
            html.H5("No TFLite sections in this session"),
            html.P(
                "Enable them on the device with `adb shell setprop debug.tflite.trace 1` (read when the "
                "interpreter is built), capture with systrace/Perfetto including the app's atrace category, "
                "and upload the trace on the Sessions page.",
                className="podscope-muted",
            ),
        )
    number = index_of(invoke)
    chosen = min(number, len(inv) - 1) if number is not None and len(inv) else 0
    view = ops.assign(
        **{
            c.replace("_ns", "_ms"): (ops[c] / 1e6).round(4)
            for c in ("total_ns", "avg_ns", "p50_ns", "p95_ns")
        }
    )
    view = view.drop(columns=["total_ns", "avg_ns", "p50_ns", "p95_ns"])
    summary = (
        (
            f"{plural(len(inv), 'invoke')} · median {fmt_duration(inv['dur_ns'].median())} · "
            f"p95 {fmt_duration(inv['dur_ns'].quantile(0.95))}"
        )
        if len(inv)
        else "no complete invoke in the trace"
    )
    return html.Div(
        [
            card(
                html.H5(summary), dcc.Graph(figure=invoke_latency_figure(inv)) if len(inv) else None
            ),
            card(
                table_header("Ops", ids.TFL_CSV, ids.TFL_PARQUET),
                dag.AgGrid(
                    rowData=records(view),
                    columnDefs=grid_columns(view.columns, pinned=view.columns[0]),
                    defaultColDef={"sortable": True, "filter": True, "resizable": True},
                    dashGridOptions={"domLayout": "autoHeight"},
                ),
                dcc.Download(id=ids.TFL_DOWNLOAD),
            ),
            card(
                dcc.Dropdown(
                    id=ids.TFL_INVOKE,
                    options=[{"label": f"invoke {i}", "value": i} for i in inv["invoke"]],
                    value=chosen,
                    clearable=False,
                )
                if len(inv)
                else None,
                *invoke_figures(analysis, chosen if len(inv) else None),
            ),
        ]
    )


@dash.callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.TFL_INVOKE, "value"),
    Input(ids.TFL_WATERFALL, "id"),  # see page_drawn
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def choose(index: int | None, _: str, search: str | None) -> Any:
    """The invoke goes into the URL; the page is drawn from it."""
    return with_query(search, invoke=index or None)  # the first invoke is the default


def invoke_figures(analysis: SessionAnalysis, index: int | None) -> list[Any]:
    """The ops waterfall and CPU scheduling of one invoke (none without invokes)."""
    if index is None:
        return []
    ev = analysis.frames.events
    row = invokes(ev).iloc[int(index)]
    t0, t1 = int(row["start_ns"]), int(row["start_ns"] + row["dur_ns"])
    inside = ev[
        (ev["line"].astype(str) == row["thread"]) & (ev["start_ns"] >= t0) & (ev["start_ns"] < t1)
    ]
    ops = inside[inside["op_type"].notna()]
    tid = int(row["thread"].rsplit("(", 1)[-1].rstrip(")")) if row["thread"].endswith(")") else None
    pad = (t1 - t0) // 2
    return [
        dcc.Graph(
            id=ids.TFL_WATERFALL,
            figure=waterfall_figure(
                ops, f"Invoke {index}: {plural(len(ops), 'op')}, {fmt_duration(row['dur_ns'])}"
            ),
        ),
        dcc.Graph(
            id=ids.TFL_CPU,
            figure=cpu_figure(
                analysis.frames.sched,
                analysis.frames.counters,
                tid,
                t0 - pad,
                t1 + pad,
                invoke=(t0, t1),
            ),
        ),
    ]


@dash.callback(
    Output(ids.TFL_DOWNLOAD, "data"),
    Input(ids.TFL_CSV, "n_clicks"),
    Input(ids.TFL_PARQUET, "n_clicks"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def download(_csv: int | None, _pq: int | None, search: str | None) -> Any:
    session, analysis, _ = load_session(session_of(search))
    if analysis is None:
        return dash.no_update
    return download_frame(
        tflite_op_stats(analysis.frames.events), f"tflite_ops_{session}", ids.TFL_PARQUET
    )
