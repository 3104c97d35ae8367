"""Timeline: a flame chart per worker › plane › line; zoom, pan (W/A/S/D), search, steps.

Everything the user chose is in the URL (workers, search, step, hidden planes, the window), so a
copied link, a reload, back and forward show the same view: the controls write the URL and the
page is drawn from it, its chart included (one chart per change, no empty graph between). The
bars are drawn on a canvas in the browser (``assets/timeline_canvas.js``) from numbers the server
sends for the window and a window's width on each side: a zoom or pan inside that is redrawn
there, with no request; the browser asks for finer bars (``TL_WINDOW``) only past that range or
``REFINE`` times deeper. Plotly's own relayout events after a redraw (``autosize``) carry no
range and are ignored, so a zoom stays where it was put. A zoom replaces the URL's ``t0``/``t1``
in place (no history entry per zoom, as Perfetto keeps none) and ``TL_VIEW``, which the controls
keep. Level of detail is decided on the server (``app.figures.timeline``): the browser never
gets more than ~20 k bars and cells. Only the workers shown are loaded (a few at a time), so a
session of hundreds of workers opens as fast as one of four.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import dash
import dash_bootstrap_components as dbc
import numpy as np
from dash import ClientsideFunction, Input, Output, State, dcc, html

from podscope.analyzers.session import WORKERS_KEPT, SessionAnalysis
from podscope.analyzers.timeline import COUNTER_PLANE, SCHED_PLANE, TimelineIndex, short_line
from podscope.app import ids
from podscope.app.figures.timeline import timeline_figure
from podscope.app.pages._common import (
    card,
    index_of,
    load_session,
    session_of,
    with_query,
    worker_options,
)
from podscope.app.units import fmt_duration

dash.register_page(__name__, path="/timeline", name="Timeline", order=3)

HELP = (
    "Drag to zoom into a time range, scroll to zoom, W/S zoom in/out, A/D pan, double-click "
    "for the whole capture; click an event for its details."
)


def _default_workers(analysis: SessionAnalysis, worker: str | None) -> list[str]:
    """The workers in the URL (comma-separated), else the named straggler, else the first."""
    names = analysis.worker_names
    chosen = [w for w in (worker or "").split(",") if w in names]
    if chosen:
        return chosen
    if len(names) < 2:  # no straggler among one worker: not worth its analysis
        return names[:1]
    s = analysis.stragglers if len(analysis.breakdown) else None
    if s is not None and len(s) and s["straggler"].any():
        return [str(s.loc[s["straggler"], "worker"].iloc[0])]
    return names[:1]


#: The outliers the "hosts that matter" link opens at once.
OUTLIERS_SHOWN = 4


def _outlier_pick(analysis: SessionAnalysis, session: str | None) -> Any:
    """In a session of many workers, a link that shows the ones that matter (the Pod Viewer's
    outliers: culprits and late hosts, worst first): hosts are picked by them or by the
    Workers box's search, never from hundreds of checkboxes."""
    if len(analysis.worker_names) < 3 or analysis.breakdown.empty:
        return None
    out = analysis.outliers.head(OUTLIERS_SHOWN)
    if out.empty:
        return None
    picked = ",".join(out["worker"])
    return html.Div(
        [
            "Hosts that matter: ",
            html.A(
                ", ".join(out["worker"]),
                href="/timeline?" + urlencode({"session": session or "", "worker": picked}),
                id=ids.TL_OUTLIERS,
            ),
            " (the Pod Viewer's outliers; the Workers box searches by name)",
        ],
        className="podscope-muted mt-2",
    )


def _planes(analysis: SessionAnalysis) -> list[str]:
    """The planes a user can collapse: every plane with events (``CPU``, ``GPU:0``), and the
    Android tracks (``sched``, ``counters``) where the first workers have them."""
    planes = analysis.meta.planes
    planes = planes[planes["n_events"] > 0]["plane"].astype(str)
    short = planes.str.rsplit("/", n=1).str[-1].str.replace(r"^(host|device):", "", regex=True)
    android = set()
    for worker in analysis.worker_names[:WORKERS_KEPT]:
        index = analysis.timeline(worker)
        if (index.rows < 0).any():
            android.add(SCHED_PLANE)
        if index.counters.labels:
            android.add(COUNTER_PLANE)
    return sorted({*short.unique(), *android})


#: Above this many rows, a session with GPUs/TPUs opens with its host plane collapsed.
MAX_OPEN_ROWS = 80


