"""Helpers shared by pages: decode the URL, resolve its session, render errors as alerts."""

from __future__ import annotations

import io
import re
from typing import Any
from urllib.parse import parse_qs, urlencode

import dash
import dash_bootstrap_components as dbc
import pandas as pd
from dash import Input, Output, State, dcc, html

from podscope.analyzers.execution import FROM_CACHE
from podscope.analyzers.session import SessionAnalysis
from podscope.app import ids
from podscope.app.context import current
from podscope.app.store import Job, SessionError, SessionPreparing
from podscope.app.units import fmt_duration, fmt_share, plural
from podscope.trace_parsers import TraceParseError

#: What to do about a session without steps, in the terms of what wrote it.
NO_STEPS_HINT = {
    "tensorflow": "PodScope found no training steps. Wrap each step in "
    "`with tf.profiler.experimental.Trace('train', step_num=step, _r=1):` (Keras fit does it "
    "for you); without markers, steps are found only from repeated tf.function calls.",
    "jax": "A JAX capture without step annotations: wrap each step in "
    "`with jax.profiler.StepTraceAnnotation('train', step_num=step):`; the Timeline and Ops "
    "pages show the XLA programs and kernels meanwhile.",
    "tpu": "A TPU capture without step markers (an inference or XLA-only run): mark steps with "
    "`jax.profiler.StepTraceAnnotation` (JAX) or `tf.profiler.experimental.Trace('train', "
    "step_num=…)` (TensorFlow); Ops and Timeline show the TPU programs meanwhile.",
    "android": "An Android trace has no training steps: its unit of work is a TFLite invoke "
    "(the TFLite page), and the Timeline shows CPU scheduling and app sections.",
    "pytorch": "A PyTorch trace without steps: profile with a torch.profiler schedule and call "
    "prof.step() after each training step (ProfilerStep#N marks them); the GPU (PyTorch) page "
    "shows Holistic Trace Analysis' numbers meanwhile.",
}


def query_of(search: str | None) -> dict[str, str]:
    """The URL's query (``dcc.Location.search``) as {key: first value}."""
    return {k: v[0] for k, v in parse_qs((search or "").lstrip("?")).items()}


def page_drawn() -> bool:
    """Whether the running callback was fired because its page was drawn, not by the user.
    Dash fires a callback whose inputs a page holds when the page is drawn, whatever its
    ``prevent_initial_call``, when its output (the shell's URL) is outside the page; it then
    reports every input as changed, where a person changes one control at a time. A control
    that writes the URL must ignore that call: writing would add a history entry that Back
    returns to forever. (Writers with one control add the control's container as a second
    input, so that the two cases differ.)"""
    return len(dash.ctx.triggered_prop_ids) > 1


def with_query(search: str | None, **changes: str | int | None) -> Any:
    """The URL query ``search`` with ``changes`` applied (None or "" removes a key), or
    ``no_update`` when that changes nothing: what a control writes into the URL, so that the
    page is drawn from the URL alone (a copied link, back and forward show the same view).
    Controls also report their values when a page is drawn; those change nothing."""
    if page_drawn():
        return dash.no_update
    old = query_of(search)
    query = dict(old)
    for key, value in changes.items():
        if value is None or value == "":
            query.pop(key, None)
        else:
            query[key] = str(value)
    return dash.no_update if query == old else "?" + urlencode(query)


def index_of(value: str | None) -> int | None:
    """A step or invoke number from a URL: ASCII digits only (``"²".isdigit()`` is True and
    ``int("²")`` raises), else None."""
    return int(value) if value and re.fullmatch(r"[0-9]{1,9}", value) else None


def session_of(search: str | None) -> str | None:
    """The ``session`` of the URL's query, if any."""
    return query_of(search).get("session")


def load_session(
    session: str | None, head: bool = False
) -> tuple[str | None, SessionAnalysis | None, Any]:
    """(session name, analysis, alert). With no session given, the newest one is used;
    a bad or corrupt session yields an alert instead of raising. ``head``: the Pod Viewer,
    which a big session's first part serves (``SessionStore.get``)."""
    store = current().store
    names = store.names()
    if not session:
        if not names:
            return (
                None,
                None,
                dbc.Alert(
                    [
                        "No sessions yet in ",
                        html.Code(str(store.logdir)),
                        ": capture one on the ",
                        dcc.Link("Capture", href="/capture"),
                        " page or upload a trace on ",
                        dcc.Link("Sessions", href="/"),
                        ".",
                    ],
                    color="info",
                ),
            )
        session = names[0]
    try:
        return session, store.get(session, head), None
    except SessionPreparing as p:
        return session, None, preparing(p.job, head)
    except (SessionError, TraceParseError) as e:
        return session, None, dbc.Alert(str(e), color="danger")


