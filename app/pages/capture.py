"""Capture: every worker of a job in one window, as a background job with live per-worker status."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlencode

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html

from podscope.app import ids
from podscope.app.auth import current_user, may_capture
from podscope.app.background import manager
from podscope.app.context import current
from podscope.app.pages._common import card
from podscope.app.targets import MAX_TARGETS, capture_form, page_targets_problem
from podscope.app.units import plural
from podscope.collectors.capture import CaptureOptions, WorkerResult, capture
from podscope.collectors.errors import CaptureError
from podscope.collectors.status import Status
from podscope.trace_parsers import layout as capture_layout
from podscope.trace_parsers.layout import profile_root

dash.register_page(__name__, path="/capture", name="Capture", order=7)


#: Bootstrap colour per ``Status.tone``.
STATUS_COLOR = {"ok": "success", "lost": "danger", "retry": "warning", "running": "secondary"}


def _field(label: str, component: Any, width: int = 3) -> dbc.Col:
    return dbc.Col([dbc.Label(label), component], md=width)


def layout(**_: str) -> Any:
    settings = current().settings
    manifest = settings.cluster_manifest
    viewer = not may_capture(settings.auth)
    return html.Div(
        [
            card(
                html.H5("Capture a job"),
                dbc.Alert(
                    f"Your login ({current_user(settings.auth)}) may view sessions, not "
                    "capture: capturing calls the workers' agents with their token. Ask for "
                    "the capture role (a name:capture:hash line in PODSCOPE_USERS_FILE, or a "
                    "group in PODSCOPE_CAPTURE_GROUPS behind a proxy).",
                    color="warning",
                )
                if viewer
                else None,
                html.P(
                    "Workers run the PodScope agent (collectors.agent); traces come back to "
                    f"{profile_root(settings.logdir)}/<session>/.",
                    className="podscope-muted",
                ),
                dbc.Row(
                    [
                        _field(
                            "Worker addresses (host:port, comma-separated)",
                            dbc.Input(
                                id=ids.CAP_ADDRESSES, placeholder="127.0.0.1:6010,127.0.0.1:6011"
                            ),
                            6,
                        ),
                        _field(
                            "…or an engine cluster manifest",
                            dbc.Input(id=ids.CAP_MANIFEST, value=str(manifest) if manifest else ""),
                            6,
                        ),
                    ]
                ),
                dbc.Row(
                    [
                        _field(
                            "Duration (ms)",
                            # Text, not type=number: a browser turns an out-of-range number
                            # into no value at all, and the server could only guess.
                            dbc.Input(id=ids.CAP_DURATION, value="2000", inputMode="numeric"),
                        ),
                        _field(
                            "Delay before the common start (ms)",
                            dbc.Input(id=ids.CAP_DELAY, value="500", inputMode="numeric"),
                        ),
                        _field(
                            "Host tracer level",
                            dbc.Select(
                                id=ids.CAP_HOST_LEVEL, value="2", options=[str(i) for i in range(4)]
                            ),
                        ),
                        _field(
                            "Python tracer level",
                            dbc.Select(id=ids.CAP_PY_LEVEL, value="0", options=["0", "1"]),
                        ),
                    ],
                    className="mt-2",
                ),
                dbc.Row(
                    [
                        _field(
                            "Retries",
                            dbc.Input(id=ids.CAP_RETRIES, value="2", inputMode="numeric"),
                        ),
                        _field(
                            "Label (e.g. baseline)",
                            dbc.Input(id=ids.CAP_LABEL, maxLength=capture_layout.MAX_LABEL),
                        ),
                        _field(
                            "Note",
                            dbc.Input(id=ids.CAP_NOTE, maxLength=capture_layout.MAX_NOTE),
                            6,
                        ),
                    ],
                    className="mt-2",
                ),
                dbc.Button(
                    "Capture",
                    id=ids.CAP_START,
                    color="primary",
                    className="mt-3",
                    disabled=viewer,
                ),
            ),
            card(html.Div(id=ids.CAP_PROGRESS), html.Div(id=ids.CAP_RESULT)),
        ]
    )


layout.per_user = True  # type: ignore[attr-defined]  # the role shows: never prefetched


def status_table(workers: list[WorkerResult]) -> dbc.Table:
    head = html.Thead(
        html.Tr([html.Th(c) for c in ("worker", "role", "status", "tracers h/py", "MB", "reason")])
    )
    body = html.Tbody(
        [
            html.Tr(
                [
                    html.Td(w.label),
                    html.Td(f"{w.role}:{w.index}" if w.role else ""),
                    html.Td(dbc.Badge(str(w.status), color=STATUS_COLOR[w.status.tone])),
                    html.Td(
                        f"{w.host_tracer_level}/{w.python_tracer_level}"
                        if w.host_tracer_level is not None
                        else ""
                    ),
                    html.Td(f"{w.bytes / 1e6:.1f}" if w.bytes else ""),
                    html.Td(w.reason or w.plan_note),
                ]
            )
            for w in workers
        ]
    )
    return dbc.Table([head, body], size="sm", className="mb-0")


# A new capture's result replaces the last one's: the click clears both at once, before the
# server answers (an error for a new run never sits under the previous run's table).
dash.clientside_callback(
    "function(n) { return [null, null]; }",
    Output(ids.CAP_PROGRESS, "children", allow_duplicate=True),
    Output(ids.CAP_RESULT, "children", allow_duplicate=True),
    Input(ids.CAP_START, "n_clicks"),
    prevent_initial_call=True,
)


@dash.callback(
    Output(ids.CAP_RESULT, "children"),
    Input(ids.CAP_START, "n_clicks"),
    State(ids.CAP_ADDRESSES, "value"),
    State(ids.CAP_MANIFEST, "value"),
    State(ids.CAP_DURATION, "value"),
    State(ids.CAP_DELAY, "value"),
    State(ids.CAP_HOST_LEVEL, "value"),
    State(ids.CAP_PY_LEVEL, "value"),
    State(ids.CAP_RETRIES, "value"),
    State(ids.CAP_LABEL, "value"),
    State(ids.CAP_NOTE, "value"),
    background=True,
    manager=manager(),
    progress=[Output(ids.CAP_PROGRESS, "children")],
    running=[(Output(ids.CAP_START, "disabled"), True, False)],
    prevent_initial_call=True,
)
def run_capture(
    set_progress: Any,
    _n: int,
    addresses: str | None,
    manifest: str | None,
    duration: int,
    delay: int,
    host_level: str,
    py_level: str,
    retries: int,
    label: str | None,
    note: str | None,
) -> Any:
    context = current()
    fields, problem = capture_form(duration, delay, host_level, py_level, retries)
    problem = page_targets_problem(addresses, manifest) or problem
    for name, text, limit in (
        ("Label", label, capture_layout.MAX_LABEL),
        ("Note", note, capture_layout.MAX_NOTE),
    ):
        try:
            capture_layout.check_label(text or "", limit)
        except capture_layout.LayoutError as e:
            problem = problem or f"{name}: {e}."
    if problem:  # checked here, not only in the browser: a POST can say anything
        return dbc.Alert(problem, color="danger")
    try:
        targets = context.capture_targets(addresses, manifest)
    except CaptureError as e:
        return dbc.Alert(str(e), color="danger")
    if len(targets) > MAX_TARGETS:
        return dbc.Alert(
            f"{len(targets)} workers: at most {MAX_TARGETS} per capture", color="danger"
        )
    opts = CaptureOptions(
        logdir=context.settings.logdir,
        duration_ms=fields["duration_ms"],
        delay_ms=fields["delay_ms"],
        host_tracer_level=fields["host_tracer_level"],
        python_tracer_level=fields["python_tracer_level"],
        retries=fields["retries"],
        token=context.settings.agent_token,
        label=label or "",
        note=note or "",
    )
    shown = {t.worker_label: WorkerResult(t.worker_label, t.address) for t in targets}
    lock = threading.Lock()

    def update(r: WorkerResult) -> None:
        with lock:
            shown[r.label] = r
            set_progress(status_table(list(shown.values())))

    result = capture(targets, opts, on_update=update)
    ok = sum(w.status == Status.OK for w in result.workers)
    total = len(result.workers)
    if not ok:  # nothing to open: the statuses above say why each worker failed
        return dbc.Alert(
            f"No worker was captured ({plural(total, 'worker')} failed; see the reasons above), "
            "so there is no session to open.",
            color="danger",
        )
    return dbc.Alert(
        [
            f"{ok} of {plural(total, 'worker')} captured. Session ",
            dcc.Link(result.session, href=f"/pod?{urlencode({'session': result.session})}"),
            ".",
        ],
        color="success" if ok == total else "warning",
    )
