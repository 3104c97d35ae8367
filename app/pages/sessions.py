"""Sessions: every capture under the logdir, and upload of trace files."""

from __future__ import annotations

import base64
import time

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html

from app import ids
from app.context import current
from app.pages._common import card

dash.register_page(__name__, path="/", name="Sessions", order=0)


def _rows() -> list[dict[str, object]]:
    rows = []
    for summary in current().store.summaries():
        name = summary.name
        if summary.manifest_error:
            statuses = summary.manifest_error
        elif summary.manifest is not None:
            statuses = ", ".join(f"{w.label}: {w.status}" for w in summary.manifest.workers)
        else:
            statuses = ""
        rows.append(
            {
                "session": name,
                "workers": summary.workers,
                "MB": round(summary.bytes / 1e6, 2),
                "modified": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(summary.modified)),
                "capture": statuses,
                "open": f"[Pod Viewer](/pod?session={name}) · [Timeline](/timeline?session={name})",
            }
        )
    return rows


def layout(**query: str) -> html.Div:
    settings = current().settings
    cols = [
        {"field": "session", "pinned": "left"},
        {"field": "workers"},
        {"field": "MB"},
        {"field": "modified"},
        {"field": "open", "cellRenderer": "markdown"},
        {"field": "capture", "flex": 1},
    ]
    return html.Div(
        [
            card(
                html.H5("Sessions in " + str(settings.logdir)),
                dag.AgGrid(
                    id=ids.SESSIONS_TABLE,
                    rowData=_rows(),
                    columnDefs=cols,
                    columnSize="autoSize",
                    dashGridOptions={"domLayout": "autoHeight"},
                    csvExportParams={"fileName": "sessions.csv"},
                ),
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
    result = current().store.import_files(files)
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
