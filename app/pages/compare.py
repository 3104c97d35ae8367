"""Compare: two sessions side by side — where a step's time goes in each, which ops changed."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
import pandas as pd
from dash import Input, Output, State, dcc, html

from podscope.analyzers.compare import compare_ops, compare_steps, traced_steps
from podscope.app import ids
from podscope.app.context import current
from podscope.app.figures.compare import compare_steps_figure, metric_label
from podscope.app.figures.pod import LABELS
from podscope.app.grid_source import records
from podscope.app.pages._common import (
    card,
    download_buttons,
    download_frame,
    load_session,
    session_of,
    with_query,
)
from podscope.app.store import SessionSummary
from podscope.app.units import grid_columns

dash.register_page(__name__, path="/compare", name="Compare", order=5)


def layout(session: str | None = None, baseline: str | None = None, **_: str) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None:
        return alert
    summaries = current().store.summaries()  # newest first
    others = [s.name for s in summaries if s.name != session]
    if not others:
        return dbc.Alert(
            "Comparing needs two sessions: capture or upload another one.", color="info"
        )
    why, problem = "", None
    if baseline is None:
        baseline, why = default_baseline(summaries, str(session))
    elif baseline == session:
        problem = f"The baseline in this link, {baseline}, is the session itself: pick another."
    elif baseline not in others:
        problem = f"The baseline in this link, {baseline}, is not a session here: pick one."
    shown = None if problem else baseline
    return html.Div(
        [
            card(
                dbc.Row(
                    [
                        dbc.Col(html.Strong("Baseline"), md="auto", className="pt-2"),
                        dbc.Col(
                            dcc.Dropdown(
                                id=ids.CMP_BASELINE,
                                options=others,
                                value=shown,
                                clearable=False,
                                placeholder="pick a baseline session",
                            ),
                            md=5,
                        ),
                        dbc.Col(html.Div(["New: ", html.Code(session)]), md=4, className="pt-2"),
                        dbc.Col(
                            download_buttons(ids.CMP_CSV, ids.CMP_PARQUET),
                            md=2,
                            className="text-end",
                        ),
                    ]
                ),
                html.Div(why, id=ids.CMP_WHY, className="podscope-muted mt-1"),
                dcc.Download(id=ids.CMP_DOWNLOAD),
            ),
            html.Div(
                dbc.Alert(problem, color="warning")
                if problem
                else body(f"?{urlencode({'session': session})}", shown)
                if shown
                else dbc.Alert(why, color="info"),
                id=ids.CMP_BODY,
            ),
        ]
    )


def _compare(
    search: str | None, baseline: str | None
) -> tuple[str | None, pd.DataFrame | None, pd.DataFrame | None, Any]:
    """(session, step comparison, op comparison, alert — or, when both load, the note on
    the workers left out) of the URL's session vs ``baseline``."""
    session, new, alert = load_session(session_of(search))
    _, base, base_alert = load_session(baseline) if baseline else (None, None, None)
    if new is None or base is None:
        return session, None, None, alert or base_alert
    (base_pod, cats), (new_pod, _) = base.own_pod(new), new.own_pod(base)
    steps = compare_steps(base_pod, new_pod, cats)
    ops = compare_ops(
        base.op_table_for("op", None),
        new.op_table_for("op", None),
        base.capture_steps,
        new.capture_steps,
    )
    left_out = sorted(
        {f"{w} ({run})" for run, a in (("baseline", base), ("new", new)) for w in a.pod["worker"]}
        - {
            f"{w} ({run})"
            for run, a in (("baseline", base), ("new", new))
            for w in traced_steps(a.pod)["worker"]
        }
    )
    note = (
        f"Left out: {', '.join(left_out)}: traced with the Python tracer only, they record "
        "no ops and no categories, so their steps do not count."
        if left_out
        else None
    )
    return session, steps, ops, note


def _percent(change: pd.Series) -> pd.Series:
    return change.map(lambda c: None if pd.isna(c) else f"{c:+.1%}")