#: How often a preparing page asks for its job's progress (a cheap callback); the page shows
#: the analysis this long after it ends, half of it on average.
PREP_POLL_MS = 250


def preparing(job: Job, head: bool = False) -> html.Div:
    """A big session's per-worker analysis under way: progress, where it runs, Cancel; the
    page renders itself again when it is done (``head``, the Pod Viewer: when its part is
    in). Past that part, the other pages say the Pod Viewer is ready."""
    return card(
        html.H5(f"Analysing the {job.total} workers of {job.session}"),
        html.P(_where(job), id=ids.PREP_WHERE, className="podscope-muted"),
        dbc.Progress(
            id=ids.PREP_BAR, value=job.done, max=job.total, label=f"{job.done}/{job.total}"
        ),
        dbc.Button("Cancel", id=ids.PREP_CANCEL, color="secondary", className="mt-2"),
        html.Div(job.session, id=ids.PREP_SESSION, hidden=True),
        dcc.Interval(id=ids.PREP_TICK, interval=PREP_POLL_MS),
        dcc.Store(id=ids.PREP_DONE, data=False),
        dcc.Store(id=ids.PREP_HEAD, data=head),
    )


def _where(job: Job) -> Any:
    if job.where == FROM_CACHE:
        return "reading the session's cached analysis"
    where = f"workers analysed on {job.where}" if job.where else "starting the workers…"
    if job.head_ready.is_set():
        pod = "/pod?" + urlencode({"session": job.session})
        return [dcc.Link("The Pod Viewer", href=pod), f" is ready. Op tables and rules: {where}"]
    return where


@dash.callback(
    Output(ids.PREP_BAR, "value"),
    Output(ids.PREP_BAR, "label"),
    Output(ids.PREP_WHERE, "children"),
    Output(ids.PREP_DONE, "data"),
    Output(ids.PREP_TICK, "disabled"),
    Input(ids.PREP_TICK, "n_intervals"),
    State(ids.PREP_SESSION, "children"),
    State(ids.PREP_HEAD, "data"),
    prevent_initial_call=True,
)
def _poll(_: int, session: str, head: bool) -> tuple[Any, Any, Any, Any, Any]:
    job = current().store.job(session)
    if job is None or job.finished.is_set() or (head and job.head_ready.is_set()):
        # done (or failed): show the page (or why), once: the ticks stop here, or each one
        # would render the page again while the last render is still being made
        return dash.no_update, dash.no_update, dash.no_update, True, True
    return job.done, f"{job.done}/{job.total}", _where(job), dash.no_update, dash.no_update


# Done: the page renders again from the finished analysis, in place (the shell's PAGE_RENDER
# is an input of Dash pages' router; a Location set to the URL it already has would not
# navigate, and a reload would load every script again: 0.5-1 s).
dash.clientside_callback(
    "function(done) { return done ? Date.now() : window.dash_clientside.no_update; }",
    Output(ids.PAGE_RENDER, "data"),
    Input(ids.PREP_DONE, "data"),
    prevent_initial_call=True,
)


@dash.callback(
    Output(ids.PREP_CANCEL, "disabled"),
    Output(ids.PREP_CANCEL, "children"),
    Input(ids.PREP_CANCEL, "n_clicks"),
    State(ids.PREP_SESSION, "children"),
    prevent_initial_call=True,
)
def _cancel(_: int, session: str) -> tuple[bool, str]:
    current().store.cancel(session)
    return True, "Cancelling… (tasks already running finish first)"


def download_frame(frame: pd.DataFrame, name: str, parquet_button: str) -> dict[str, Any]:
    """A ``dcc.Download`` payload of ``frame``: Parquet when the click that triggered the
    callback was on ``parquet_button``, else CSV (the pair from ``download_buttons``)."""
    if dash.ctx.triggered_id == parquet_button:
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        return dcc.send_bytes(buf.getvalue(), f"{name}.parquet")
    return dcc.send_data_frame(frame.to_csv, f"{name}.csv", index=False)


def card(*children: Any, **kw: Any) -> html.Div:
    return html.Div(list(children), className="podscope-card", **kw)


def download_buttons(csv_id: str, parquet_id: str) -> list[dbc.Button]:
    """The CSV and Parquet buttons of a table (their clicks feed ``download_frame``)."""
    return [
        dbc.Button("CSV", id=csv_id, size="sm", className="me-1"),
        dbc.Button("Parquet", id=parquet_id, size="sm"),
    ]


def table_header(title: str, csv_id: str, parquet_id: str) -> html.Div:
    """A table's title with its download buttons on the right."""
    return html.Div(
        [html.H5(title, className="me-auto"), *download_buttons(csv_id, parquet_id)],
        className="d-flex",
    )


