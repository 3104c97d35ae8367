"""Sessions: every capture under the logdir, and upload of trace files."""

from __future__ import annotations

import base64
import time
from typing import Any
from urllib.parse import urlencode

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html

from podscope.app import ids
from podscope.app.auth import may_capture
from podscope.app.context import current
from podscope.app.pages._common import card
from podscope.app.store import SessionError, SessionSummary
from podscope.app.units import fmt_bytes
from podscope.trace_parsers import layout as capture_layout

dash.register_page(__name__, path="/", name="Sessions", order=0)

#: Sessions the grid shows whole; more scroll and page in a box.
AUTO_HEIGHT_ROWS = 25


def plan_of(worker: capture_layout.ManifestWorker) -> str:
    """What a worker's capture recorded: the full host trace, or Python calls only (the safe
    plan for non-chief MultiWorkerMirroredStrategy workers: no TF ops, no kernels)."""
    host, python = worker.extra.get("host_tracer_level"), worker.extra.get("python_tracer_level")
    if host is None and python is None:
        return ""
    if host:
        return "full host trace" + (" + Python" if python else "")
    return "Python tracer only" if python else "device only"


def _capture(summary: SessionSummary) -> str:
    if summary.manifest_error:
        return summary.manifest_error
    if summary.manifest is None:
        return ""
    return "; ".join(
        f"{w.label}: {w.status}" + (f" · {plan}" if (plan := plan_of(w)) else "")
        for w in summary.manifest.workers
    )


def _rows(summaries: list[SessionSummary] | None = None) -> list[dict[str, object]]:
    rows = []
    for summary in summaries if summaries is not None else current().store.summaries():
        link = urlencode({"session": summary.name})
        partial = summary.manifest is not None and any(
            plan_of(w) == "Python tracer only" for w in summary.manifest.workers
        )
        rows.append(
            {
                "run": summary.run or ".",
                "session": summary.name.rpartition("/")[2],
                "label": summary.label,
                "note": summary.note,
                "workers": summary.workers,
                "size": fmt_bytes(summary.bytes),
                "modified": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(summary.modified)),
                "capture": ("⚠ " if partial else "") + _capture(summary),
                "open": f"[Pod Viewer](/pod?{link}) · [Timeline](/timeline?{link})",
                "id": summary.name,
            }
        )
    return rows


def layout(**query: str) -> html.Div:
    settings = current().settings
    cols = [
        {"field": "run", "pinned": "left"},
        {"field": "session", "pinned": "left"},
        {"field": "label"},
        {"field": "workers"},
        {"field": "size"},
        {"field": "modified"},
        {"field": "open", "cellRenderer": "markdown"},
        {"field": "capture", "headerName": "capture (status · plan per worker)", "flex": 1},
        {"field": "note", "flex": 1},
    ]
    summaries = current().store.summaries()
    sessions = [
        {"label": s.name + (f" ({s.label})" if s.label else ""), "value": s.name} for s in summaries
    ]
    return html.Div(
        [
            card(
                html.H5("Sessions in " + str(settings.logdir)),
                dag.AgGrid(
                    id=ids.SESSIONS_TABLE,
                    rowData=_rows(summaries),
                    columnDefs=cols,
                    columnSize="autoSize",
                    # Up to a screenful grows with its rows; a logdir of a thousand watched
                    # sessions scrolls and pages in a box (autoHeight draws every row).
                    dashGridOptions={"domLayout": "autoHeight"}
                    if len(summaries) <= AUTO_HEIGHT_ROWS
                    else {"pagination": True, "paginationPageSize": 100},
                    style={} if len(summaries) <= AUTO_HEIGHT_ROWS else {"height": "640px"},
                    csvExportParams={"fileName": "sessions.csv"},
                    getRowId="params.data.id",
                ),
            ),
            card(
                html.H5("Label a session"),
                dbc.Row(
                    [
                        dbc.Col(
                            dcc.Dropdown(id=ids.SES_PICK, options=sessions, placeholder="session…"),
                            md=4,
                        ),
                        dbc.Col(
                            dbc.Input(
                                id=ids.SES_LABEL,
                                placeholder="label (e.g. baseline)",
                                maxLength=capture_layout.MAX_LABEL,
                            ),
                            md=3,
                        ),
                        dbc.Col(dbc.Button("Save", id=ids.SES_SAVE, disabled=True), md=1),
                    ]
                ),
                dbc.Textarea(
                    id=ids.SES_NOTE,
                    placeholder="note: what changed in this run, what to look at…",
                    maxLength=capture_layout.MAX_NOTE,
                    className="mt-2",
                ),
                html.Div(id=ids.SES_SAVED, className="mt-2"),
            ),
            card(
                html.H5("Upload a trace"),
                html.P(
                    f"One or more trace files, up to {settings.max_upload_mb} MB: .xplane.pb (plain or "
                    "gzip), Android systrace text/HTML, atrace -z, Chrome JSON or Perfetto; they become a "
                    "new session.",
                    className="podscope-muted",
                ),
                dcc.Upload(
                    id=ids.UPLOAD,
                    multiple=True,
                    max_size=settings.max_upload_mb * 2**20,
                    children=html.Div(["Drop files here or ", html.A("choose files")]),
                    style={
                        "border": "1px dashed #adb5bd",
                        "borderRadius": ".5rem",
                        "padding": "1.5rem",
                        "textAlign": "center",
                    },
                ),
                html.Div(id=ids.UPLOAD_RESULT, className="mt-2"),
            ),
        ]
    )