def default_baseline(summaries: list[SessionSummary], session: str) -> tuple[str | None, str]:
    """The baseline Compare proposes for ``session`` (``summaries`` newest first) and why: the
    session before it in its run with the same kind of trace, else the newest earlier one of
    that kind in another run; (None, why) when there is none (an Android upload is never the
    baseline of a TensorFlow capture)."""
    by_name = {s.name: s for s in summaries}
    me = by_name.get(session)
    if me is None:
        return None, f"{session} is not a session here."
    names = [s.name for s in summaries]
    older = [by_name[n] for n in names[names.index(session) + 1 :] if by_name[n].kind == me.kind]
    same_run = [s for s in older if s.run == me.run]
    run = f"run {me.run}" if me.run else "the logdir's own run"
    if same_run:
        return same_run[0].name, f"Default baseline: the session before this one in {run}."
    if older:
        return (
            older[0].name,
            f"Default baseline: the newest earlier {me.kind} session ({run} has no earlier one).",
        )
    return None, f"No earlier {me.kind} session to compare with: pick a baseline."


@dash.callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.CMP_BASELINE, "value"),
    Input(ids.CMP_BODY, "id"),  # see page_drawn
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def choose(baseline: str | None, _body: str, search: str | None) -> Any:
    """A baseline a person picks goes into the URL, default or not: the link reopens this
    very comparison however many sessions arrive later; the page is drawn from the URL."""
    if baseline is None:
        return dash.no_update
    return with_query(search, baseline=baseline)


def body(search: str | None, baseline: str | None) -> Any:
    """The comparison of the URL's session with ``baseline``: figure, step table, op grid."""
    session, steps, ops, note = _compare(search, baseline)
    if steps is None or ops is None:
        return note
    unit = (
        "per traced worker-step (a step lasts as long as its busiest device's span, as on the "
        "Pod Viewer)"
        if ops["per"].eq("step").all()
        else "per worker over the whole capture (a session has no steps)"
    )
    shown = (
        steps.round(3)
        .assign(
            change=_percent(steps["change"]),
            metric=steps["metric"].map(lambda m: LABELS.get(m, metric_label(m))),
        )
        .rename(
            columns={
                "base_ms": f"baseline {baseline} (ms)",
                "new_ms": f"new {session} (ms)",
                "delta": "change (ms)",
                "change": "change (%)",
            }
        )
    )
    rows = ops.head(500).round(3).assign(change=_percent(ops["change"].head(500)))
    return [
        *_xla_section(search, baseline),
        card(dcc.Graph(figure=compare_steps_figure(steps, str(baseline), str(session)))),
        card(
            html.H5("Step time and its categories (ms per traced worker-step, busiest device)"),
            dbc.Table.from_dataframe(shown, size="sm", striped=True),
            html.P(note, id=ids.CMP_NOTE, className="podscope-muted") if note else None,
        ),
        card(
            html.H5(f"Ops by change in self time (µs {unit}), largest first"),
            dag.AgGrid(
                rowData=records(rows),
                columnDefs=grid_columns(rows.columns, pinned="op_name"),
                defaultColDef={"sortable": True, "filter": True, "resizable": True},
                dashGridOptions={"pagination": True, "paginationPageSize": 25},
                style={"height": "560px"},
            ),
        ),
    ]


def _xla_section(search: str | None, baseline: str | None) -> list[Any]:
    """Both sessions' XLA ops, op by op (``analyzers.hlo_stats.compare_hlo``): which HLO
    instruction got slower per occurrence, and what that costs the new session; nothing when
    either session runs no XLA program."""
    from podscope.analyzers.hlo_stats import compare_hlo

    _, new, _ = load_session(session_of(search))
    _, base, _ = load_session(baseline) if baseline else (None, None, None)
    if new is None or base is None or new.xla_ops.empty or base.xla_ops.empty:
        return []
    table = compare_hlo(base.hlo_table(), new.hlo_table()).head(500)
    rows = table.round(3).assign(change=_percent(table["change"]))
    return [
        card(
            html.H5("XLA ops by change in time per occurrence (µs), the costliest change first"),
            dag.AgGrid(
                id=ids.CMP_XLA,
                rowData=records(rows),
                columnDefs=grid_columns(rows.columns, pinned="hlo_op_name"),
                defaultColDef={"sortable": True, "filter": True, "resizable": True},
                dashGridOptions={"pagination": True, "paginationPageSize": 25},
                style={"height": "480px"},
            ),
        )
    ]


@dash.callback(
    Output(ids.CMP_DOWNLOAD, "data"),
    Input(ids.CMP_CSV, "n_clicks"),
    Input(ids.CMP_PARQUET, "n_clicks"),
    State(ids.CMP_BASELINE, "value"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def download(_csv: int | None, _pq: int | None, baseline: str | None, search: str | None) -> Any:
    session, _, ops, _ = _compare(search, baseline)
    if ops is None:
        return dash.no_update
    return download_frame(ops, f"ops_{baseline}_vs_{session}", ids.CMP_PARQUET)