def _planes_shown(analysis: SessionAnalysis, workers: list[str]) -> list[str]:
    """Planes open at first: all, unless the chart would be taller than ``MAX_OPEN_ROWS``
    rows and there are device planes (a TPU host has a hundred threads): then those."""
    planes = _planes(analysis)
    devices = [p for p in planes if p.startswith(("GPU", "TPU"))]
    rows = sum(int((analysis.timeline(w).max_depth + 1).sum()) for w in workers)
    return devices if devices and rows > MAX_OPEN_ROWS else planes


def _span(indexes: list[TimelineIndex]) -> tuple[int, int]:
    starts = [int(i.start.min()) for i in indexes if len(i.start)]
    ends = [int(i.end.max()) for i in indexes if len(i.end)]
    return (min(starts), max(ends)) if starts else (0, 1)


def _labelled(label: str, control: Any, width: int) -> dbc.Col:
    """A control under its label, ``width`` of 12 columns wide."""
    return dbc.Col([dbc.Label(label, html_for=control.id), control], md=width)


def layout(
    session: str | None = None,
    worker: str | None = None,
    q: str | None = None,
    step: str | None = None,
    hide: str | None = None,
    t0: str | None = None,
    t1: str | None = None,
    **_: str,
) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None:
        return alert
    if not any(
        len(analysis.timeline(w).start) or analysis.timeline(w).counters.labels
        for w in analysis.worker_names[:WORKERS_KEPT]
    ):
        return card(html.H5("This session has no timed events, scheduling slices or counters."))
    steps = sorted(int(s) for s in analysis.aligned["step"].unique())
    chosen = index_of(step) if index_of(step) in steps else None
    workers = _default_workers(analysis, worker)
    window = _url_window(t0, t1) or (
        step_window(analysis, chosen, workers) if chosen is not None else None
    )
    planes = _planes(analysis)
    shown = (  # "none": all shown
        [p for p in planes if p not in hide.split(",")]
        if hide
        else _planes_shown(analysis, workers)
    )
    figure, stats = drawn(analysis, window, workers, q or "", shown, chosen)
    return html.Div(
        [
            card(
                dbc.Row(
                    [
                        _labelled(
                            "Workers",
                            dcc.Dropdown(
                                id=ids.TL_WORKER,
                                options=worker_options(analysis),
                                value=workers,
                                multi=True,
                                clearable=False,
                            ),
                            4,
                        ),
                        _labelled(
                            "Search",
                            dbc.Input(
                                id=ids.TL_SEARCH,
                                placeholder="event name contains… (hlo:NAME: an XLA op's own events)",
                                value=q or "",
                                debounce=True,
                            ),
                            3,
                        ),
                        _labelled(
                            "Step",
                            dcc.Dropdown(
                                id=ids.TL_STEP,
                                options=[{"label": f"step {s}", "value": s} for s in steps],
                                value=chosen,
                                placeholder="go to a step…" if steps else "no steps found",
                                disabled=not steps,
                            ),
                            2,
                        ),
                        _labelled(
                            "Planes shown",
                            dcc.Checklist(
                                id=ids.TL_PLANES,
                                options=planes,
                                value=shown,
                                inline=True,
                                inputClassName="me-1",
                                labelClassName="me-3",
                            ),
                            3,
                        ),
                    ]
                ),
                _outlier_pick(analysis, session),
                html.Div(HELP, className="podscope-muted mt-2"),
                html.Div(stats, id=ids.TL_STATS, className="podscope-muted"),
            ),
            # epoch ns as text: the browser's numbers are doubles, exact only to 2**53
            dcc.Store(id=ids.TL_WINDOW),  # what the browser asks for past the bars it has
            dcc.Store(id=ids.TL_VIEW, data=_as_text(window)),
            dcc.Store(id=ids.TL_DRAWN, data=[workers, q or "", chosen, shown]),
            dcc.Store(id=ids.TL_CLICK),
            card(
                dcc.Loading(
                    dcc.Graph(
                        id=ids.TL_GRAPH,
                        figure=figure,
                        # double click: assets/timeline_canvas.js (the whole capture)
                        config={"scrollZoom": True, "displaylogo": False, "doubleClick": False},
                    ),
                    delay_show=400,
                )
            ),
            card(
                html.H6("Event details"),
                html.Div("Click an event.", id=ids.TL_DETAILS, className="podscope-mono"),
            ),
        ]
    )


def _as_text(window: dict[str, int] | None) -> dict[str, str] | None:
    return {k: str(v) for k, v in window.items()} if window else None


def _stored_window(window: dict[str, Any] | None) -> dict[str, int] | None:
    """A window the browser sent (``TL_WINDOW``, ``TL_VIEW``: epoch ns as text, exact past
    2**53), if it is a sane one."""
    return _url_window(str(window.get("t0")), str(window.get("t1"))) if window else None


