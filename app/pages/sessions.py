"""Sessions: every capture under the logdir, and upload of trace files."""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html

from app import ids
from app.main import settings, store
from app.pages._common import card
from trace_parsers import TraceParseError
from trace_parsers.loader import format_of, trace_files, worker_label

dash.register_page(__name__, path="/", name="Sessions", order=0)

SAFE_NAME = re.compile(r"[^A-Za-z0-9_.\-]")


def _rows() -> list[dict[str, object]]:
    rows = []
    for name in store().names():
        path = store().root / name
        files = trace_files(path)
        manifest = path / "capture.json"
        statuses = ""
        if manifest.exists():
            try:
                workers = json.loads(manifest.read_text()).get("workers", [])
                statuses = ", ".join(f"{w['label']}: {w['status']}" for w in workers)
            except (OSError, ValueError, KeyError) as e:
                statuses = f"unreadable capture.json ({e})"
        rows.append(
            {
                "session": name,
                "workers": len(files),
                "MB": round(sum(f.stat().st_size for f in files) / 1e6, 2),
                "modified": time.strftime(
                    "%Y-%m-%d %H:%M:%S", time.localtime(max(f.stat().st_mtime for f in files))
                ),
                "capture": statuses,
                "open": f"[Pod Viewer](/pod?session={name}) · [Timeline](/timeline?session={name})",
            }
        )
    return rows


def layout(**query: str) -> html.Div:
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
                html.H5("Sessions in " + str(settings().logdir)),
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
                    f"One or more trace files, up to {settings().max_upload_mb} MB: .xplane.pb (plain or "
                    "gzip), Android systrace text/HTML, atrace -z, Chrome JSON or Perfetto; they become a "
                    "new session.",
                    className="podscope-muted",
                ),
                dcc.Upload(
                    id=ids.UPLOAD,
                    multiple=True,
                    max_size=settings().max_upload_mb * 2**20,
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
def upload(contents: list[str] | None, names: list[str] | None) -> tuple[object, object]:
    """Validates each file by parsing it; good files become a session, bad ones are listed."""
    session = time.strftime("upload_%Y_%m_%d_%H_%M_%S")
    folder = store().root / session
    saved, errors = [], []
    for content, name in zip(contents or [], names or [], strict=True):
        data = base64.b64decode(content.split(",", 1)[1])
        safe = SAFE_NAME.sub("_", Path(name).name) or "trace"
        try:
            fmt = format_of(Path(safe), data[:65536])
            fmt.parse(data, worker=worker_label(Path(safe)), source=name)
        except TraceParseError as e:
            errors.append(f"{name}: {e.reason}")
            continue
        if not safe.endswith(fmt.suffixes):  # keep it findable as a capture file of its format
            safe += fmt.suffixes[0]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / safe).write_bytes(data)
        saved.append(worker_label(Path(safe)))
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
