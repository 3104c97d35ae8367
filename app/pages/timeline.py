"""Timeline: tracks per worker → plane → line; zoom, search, click an event for its stats.

Level of detail is decided on the server for every zoom (``app.figures.timeline``): the
browser never gets more than ~20 k bars, whatever the session size.
"""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html

from analyzers.session import SessionAnalysis
from app import ids
from app.figures.timeline import timeline_figure
from app.pages._common import card, chosen_worker, load_session, session_of, worker_picker

dash.register_page(__name__, path="/timeline", name="Timeline", order=3)


def _window(analysis: SessionAnalysis, relayout: dict[str, Any] | None) -> tuple[int, int, int]:
    """(t0, t1, base) in epoch ns: the zoom of ``relayout``, else the whole session."""
    index = analysis.timeline
    base, end = int(index.start.min()), int(index.end.max())
    if relayout and "xaxis.range[0]" in relayout:
        t0 = base + int(float(relayout["xaxis.range[0]"]) * 1e6)
        t1 = base + int(float(relayout["xaxis.range[1]"]) * 1e6)
        return max(base, t0), min(end, max(t1, t0 + 1000)), base
    return base, end, base


def layout(
    session: str | None = None, worker: str | None = None, q: str | None = None, **_: str
) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None:
        return alert
    if analysis.frames.events.empty:
        return card(html.H5("This session has no timed events."))
    t0, t1, base = _window(analysis, None)
    fig = timeline_figure(
        analysis.timeline, t0, t1, base, worker=chosen_worker(worker), highlight=q or ""
    )
    return html.Div(
        [
            card(
                dbc.Row(
                    [
                        dbc.Col(
                            worker_picker(ids.TL_WORKER, analysis, worker),
                            md=4,
                        ),
                        dbc.Col(
                            dbc.Input(
                                id=ids.TL_SEARCH,
                                placeholder="search event names…",
                                value=q or "",
                                debounce=True,
                            ),
                            md=4,
                        ),
                        dbc.Col(html.Div(id=ids.TL_STATS, className="podscope-muted"), md=4),
                    ]
                )
            ),
            card(dcc.Graph(id=ids.TL_GRAPH, figure=fig, config={"scrollZoom": True})),
            card(
                html.H6("Event details"),
                html.Div("Click an event.", id=ids.TL_DETAILS, className="podscope-mono"),
            ),
        ]
    )


@dash.callback(
    Output(ids.TL_GRAPH, "figure"),
    Output(ids.TL_STATS, "children"),
    Input(ids.TL_GRAPH, "relayoutData"),
    Input(ids.TL_WORKER, "value"),
    Input(ids.TL_SEARCH, "value"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def redraw(
    relayout: dict[str, Any] | None, worker: str, query: str | None, search: str | None
) -> tuple[Any, Any]:
    _, analysis, _ = load_session(session_of(search))
    if analysis is None:
        return dash.no_update, dash.no_update
    t0, t1, base = _window(analysis, relayout)
    fig = timeline_figure(
        analysis.timeline, t0, t1, base, worker=chosen_worker(worker), highlight=query or ""
    )
    meta = fig.layout.meta
    text = f"{meta['bars']:,} bars + density on {meta['dense_tracks']} tracks · {(t1 - t0) / 1e6:.3f} ms window"
    if query:
        text += f" · {int(analysis.timeline.matching(query).sum()):,} events match '{query}'"
    return fig, text


@dash.callback(
    Output(ids.TL_DETAILS, "children"),
    Input(ids.TL_GRAPH, "clickData"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def details(click: dict[str, Any] | None, search: str | None) -> Any:
    if not click or not click.get("points") or "customdata" not in click["points"][0]:
        return dash.no_update
    _, analysis, _ = load_session(session_of(search))
    if analysis is None:
        return dash.no_update
    fields = analysis.event_details(int(click["points"][0]["customdata"][0]))
    return html.Table(
        [html.Tr([html.Td(k, className="pe-3"), html.Td(str(v))]) for k, v in fields.items()]
    )
