"""Pod Viewer: the step-time breakdown of every worker and device, stragglers named."""

from __future__ import annotations

from typing import Any

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html

from podscope.analyzers.session import SessionAnalysis
from podscope.app import ids
from podscope.app.context import current
from podscope.app.figures.pod import (
    breakdown_bars_figure,
    step_heatmap_figure,
    step_time_lines_figure,
    straggler_evidence,
)
from podscope.app.grid_source import records
from podscope.app.pages._common import (
    NO_STEPS_HINT,
    card,
    device_summary,
    download_frame,
    index_of,
    load_session,
    ops_href,
    session_of,
    table_header,
    with_query,
)
from podscope.app.units import fmt_duration, grid_columns, plural

dash.register_page(__name__, path="/pod", name="Pod Viewer", order=1)


def step_title(analysis: SessionAnalysis, step: int | None) -> str:
    """The bars' title: the step and its step_num, or the number of steps averaged."""
    b = analysis.breakdown
    if step is None:
        n = b["step"].nunique()
        return "The only step" if n == 1 else f"All {n} steps (mean)"
    return f"Step {step} (step_num {b.loc[b['step'] == step, 'step_num'].iloc[0]})"


def straggler_badges(analysis: SessionAnalysis) -> list[Any]:
    """The named straggler with the evidence that names it (``straggler_evidence``)."""
    named, note = straggler_evidence(analysis.stragglers)
    if not named:
        return [dbc.Badge("no straggler", color="success")]
    badges: list[Any] = [dbc.Badge(t, color="danger", className="me-1") for t in named]
    return badges + ([html.Div(note, className="podscope-muted mt-1")] if note else [])


def layout(
    session: str | None = None, step: str | None = None, worker: str | None = None, **_: str
) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None:
        return alert
    b = analysis.breakdown
    notes = [
        html.Li(f"{r.worker}: {r.note}")
        for r in analysis.methods.itertuples()
        if r.method != "marker" and analysis.trace_kind != "android"  # no steps by nature
    ]
    notes += [
        html.Li(f"left out: {failure}") for failure in current().store.failures(session or "")
    ]
    missing = analysis.missing
    if len(missing):
        notes.append(
            html.Li(
                f"{len(missing)} steps are missing on some workers and are left out (XProf's rule: "
                "only steps every worker has)."
            )
        )
    if analysis.partial_note:
        notes.append(html.Li(analysis.partial_note[0].upper() + analysis.partial_note[1:] + "."))
    if b.empty:
        return html.Div(
            [
                card(
                    html.H5("No steps to show"),
                    html.Ul(notes) if notes else None,
                    html.P(NO_STEPS_HINT[analysis.trace_kind], id=ids.POD_HINT),
                )
            ]
        )
    n_steps = int(b["step"].max()) + 1
    chosen = index_of(step)
    selected = min(chosen, n_steps - 1) if chosen is not None else None
    badges = straggler_badges(analysis)
    rows, title = analysis.step_rows(selected), step_title(analysis, selected)
    table = analysis.pod_summary
    if worker:
        table = (
            table.assign(_sel=table["worker"] == worker)
            .sort_values("_sel", ascending=False)
            .drop(columns="_sel")
        )
    if "device" in table and session:  # which ops dominate on this device: one click
        links = [
            f"[ops]({ops_href(session, str(w), str(d))})"
            for w, d in zip(table["worker"], table["device"], strict=True)
        ]
        table = table.assign(ops=links)[["worker", "device", "ops", *table.columns[2:]]]
    return html.Div(
        [
            card(
                html.Div(
                    [
                        html.Span(
                            f"Session {session} · {analysis.tasks_text} · "
                            f"{plural(n_steps, 'step')} · mean step "
                            f"{fmt_duration(analysis.step_time_ns)}"
                            + (f" ({analysis.step_time_text})" if analysis.step_time_text else "")
                            + "  "
                        ),
                        *badges,
                    ],
                    id=ids.POD_BADGES,
                ),
                device_summary(analysis, session),
                html.Ul(notes, id=ids.POD_NOTES, className="podscope-muted mt-2")
                if notes
                else html.Div(id=ids.POD_NOTES),
                dbc.RadioItems(
                    id=ids.POD_MODE,
                    value="all" if selected is None else "step",
                    inline=True,
                    className="mt-2",
                    options=[
                        {"label": "All steps (mean)", "value": "all"},
                        {"label": "One step", "value": "step"},
                    ],
                ),
                dcc.Slider(
                    id=ids.POD_STEP,
                    min=0,
                    max=n_steps - 1,
                    step=1,
                    value=selected or 0,
                    disabled=selected is None,  # the mean of all steps has no step to pick
                    marks=None,
                    tooltip={"placement": "bottom", "always_visible": True},
                ),
            ),
            card(dcc.Graph(id=ids.POD_BARS, figure=breakdown_bars_figure(rows, title))),
            dbc.Row(
                [
                    dbc.Col(
                        card(
                            dcc.Graph(
                                id=ids.POD_LINES,
                                figure=step_time_lines_figure(analysis.pod, selected),
                            )
                        ),
                        md=6,
                    ),
                    dbc.Col(
                        card(
                            dcc.Graph(
                                id=ids.POD_HEATMAP, figure=step_heatmap_figure(analysis.lateness)
                            )
                            if analysis.lateness["worker"].nunique() > 1
                            else html.P(
                                "Arrival lateness compares workers: this session has one, so "
                                "there is no heat map.",
                                id=ids.POD_HEATMAP,
                                className="podscope-muted",
                            )
                        ),
                        md=6,
                    ),
                ]
            ),
            card(
                table_header("Per worker", ids.POD_CSV, ids.POD_PARQUET),
                dag.AgGrid(
                    id=ids.POD_TABLE,
                    rowData=records(table),
                    columnDefs=grid_columns(table.columns, pinned="worker", markdown=["ops"]),
                    defaultColDef={"sortable": True, "filter": True, "resizable": True},
                    dashGridOptions={"domLayout": "autoHeight"},
                ),
                dcc.Download(id=ids.POD_DOWNLOAD),
            ),
        ]
    )


@dash.callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.POD_STEP, "value"),
    Input(ids.POD_MODE, "value"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def select_step(step: int, mode: str, search: str | None) -> str:
    """The step chosen goes into the URL; the page is drawn from it (``layout``)."""
    return with_query(search, step=int(step or 0) if mode == "step" else None)


@dash.callback(
    Output(ids.POD_DOWNLOAD, "data"),
    Input(ids.POD_CSV, "n_clicks"),
    Input(ids.POD_PARQUET, "n_clicks"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def download(_csv: int | None, _pq: int | None, search: str | None) -> Any:
    session, analysis, _ = load_session(session_of(search))
    if analysis is None:
        return dash.no_update
    return download_frame(analysis.breakdown, f"pod_{session}", ids.POD_PARQUET)
