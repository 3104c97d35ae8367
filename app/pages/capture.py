"""Capture: every worker of a job in one window, as a background job with live per-worker status."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
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
from podscope.collectors.capture import CaptureOptions, Target, WorkerResult, capture
from podscope.collectors.errors import CaptureError
from podscope.collectors.status import Status
from podscope.collectors.watch import Triggers, WatchError, WatchOptions
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
            _watch_card(viewer),
        ]
    )


def _watch_card(viewer: bool) -> Any:
    """Watch mode: the workers above, captured on a schedule and when their step heartbeats
    slow down (``collectors.watch``), by this dashboard until stopped."""
    return card(
        html.H5("Watch this job"),
        html.P(
            [
                "Captures the workers above every N minutes with the window above, and at once "
                "when a worker's step time rises (its training loop calls "
                "podscope.agent.step(n) after each step). One capture at a time; the oldest "
                "watched sessions are deleted beyond the number kept. Results: the ",
                dcc.Link("History page", href="/history"),
                ".",
            ],
            className="podscope-muted",
        ),
        dbc.Row(
            [
                _field(
                    "Every (minutes)",
                    dbc.Input(id=ids.CAP_WATCH_EVERY, value="5", inputMode="numeric"),
                    2,
                ),
                _field(
                    "Sessions kept",
                    dbc.Input(id=ids.CAP_WATCH_KEEP, value="100", inputMode="numeric"),
                    2,
                ),
                _field(
                    "Step-time rise that triggers (%)",
                    dbc.Input(id=ids.CAP_WATCH_RISE, value="30", inputMode="numeric"),
                    3,
                ),
                _field(
                    "Triggers",
                    dbc.Switch(id=ids.CAP_WATCH_TRIGGERS, value=True, label="on heartbeats"),
                    2,
                ),
            ]
        ),
        html.Div(
            [
                dbc.Button("Start watching", id=ids.CAP_WATCH_START, disabled=viewer),
                dbc.Button(
                    "Capture now",
                    id=ids.CAP_WATCH_NOW,
                    color="secondary",
                    className="ms-2",
                    disabled=viewer,
                ),
                dbc.Button(
                    "Stop watching",
                    id=ids.CAP_WATCH_STOP,
                    color="danger",
                    outline=True,
                    className="ms-2",
                    disabled=viewer,
                ),
            ],
            className="mt-3",
        ),
        html.Div(id=ids.CAP_WATCH_SAID, className="mt-2"),
        html.Div(id=ids.CAP_WATCH_STATUS, className="mt-2"),
        dcc.Interval(id=ids.CAP_WATCH_TICK, interval=2000),
    )


#: The Watch form's whole numbers: (low, high) per field, as the page names them.
WATCH_LIMITS = {
    "Every (minutes)": (1, 1440),
    "Sessions kept": (1, 10_000),
    "Step-time rise that triggers (%)": (5, 1000),
}


def _whole(name: str, value: Any) -> int | str:
    lo, hi = WATCH_LIMITS[name]
    text = str(value or "").strip()
    if not text.isascii() or not text.isdigit() or not lo <= int(text) <= hi:
        return f"{name}: a whole number from {lo:,} to {hi:,}."
    return int(text)


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
                    html.Td(w.task),
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


def _planned(
    addresses: str | None,
    manifest: str | None,
    duration: Any,
    delay: Any,
    host_level: Any,
    py_level: Any,
    retries: Any,
) -> tuple[list[Target], CaptureOptions] | str:
    """The form's targets and capture options, or why they are refused (checked here, not
    only in the browser: a POST can say anything)."""
    context = current()
    fields, problem = capture_form(duration, delay, host_level, py_level, retries)
    problem = page_targets_problem(addresses, manifest) or problem
    if problem:
        return problem
    try:
        targets = context.capture_targets(addresses, manifest)
    except CaptureError as e:
        return str(e)
    if len(targets) > MAX_TARGETS:
        return f"{len(targets)} workers: at most {MAX_TARGETS} per capture"
    return targets, CaptureOptions(
        logdir=context.settings.logdir,
        duration_ms=fields["duration_ms"],
        delay_ms=fields["delay_ms"],
        host_tracer_level=fields["host_tracer_level"],
        python_tracer_level=fields["python_tracer_level"],
        retries=fields["retries"],
        token=context.settings.agent_token,
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
    planned = _planned(addresses, manifest, duration, delay, host_level, py_level, retries)
    if isinstance(planned, str):
        return dbc.Alert(planned, color="danger")
    targets, opts = planned
    for name, text, limit in (
        ("Label", label, capture_layout.MAX_LABEL),
        ("Note", note, capture_layout.MAX_NOTE),
    ):
        try:
            capture_layout.check_label(text or "", limit)
        except capture_layout.LayoutError as e:
            return dbc.Alert(f"{name}: {e}.", color="danger")
    opts = replace(opts, label=label or "", note=note or "")
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


@dash.callback(
    Output(ids.CAP_WATCH_SAID, "children"),
    Input(ids.CAP_WATCH_START, "n_clicks"),
    Input(ids.CAP_WATCH_NOW, "n_clicks"),
    Input(ids.CAP_WATCH_STOP, "n_clicks"),
    State(ids.CAP_ADDRESSES, "value"),
    State(ids.CAP_MANIFEST, "value"),
    State(ids.CAP_DURATION, "value"),
    State(ids.CAP_DELAY, "value"),
    State(ids.CAP_HOST_LEVEL, "value"),
    State(ids.CAP_PY_LEVEL, "value"),
    State(ids.CAP_RETRIES, "value"),
    State(ids.CAP_WATCH_EVERY, "value"),
    State(ids.CAP_WATCH_KEEP, "value"),
    State(ids.CAP_WATCH_RISE, "value"),
    State(ids.CAP_WATCH_TRIGGERS, "value"),
    prevent_initial_call=True,
)
def watch_control(
    _start: int | None,
    _now: int | None,
    _stop: int | None,
    addresses: str | None,
    manifest: str | None,
    duration: Any,
    delay: Any,
    host_level: Any,
    py_level: Any,
    retries: Any,
    every: Any,
    keep: Any,
    rise_pct: Any,
    triggers_on: bool,
) -> Any:
    watching = current().watching
    pressed = dash.ctx.triggered_id
    if pressed == ids.CAP_WATCH_STOP:
        stopped = watching.stop(f"the Capture page, by {current_user(current().settings.auth)}")
        return dbc.Alert(
            "Stopped watching; the sessions stay."
            if stopped == "this dashboard's watcher"
            else f"Asked {stopped} to stop at its next poll; the sessions stay."
            if stopped
            else "No watcher runs on this logdir.",
            color="secondary",
        )
    if pressed == ids.CAP_WATCH_NOW:
        status = watching.status()
        if status is None or not status["fresh"]:
            return dbc.Alert(
                "No watcher runs on this logdir: start watching first.", color="warning"
            )
        who = watching.request(f"from the Capture page by {current_user(current().settings.auth)}")
        return dbc.Alert(f"Asked {who} to capture at its next poll.", color="info")
    planned = _planned(addresses, manifest, duration, delay, host_level, py_level, retries)
    numbers = [_whole(n, v) for n, v in zip(WATCH_LIMITS, (every, keep, rise_pct), strict=True)]
    if isinstance(planned, str):
        return dbc.Alert(planned, color="danger")
    problem = next((n for n in numbers if isinstance(n, str)), None)
    if problem is not None:
        return dbc.Alert(problem, color="danger")
    _, opts = planned
    every_min, kept, rise = (int(n) for n in numbers)
    context = current()
    try:
        watching.start(
            lambda: context.capture_targets(addresses, manifest),  # a manifest is read anew
            WatchOptions(
                opts,
                every_s=every_min * 60.0,
                keep=kept,
                triggers=Triggers(rise_pct=rise) if triggers_on else None,
            ),
        )
    except WatchError as e:
        return dbc.Alert(str(e), color="danger")
    return dbc.Alert(
        f"Watching: a capture now and every {plural(every_min, 'minute')}"
        + (f", and when a step time rises {rise}%" if triggers_on else "")
        + f"; keeping {plural(kept, 'session')}.",
        color="success",
    )


@dash.callback(
    Output(ids.CAP_WATCH_STATUS, "children"),
    Input(ids.CAP_WATCH_TICK, "n_intervals"),
)
def watch_status(_n: int | None) -> Any:
    status = current().watching.status()
    if status is None or not status["fresh"]:
        return html.P(
            "Not watching.", className="podscope-muted", id=ids.CAP_WATCH_STATUS + "-idle"
        )
    nxt = status.get("next_unix_s")
    head = (
        ("Capturing now. " if status.get("capturing") else "")
        + (
            f"Next scheduled capture in {max(0.0, nxt - time.time()):.0f} s."
            if nxt
            else "No schedule."
        )
        + ("" if status["here"] else f" (watcher: pid {status.get('pid')})")
    )
    workers = status.get("workers") or {}
    beats = dbc.Table(
        [
            html.Thead(
                html.Tr([html.Th(c) for c in ("worker", "heartbeats", "step ms", "last step")])
            ),
            html.Tbody(
                [
                    html.Tr(
                        [
                            html.Td(w),
                            html.Td(
                                s["status"]
                                + (f" ({s['restarts']} restarts)" if s.get("restarts") else "")
                            ),
                            html.Td(f"{s['median_ms']:.1f}" if s.get("median_ms") else ""),
                            html.Td("" if s.get("last_step") is None else str(s["last_step"])),
                        ]
                    )
                    for w, s in list(workers.items())[:MAX_TARGETS]
                ]
            ),
        ],
        size="sm",
        className="mb-2",
    )
    captures = [
        html.Li(
            [
                time.strftime("%H:%M:%S", time.localtime(c["started_unix_s"])),
                f" {c['detail'] or c['reason']}: ",
                dcc.Link(c["session"], href=f"/pod?{urlencode({'session': c['session']})}")
                if c["session"]
                else c["error"],
                f" ({sum(v == 'ok' for v in c['statuses'].values())}/{len(c['statuses'])} ok)"
                if c["statuses"]
                else "",
            ]
        )
        for c in reversed(status.get("captures") or [])
    ]
    return html.Div(
        [html.P(head, id=ids.CAP_WATCH_STATUS + "-head"), beats, html.Ul(captures[:10])]
    )