def _url_window(t0: str | None, t1: str | None) -> dict[str, int] | None:
    """The window the URL names (epoch ns), if it names a sane one."""
    lo, hi = index_of_ns(t0), index_of_ns(t1)
    return {"t0": lo, "t1": hi} if lo is not None and hi is not None and hi > lo else None


def index_of_ns(value: str | None) -> int | None:
    """A time in ns from a URL: ASCII digits only, at most 20 of them."""
    return (
        int(value) if value and value.isascii() and value.isdigit() and len(value) <= 20 else None
    )


# Dash reports the controls' values back on every view drawn (their inputs are new, whatever
# ``prevent_initial_call`` says); the browser passes on only values that differ from those the
# view was drawn with (``assets/shell.js``) to a store of the shell (``TL_CHOSEN``: not new on
# a view drawn), so a view drawn costs no round trip to the URL writer, which needs the
# analysis' defaults and runs on the server.
dash.clientside_callback(
    ClientsideFunction("podscopeTimeline", "changed"),
    Output(ids.TL_CHOSEN, "data"),
    Input(ids.TL_WORKER, "value"),
    Input(ids.TL_SEARCH, "value"),
    Input(ids.TL_STEP, "value"),
    Input(ids.TL_PLANES, "value"),
    State(ids.TL_DRAWN, "data"),
    prevent_initial_call=True,
)


