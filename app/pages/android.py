"""Android / TFLite: invoke latency, per-op table, one invoke's waterfall, CPU scheduling."""

from __future__ import annotations

from typing import Any

import dash
import dash_ag_grid as dag
from dash import Input, Output, State, dcc, html

from analyzers.tflite import invokes, tflite_op_stats
from app import ids
from app.figures.tflite import cpu_figure, invoke_latency_figure, waterfall_figure
from app.pages._common import card, download_frame, index_of, load_session, session_of, table_header
from app.units import grid_columns

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
            f"{len(inv)} invokes · median {inv['dur_ns'].median() / 1e6:.3f} ms · p95 "
            f"{inv['dur_ns'].quantile(0.95) / 1e6:.3f} ms"
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
                    rowData=view.astype(object).where(view.notna(), None).to_dict("records"),
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
                dcc.Graph(id=ids.TFL_WATERFALL),
                dcc.Graph(id=ids.TFL_CPU),
            ),
        ]
    )


@dash.callback(
    Output(ids.TFL_WATERFALL, "figure"),
    Output(ids.TFL_CPU, "figure"),
    Input(ids.TFL_INVOKE, "value"),
    State(ids.URL, "search"),
)
def show_invoke(index: int | None, search: str | None) -> tuple[Any, Any]:
    _, analysis, _ = load_session(session_of(search))
    if analysis is None or index is None:
        return dash.no_update, dash.no_update
    ev = analysis.frames.events
    row = invokes(ev).iloc[int(index)]
    t0, t1 = int(row["start_ns"]), int(row["start_ns"] + row["dur_ns"])
    inside = ev[
        (ev["line"].astype(str) == row["thread"]) & (ev["start_ns"] >= t0) & (ev["start_ns"] < t1)
    ]
    ops = inside[inside["op_type"].notna()]
    tid = int(row["thread"].rsplit("(", 1)[-1].rstrip(")")) if row["thread"].endswith(")") else None
    pad = (t1 - t0) // 2
    return (
        waterfall_figure(ops, f"Invoke {index}: {len(ops)} ops, {row['dur_ns'] / 1e6:.3f} ms"),
        cpu_figure(analysis.frames.sched, analysis.frames.counters, tid, t0 - pad, t1 + pad),
    )


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
