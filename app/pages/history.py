"""History: a watched job over wall time. Step time per worker from the heartbeats and from
every capture (each on its own axis), each capture's culprit and top finding, and what changed
from one capture to the next, as regression findings with their cause: for the capture a user
points at (a click on its point or its row), else the newest."""

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
            dcc.Interval(id=ids.HIST_TICK, interval=3000),
            dcc.Store(id=ids.HIST_SEEN),
            dcc.Store(id=ids.HIST_CHOSEN),
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


def _changes_view(session: str, changes: list[Change], first: bool) -> Any:
    opened = dcc.Link("open it in the Pod Viewer", href=f"/pod?{urlencode({'session': session})}")
    if first:
        return html.P(
            [f"{session}: the first capture, nothing before it to compare (", opened, ")."]
        )
    if not changes:
        return html.P(
            [f"{session}: nothing changed beyond noise since the capture before it (", opened, ")."]
        )
    return html.Div(
        [
            html.P([f"{session}, against the capture before it (", opened, "):"], className="mb-1"),
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
    Output(ids.HIST_CHOSEN, "data"),
    Input(ids.HIST_TICK, "n_intervals"),
    Input(ids.HIST_TABLE, "selectedRows"),
    Input(ids.HIST_GRAPH, "clickData"),
    State(ids.HIST_SEEN, "data"),
    State(ids.HIST_CHOSEN, "data"),
)
def refresh(
    _n: int | None,
    selected: list[dict[str, Any]] | None,
    click: dict[str, Any] | None,
    seen: str | None,
    chosen: str | None,
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
    # the capture a user points at: its point clicked, or its row picked; it stays chosen
    # while the page refreshes (the newest until one is)
    trigger = dash.ctx.triggered_id
    if trigger == ids.HIST_GRAPH:
        points = (click or {}).get("points") or []
        chosen = next((p["customdata"] for p in points if p.get("customdata")), chosen)
    elif trigger == ids.HIST_TABLE and selected:
        chosen = selected[0]["id"]
    known = [e["session"] for e in entries]
    chosen = chosen if chosen in known else (known[-1] if known else None)
    redraw = drawn != seen
    if not redraw and trigger == ids.HIST_TICK:
        return (status_line, *[dash.no_update] * 3, idle, drawn, chosen)
    pairs = with_changes(entries)
    changes = next((ch for e, ch in pairs if e["session"] == chosen), [])
    view = (
        _changes_view(chosen, changes, first=chosen == known[0])
        if chosen
        else html.P("No capture summarized yet.")
    )
    if not redraw:  # a point or a row chosen: the figure and the grid stay as they are
        return status_line, dash.no_update, dash.no_update, view, idle, drawn, chosen
    said = {e["session"]: "; ".join(c.title for c in ch[:2]) for e, ch in pairs}
    figure = history_figure(entries, heartbeats, said)
    return status_line, figure, _rows(entries, said), view, idle, drawn, chosen


def _rows(entries: list[dict[str, Any]], said: dict[str, str]) -> list[dict[str, Any]]:
    """The Captures grid: one row per summarized capture."""
    return [
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
