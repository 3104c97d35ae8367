"""History: a watched job over wall time. Step time per worker from the heartbeats and from
every capture, each capture's culprit and top finding on the same axis (a click opens it),
and what changed from one capture to the next, as regression findings with their cause."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html

from podscope.analyzers.history import Change, named, with_changes
from podscope.app import ids
from podscope.app.context import current
from podscope.app.figures.history import history_figure
from podscope.app.history import heartbeats_frame
from podscope.app.pages._common import card
from podscope.app.units import plural

dash.register_page(__name__, path="/history", name="History", order=8)

#: Severity → Bootstrap colour of a change's badge.
SEVERITY_COLOR = {"high": "danger", "moderate": "warning", "none": "success"}
#: Grid rows per page (a thousand captures stay one fast grid).
PAGE_ROWS = 50


def layout(**_: str) -> html.Div:
    current().watching.historian.catch_up()  # sessions without a summary, in the background
    return html.Div(
        [
            dcc.Location(id=ids.HIST_GO, refresh=True),
            dcc.Interval(id=ids.HIST_TICK, interval=3000),
            dcc.Store(id=ids.HIST_SEEN),
            card(html.Div(id=ids.HIST_STATUS)),
            card(dcc.Graph(id=ids.HIST_GRAPH, config={"displaylogo": False})),
            card(html.H5("What changed"), html.Div(id=ids.HIST_CHANGES)),
            card(
                html.H5("Captures"),
                dag.AgGrid(
                    id=ids.HIST_TABLE,
                    columnDefs=[
                        {"field": "time", "sort": "desc", "minWidth": 170},
                        {"field": "reason", "flex": 1, "minWidth": 160},
                        {"field": "workers", "width": 95},
                        {"field": "step_ms", "headerName": "step ms (p50)", "width": 125},
                        {"field": "culprit", "flex": 1, "minWidth": 160},
                        {"field": "top", "headerName": "top finding", "flex": 1, "minWidth": 200},
                        {
                            "field": "changed",
                            "headerName": "what changed",
                            "flex": 2,
                            "minWidth": 260,
                        },
                        {"field": "open", "cellRenderer": "markdown", "width": 120},
                    ],
                    defaultColDef={"resizable": True, "sortable": True, "filter": True},
                    dashGridOptions={
                        "pagination": True,
                        "paginationPageSize": PAGE_ROWS,
                        "rowSelection": "single",
                    },
                    style={"height": "560px"},
                    getRowId="params.data.id",
                    csvExportParams={"fileName": "history.csv"},
                ),
            ),
        ]
    )


def _status(entries: int, sessions: int) -> list[Any]:
    watching = current().watching
    status = watching.status()
    pending = watching.historian.pending
    if status is not None and status["fresh"]:
        every = status.get("every_s")
        nxt = status.get("next_unix_s")
        when = (
            f"next scheduled capture in {max(0, nxt - time.time()) / 60:.1f} min"
            if every and nxt
            else "no schedule"
        )
        who = "this dashboard" if status["here"] else f"pid {status.get('pid')}"
        line = dbc.Alert(
            f"Watching ({who}): "
            + ("capturing now; " if status.get("capturing") else "")
            + f"{when}; {plural(len(status.get('workers') or {}), 'worker')} sending heartbeats.",
            color="info",
            className="mb-2",
        )
    else:
        line = dbc.Alert(
            [
                "No watcher on this logdir. Start one on the ",
                dcc.Link("Capture page", href="/capture"),
                " (Watch) or with `podscope watch`; the captures already here are shown.",
            ],
            color="secondary",
            className="mb-2",
        )
    summary = f"{plural(entries, 'capture')} summarized of {plural(sessions, 'session')}"
    if pending:
        summary += f"; summarizing {pending} more…"
    failed = watching.historian.failures
    if failed:
        summary += f"; {plural(len(failed), 'session')} could not be read"
    return [html.H5("History of " + str(current().settings.logdir)), line, html.P(summary)]


def _changes_view(session: str, changes: list[Change]) -> Any:
    if not changes:
        return html.P(f"{session}: nothing changed beyond noise since the capture before it.")
    return html.Div(
        [
            html.P(f"{session}, against the capture before it:", className="mb-1"),
            html.Ul(
                [
                    html.Li(
                        [
                            dbc.Badge(
                                c.severity, color=SEVERITY_COLOR[c.severity], className="me-2"
                            ),
                            c.title,
                        ]
                    )
                    for c in changes
                ],
                id=ids.HIST_CHANGE_LIST,
            ),
        ]
    )


@dash.callback(
    Output(ids.HIST_STATUS, "children"),
    Output(ids.HIST_GRAPH, "figure"),
    Output(ids.HIST_TABLE, "rowData"),
    Output(ids.HIST_CHANGES, "children"),
    Output(ids.HIST_TICK, "disabled"),
    Output(ids.HIST_SEEN, "data"),
    Input(ids.HIST_TICK, "n_intervals"),
    Input(ids.HIST_TABLE, "selectedRows"),
    State(ids.HIST_SEEN, "data"),
)
def refresh(
    _n: int | None, selected: list[dict[str, Any]] | None, seen: str | None
) -> tuple[Any, ...]:
    context = current()
    sessions = context.store.names()
    entries = context.watching.historian.index.entries(sessions)
    status = context.watching.status()
    idle = not context.watching.historian.pending and not (status and status["fresh"])
    heartbeats = heartbeats_frame(context.settings.logdir)
    # What the figure and the grid are drawn from: unchanged, only the status line is sent
    # (a watched page polls every 3 s; a thousand rows and markers are not sent again).
    drawn = f"{[e['session'] for e in entries][-1:]}|{len(entries)}|{len(heartbeats)}"
    status_line = _status(len(entries), len(sessions))
    if drawn == seen and dash.ctx.triggered_id == ids.HIST_TICK:
        return (status_line, dash.no_update, dash.no_update, dash.no_update, idle, drawn)
    pairs = with_changes(entries)
    said = {e["session"]: "; ".join(c.title for c in ch[:2]) for e, ch in pairs}
    figure = history_figure(entries, heartbeats, said)
    rows = [
        {
            "id": e["session"],
            "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["start_unix_s"])),
            "reason": e.get("detail") or e["reason"],
            "workers": f"{sum(s == 'ok' for s in e['statuses'].values())}/{len(e['statuses'])}"
            if e["statuses"]
            else str(len(e.get("step_ms") or {})),
            "step_ms": round((e.get("metrics") or {}).get("step_time (p50)") or 0, 2) or None,
            "culprit": ", ".join(
                f"{named(e, w)}: {(e.get('causes') or {}).get(w) or '?'}" for w in e["culprits"]
            ),
            "top": (e.get("top") or {}).get("title", ""),
            "changed": said[e["session"]],
            "open": f"[Pod Viewer](/pod?{urlencode({'session': e['session']})})",
        }
        for e in entries
    ]
    chosen = selected[0]["id"] if selected else (entries[-1]["session"] if entries else None)
    changes = next((ch for e, ch in pairs if e["session"] == chosen), [])
    view = _changes_view(chosen, changes) if chosen else html.P("No capture summarized yet.")
    return status_line, figure, rows, view, idle, drawn


@dash.callback(
    Output(ids.HIST_GO, "href"),
    Input(ids.HIST_GRAPH, "clickData"),
    prevent_initial_call=True,
)
def open_capture(click: dict[str, Any] | None) -> Any:
    points = (click or {}).get("points") or []
    session = next((p.get("customdata") for p in points if p.get("customdata")), None)
    if not session:
        return dash.no_update
    return f"/pod?{urlencode({'session': session})}"