@dash.callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.TL_CHOSEN, "data"),
    State(ids.TL_DRAWN, "data"),
    State(ids.TL_VIEW, "data"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def choose(
    chosen: list[Any] | None,
    drawn: list[Any] | None,
    window: dict[str, Any] | None,
    search: str | None,
) -> Any:
    """The controls' values (``TL_CHOSEN``: workers, search, step, planes) go into the URL (a
    new history entry); the page is drawn from it. A new step opens on that step's window;
    any other change keeps the window."""
    if not isinstance(chosen, list) or len(chosen) != 4:
        return dash.no_update
    workers, query, step, planes = chosen
    if not isinstance(workers, list) or not isinstance(planes, list):
        return dash.no_update
    _, analysis, _ = load_session(session_of(search))
    if analysis is None:
        return dash.no_update
    # Defaults stay out of the URL: the values a page is drawn with are reported back when
    # it is drawn, and writing them would add a history entry that Back returns to forever.
    default = _default_workers(analysis, None)
    shown = [p for p in _planes(analysis) if p in (planes or [])]
    hidden = [p for p in _planes(analysis) if p not in shown]
    default_shown = _planes_shown(analysis, workers or default)
    view = _stored_window(window)
    new_step = not drawn or len(drawn) != 4 or step != drawn[2]
    keep = view if not new_step and view else {}
    return with_query(
        search,
        worker=None if (workers or default) == default else ",".join(workers or []),
        q=query,
        step=step,
        hide=None if shown == default_shown else ",".join(hidden) or "none",
        t0=keep.get("t0"),
        t1=keep.get("t1"),
    )


def step_window(analysis: SessionAnalysis, step: int, workers: list[str]) -> dict[str, int] | None:
    """The window of aligned ``step`` on ``workers`` (all workers if they lack it), with a
    tenth of it as margin on each side."""
    a = analysis.aligned
    rows = a[(a["step"] == step) & a["worker"].astype(str).isin(workers)]
    if rows.empty:
        rows = a[a["step"] == step]
    if rows.empty:
        return None
    t0, t1 = int(rows["start_ns"].min()), int(rows["end_ns"].max())
    pad = max(1000, (t1 - t0) // 10)
    return {"t0": t0 - pad, "t1": t1 + pad}


def drawn(
    analysis: SessionAnalysis,
    window: dict[str, int] | None,
    workers: list[str],
    query: str,
    planes: list[str],
    step: int | None,
) -> tuple[Any, str]:
    """The chart of ``window`` (the whole capture if None) on the first ``WORKERS_KEPT`` of
    ``workers``, ``query``'s hits yellow, ``planes`` open, and its status line."""
    shown = [w for w in workers if w in analysis.worker_names][:WORKERS_KEPT]
    indexes = [analysis.timeline(w) for w in shown]
    first, end = _span(indexes)
    base = min(analysis.start_ns or first, first)  # the axis counts from the session start
    t0, t1 = (window["t0"], window["t1"]) if window else (first, end)
    fig = timeline_figure(
        indexes,
        t0,
        t1,
        base,
        highlight=query,
        steps=analysis.aligned,
        selected_step=step,
        hidden_planes=[p for p in _planes(analysis) if p not in planes],
    )
    meta = fig.layout.meta
    parts = [
        f"{meta['bars']:,} events drawn",
        f"{meta['dense_tracks']} rows with density of sub-pixel events"
        if meta["dense_tracks"]
        else "",
        f"window {fmt_duration(t1 - t0)}",
    ]
    if query:
        hits = sum(int(np.count_nonzero(i.matching(query))) for i in indexes)
        parts.append(f"{hits:,} events match '{query}' (yellow)")
    if len(workers) > WORKERS_KEPT:
        parts.append(f"showing the first {WORKERS_KEPT} workers chosen")
    return fig, " · ".join(p for p in parts if p)


@dash.callback(
    Output(ids.TL_GRAPH, "figure"),
    Output(ids.TL_STATS, "children"),
    Input(ids.TL_WINDOW, "data"),
    State(ids.TL_WORKER, "value"),
    State(ids.TL_SEARCH, "value"),
    State(ids.TL_PLANES, "value"),
    State(ids.TL_STEP, "value"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def refine(
    window: dict[str, Any] | None,
    workers: list[str] | None,
    query: str | None,
    planes: list[str] | None,
    step: int | None,
    search: str | None,
) -> tuple[Any, Any]:
    """Bars for the window the browser asks for (``TL_WINDOW``: past what it has, or finer;
    without ``t0``/``t1``: the whole capture; ``n``: the ask's number, sent back in the meta).
    The controls are not inputs: they write the URL, and the page drawn from it comes with its
    chart (one chart per change, no empty graph in between). Dash also calls this when it
    draws the page, with the store's empty value: nothing to do."""
    if window is None:
        return dash.no_update, dash.no_update
    _, analysis, _ = load_session(session_of(search))
    if analysis is None:
        return dash.no_update, dash.no_update
    fig, stats = drawn(
        analysis, _stored_window(window), workers or [], query or "", planes or [], step
    )
    fig.layout.meta["asked"] = window.get("n")  # answers can come out of order: which ask
    return fig, stats


@dash.callback(
    Output(ids.TL_DETAILS, "children"),
    Input(ids.TL_CLICK, "data"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def details(click: dict[str, Any] | None, search: str | None) -> Any:
    """The clicked bar's event (``assets/timeline_canvas.js`` sends its worker, its row and
    the chart's ``base_ns``: not the figure, up to 20 k bars the browser would upload)."""
    click = click if isinstance(click, dict) else {}
    if index_of(str(click.get("row", "")).lstrip("-")) is None:
        return dash.no_update
    _, analysis, _ = load_session(session_of(search))
    if analysis is None:
        return dash.no_update
    worker, row = str(click.get("worker", "")), int(str(click["row"]))
    try:
        fields = analysis.event_details(worker, row)
    except KeyError:
        return html.Div("That event is no longer loaded; click it again.")
    base = index_of_ns(str(click.get("base_ns", "")))
    return html.Table(
        [
            html.Tr([html.Td(k, className="pe-3"), html.Td(str(v))])
            for k, v in readable(fields, base or 0).items()
        ]
    )


#: How event columns read on the page.
FIELD_NAMES = {
    "plane": "plane",
    "name": "name",
    "depth": "nesting depth",
    "step_num": "step number",
    "group_id": "step group (XProf)",
    "tf_op": "TF op",
    "op_type": "op type",
    "is_eager": "eager",
}


def readable(fields: dict[str, object], base: int) -> dict[str, object]:
    """An event's fields as a person reads them: durations with units, the start in ms on the
    chart's axis (since ``base``, the session start shown), the thread without TSL's numeric
    id (``tf_Compute/-1631…`` → ``tf_Compute``); stats whose names start with ``_`` are TF's
    internals (``_r``, ``_ct``) and are left out."""
    out: dict[str, object] = {}
    for k, v in fields.items():
        if k == "dur_ps":
            out["duration"] = fmt_duration(int(str(v)) / 1000)
        elif k == "self_ps":
            out["self time"] = fmt_duration(int(str(v)) / 1000)
        elif k == "start_ns":
            out["starts at"] = f"{(int(str(v)) - base) / 1e6:,.3f} ms since the session start"
        elif k == "line":
            out["thread"] = short_line("", str(v))
        elif k.startswith("_"):
            continue
        elif isinstance(v, float):
            out[FIELD_NAMES.get(k, k)] = f"{v:,.4g}"
        else:
            out[FIELD_NAMES.get(k, k)] = v
    return out