ALL_WORKERS = "all"


def worker_picker(component_id: str, analysis: SessionAnalysis, value: str | None) -> dcc.Dropdown:
    """A dropdown of the session's workers (named by their tasks), with "all" first."""
    return dcc.Dropdown(
        id=component_id,
        options=[ALL_WORKERS, *worker_options(analysis)],
        value=value or ALL_WORKERS,
        clearable=False,
    )


def worker_options(analysis: SessionAnalysis) -> list[dict[str, str]]:
    """The session's workers as a dropdown's options: each labelled by its task where the
    capture names it (``SessionAnalysis.named``), its value the worker's label."""
    return [{"label": analysis.named(w), "value": w} for w in analysis.worker_names]


def chosen_worker(choice: str | None) -> str | None:
    """The worker a picker names, or None for all workers."""
    return None if not choice or choice == ALL_WORKERS else choice


#: Devices shown one badge each; past that (a pod), their busy spread and the least busy.
DEVICE_BADGES = 16
LEAST_BUSY = 5
#: Idle devices listed by name (the rest counted).
IDLE_LISTED = 50


def device_summary(analysis: SessionAnalysis, session: str | None = None) -> Any:
    """The session's GPUs/TPUs: the busy ones (``analyzers.pod.device_activity``'s one rule:
    work in a step, or any work event without steps) named with their busy time and, where
    steps exist, compute per step, each a link to the ops that ran on it (when ``session`` is
    given); the idle ones collapsed under one line that says so, with the work outside the
    steps an idle one ran. A pod's devices (more than ``DEVICE_BADGES`` busy) are said by
    their spread of busy shares and the least busy few. None when the session has no
    accelerator plane."""
    d = analysis.devices
    if d.empty:
        return None
    busy, idle = d[~d["idle"]], d[d["idle"]]
    several = d["worker"].nunique() > 1  # once: per worker, it was 0.5 s of a 1,024-host pod
    short = {w: w if several else "" for w in d["worker"].unique()}

    def label(r: Any) -> str:
        name = r.device.removeprefix("/device:")
        return f"{short[r.worker]} › {name}" if short[r.worker] else name

    def badge(r: Any) -> Any:
        return dbc.Badge(
            f"{label(r)} · {fmt_duration(r.busy_ms * 1e6)} busy ({fmt_share(r.busy_share)})"
            + (
                f" · {fmt_duration(r.compute_ms_per_step * 1e6)} compute/step · "
                f"{r.steps_busy}/{plural(r.steps, 'step')}"
                if r.steps
                else ""
            ),
            color="primary",
            className="me-1 text-decoration-none",
            **(
                {
                    "href": ops_href(session, str(r.worker), str(r.device)),
                    "title": f"Which ops dominate on {label(r)}: open Ops for this device",
                }
                if session
                else {}
            ),
        )

    if len(busy) > DEVICE_BADGES:  # a pod's thousands of devices: their spread, the least busy
        low, mid, high = (fmt_share(q) for q in busy["busy_share"].quantile([0, 0.5, 1]))
        spread = f"each {mid}" if low == high else f"{low}–{high}, median {mid}"
        head = (
            f"{len(busy)} busy on {plural(busy['worker'].nunique(), 'host')} · busy {spread}"
            " · least busy: "
        )
        shown = [badge(r) for r in busy.nsmallest(LEAST_BUSY, "busy_share").itertuples()]
    else:
        head, shown = f"{len(busy)} busy: ", [badge(r) for r in busy.itertuples()]
    listed = idle.head(IDLE_LISTED)
    return html.Div(
        [
            html.Span(head, className="me-1"),
            *shown,
            html.Details(
                [
                    html.Summary(
                        f"{len(idle)} idle (no work on the device in any step, or in the "
                        "capture when it has no steps)",
                        className="podscope-muted",
                    ),
                    html.Ul(
                        [
                            html.Li(
                                label(r)
                                + (
                                    f" ({r.events} events, {fmt_duration(r.busy_ms * 1e6)}, "
                                    "outside the steps)"
                                    if r.events
                                    else ""
                                )
                            )
                            for r in listed.itertuples()
                        ]
                        + (
                            [html.Li(f"… and {len(idle) - len(listed)} more")]
                            if len(idle) > len(listed)
                            else []
                        )
                    ),
                ],
                className="mt-1",
            )
            if len(idle)
            else None,
        ],
        id=ids.DEVICES,
    )


def ops_href(session: str, worker: str, device: str) -> str:
    """The Ops page showing what ran on one device of one worker, most expensive first."""
    return "/ops?" + urlencode({"session": session, "worker": worker, "device": device})