@dash.callback(
    Output(ids.UPLOAD_RESULT, "children"),
    Output(ids.SESSIONS_TABLE, "rowData"),
    Input(ids.UPLOAD, "contents"),
    State(ids.UPLOAD, "filename"),
    prevent_initial_call=True,
)
def upload(contents: object, names: object) -> tuple[object, object]:
    """Validates each file by parsing it; good files become a session, bad ones are listed.
    A browser sends lists of strings; a crafted POST can send anything."""
    files, bad = [], []
    sent = contents if isinstance(contents, list) else [contents]
    named = names if isinstance(names, list) else [names]
    for content, name in zip(sent, named, strict=False):
        name = name if isinstance(name, str) and name else "upload"
        try:  # a data URL: "data:<type>;base64,<payload>"
            if not isinstance(content, str):
                raise ValueError
            files.append((name, base64.b64decode(content.split(",", 1)[1], validate=True)))
        except (IndexError, ValueError):
            bad.append(f"{name[:120]}: the upload is not a base64 data URL")
    try:
        result = current().store.import_files(files)
    except SessionError as e:
        return [dbc.Alert(str(e), color="danger")], _rows()
    session, saved, errors = result.session, result.saved, (*bad, *result.errors)
    alerts = []
    if saved:
        alerts.append(
            dbc.Alert(
                [
                    "Session ",
                    dcc.Link(session, href=f"/pod?session={session}"),
                    f": {len(saved)} worker(s) ({', '.join(saved)})",
                ],
                color="success",
            )
        )
    if errors:
        alerts.append(
            dbc.Alert(
                [html.Div("Not a readable trace:")] + [html.Div(e) for e in errors], color="danger"
            )
        )
    return alerts, _rows()


@dash.callback(
    Output(ids.SES_LABEL, "value"),
    Output(ids.SES_NOTE, "value"),
    Output(ids.SES_SAVE, "disabled"),
    Input(ids.SES_PICK, "value"),
    prevent_initial_call=True,
)
def pick(session: str | None) -> tuple[str, str, bool]:
    """The chosen session's label and note, to edit (with the capture role: a viewer's Save
    stays off, and the server refuses it too)."""
    context = current()
    chosen = next((s for s in context.store.summaries() if s.name == session), None)
    if chosen is None:
        return "", "", True
    return chosen.label, chosen.note, not may_capture(context.settings.auth)


@dash.callback(
    Output(ids.SES_SAVED, "children"),
    Output(ids.SESSIONS_TABLE, "rowData", allow_duplicate=True),
    Input(ids.SES_SAVE, "n_clicks"),
    State(ids.SES_PICK, "value"),
    State(ids.SES_LABEL, "value"),
    State(ids.SES_NOTE, "value"),
    prevent_initial_call=True,
)
def save(_: int, session: str | None, label: str | None, note: str | None) -> tuple[Any, Any]:
    """Writes the label and note into the session's capture.json."""
    try:
        current().store.describe(str(session), label or "", note or "")
    except SessionError as e:
        return dbc.Alert(f"Not saved: {e}", color="danger"), dash.no_update
    return dbc.Alert(f"Saved the label and note of {session}.", color="success"), _rows()
