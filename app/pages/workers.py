"""Workers: why a multi-worker job is slow — which worker holds the others back and why, who
waits in the collectives, which input stage cannot keep up, memory per worker, and the
parameter servers' load. Every row links to the timeline (or Ops page) where it shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import urlencode

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
import pandas as pd
from dash import Input, Output, State, dcc, html

from podscope.analyzers.attribution import MIXED, ranked_roles, worker_causes
from podscope.analyzers.diagnostics.speech import cause_words, no_input_pipeline
from podscope.analyzers.session import SessionAnalysis
from podscope.app import ids
from podscope.app.grid_source import BLOCK, column_filters, records, rows_response
from podscope.app.pages._common import card, download_frame, load_session, session_of
from podscope.app.units import first_of, fmt_duration, grid_columns, in_ms

dash.register_page(__name__, path="/workers", name="Workers", order=4)

#: The tables a user can download (the page's sections), by dropdown value.
TABLES: dict[str, tuple[str, Callable[[SessionAnalysis], pd.DataFrame]]] = {
    "slow_steps": ("Slow worker-steps", lambda a: a.slow_steps),
    "roles": ("Culprits and victims", lambda a: a.roles),
    "collective_summary": ("Collectives per worker", lambda a: a.collective_summary),
    "collectives": ("Collective instances", lambda a: a.collectives),
    "input_pipeline": ("Input pipeline per worker", lambda a: a.input_pipeline),
    "iterators": ("tf.data iterators", lambda a: a.iterators),
    "memory_report": ("Memory per allocator", lambda a: a.memory_report),
    "ps_balance": ("Parameter servers", lambda a: a.ps_balance),
}


def link(path: str, label: str = "open", **query: object) -> str:
    """A markdown link for a grid cell (``[open](/timeline?session=…)``)."""
    shown = {k: str(v) for k, v in query.items() if v is not None and v == v}
    return f"[{label}]({path}?{urlencode(shown)})"


def _in_view(
    frame: pd.DataFrame, links: tuple[str, ...], pinned: str | None, origin: int | None
) -> pd.DataFrame:
    """``frame`` in ms (instants since ``origin``), the pinned column, the step and the links
    first (in view, not scrolled off)."""
    view = in_ms(frame, origin)
    lead = [c for c in (pinned, "step", *links) if c in view]
    return view[lead + [c for c in view.columns if c not in lead]]


def grid(
    frame: pd.DataFrame,
    links: tuple[str, ...] = (),
    pinned: str | None = "worker",
    origin: int | None = None,
) -> dag.AgGrid:
    """A read-only grid of every row of ``frame`` (durations in ms, instants in ms since
    ``origin``): as high as its rows for a table of one row per worker or so; for a pod's
    hundreds, a box of ``SCROLLED_HEIGHT`` that scrolls (its rows drawn as they show)."""
    view = _in_view(frame, links, pinned, origin)
    tall = len(view) > AUTO_HEIGHT_ROWS
    return dag.AgGrid(
        rowData=records(view),
        columnDefs=grid_columns(view.columns, pinned=pinned, markdown=links),
        defaultColDef={"sortable": True, "filter": True, "resizable": True},
        dashGridOptions={} if tall else {"domLayout": "autoHeight"},
        style={"height": SCROLLED_HEIGHT} if tall else None,
    )


#: Up to this many rows a grid is as high as its rows; more (a pod) scroll in a box.
AUTO_HEIGHT_ROWS, SCROLLED_HEIGHT = 25, "420px"


class Paged(NamedTuple):
    """A table of the page that grows with steps or iterators, served a block at a time: its
    rows (in ns/ps, in the table's order), the link each row of a block opens, its pinned
    column. (A named tuple: Dash loads page modules outside ``sys.modules``.)"""

    rows: Callable[[SessionAnalysis], pd.DataFrame]
    links: Callable[[pd.DataFrame, SessionAnalysis, str], list[str]]
    pinned: str


def paged_grid(component_id: str, a: SessionAnalysis, height: str) -> dag.AgGrid:
    """The grid of ``PAGED[component_id]``: 20 rows a page, the rows a block at a time from
    ``_block_of`` (sort, filters and pages apply to every row)."""
    paged = PAGED[component_id]
    # one row, with the link's column where the rows' links go: the columns and their filters
    head = paged.rows(a).head(1).assign(timeline="")
    head = _in_view(head, ("timeline",), paged.pinned, a.start_ns)
    return dag.AgGrid(
        id=component_id,
        rowModelType="infinite",
        columnDefs=column_filters(
            grid_columns(head.columns, pinned=paged.pinned, markdown=("timeline",)), head
        ),
        defaultColDef={"sortable": True, "resizable": True},
        dashGridOptions={"pagination": True, "paginationPageSize": 20, "cacheBlockSize": BLOCK},
        style={"height": height},
    )


def _block_of(component_id: str, request: dict[str, Any], search: str | None) -> Any:
    """The block of ``PAGED[component_id]``'s rows its grid asks for, with their links."""
    session, a, _ = load_session(session_of(search))
    if not request or a is None or session is None:
        return dash.no_update
    paged = PAGED[component_id]
    return rows_response(
        _in_view(paged.rows(a), (), paged.pinned, a.start_ns),
        request,
        lambda part: records(part.assign(timeline=paged.links(part, a, session))),
    )


def empty(text: str) -> html.P:
    return html.P(text, className="podscope-muted")


def nothing(title: str, why: str) -> Any:
    """A section without data: its title and why there is none."""
    return card(html.H5(title), empty(why))


def with_ops_links(frame: pd.DataFrame, session: str) -> pd.DataFrame:
    """``frame`` with an ``ops`` column linking each row's worker to the Ops page."""
    return frame.assign(ops=[link("/ops", session=session, worker=w) for w in frame["worker"]])


#: Victims named one by one up to this many; a pod's are summed up in one line.
NAMED_VICTIMS = 6


def culprits_section(a: SessionAnalysis, session: str) -> Any:
    roles, slow = a.roles, a.slow_steps
    culprit = roles[roles["role"] == "culprit"]
    if culprit.empty:
        late = slow[slow["role"] == "late"]
        spread = (
            f" ({len(late)} late worker-steps, spread over {late['worker'].nunique()} "
            f"worker{'s' if late['worker'].nunique() != 1 else ''}: noise, not one slow worker)"
            if len(late)
            else ""
        )
        verdict: Any = dbc.Alert(
            f"No worker arrives late in most of its steps{spread}: nobody holds the others back.",
            color="success",
        )
    else:
        w = str(culprit["worker"].iloc[0])
        mine = slow[(slow["worker"] == w) & (slow["role"] == "late")]
        named = worker_causes(mine).reindex([w]).fillna({"cause": MIXED, "share": 0.0}).iloc[0]
        said = cause_words(str(named["cause"]), torch=a.trace_kind == "pytorch")[0]
        cause = (
            f"{said}, {named['share']:.0%} of its lateness"
            if named["cause"] != MIXED
            else "mixed: no component is two thirds of its lateness"
        )
        victims = roles[roles["role"] == "victim"]
        if len(victims) <= NAMED_VICTIMS:
            waits = ", ".join(
                f"{a.named(r.worker)} waits {fmt_duration(r.mean_wait_ms * 1e6)} per step"
                for r in victims.itertuples()
            )
        else:  # a pod: one line, not 511 names (each one's wait is in the table)
            wait = victims["mean_wait_ms"].astype(float) * 1e6
            waits = (
                f"{len(victims)} workers wait for it: {fmt_duration(wait.median())} per step "
                f"(median; from {fmt_duration(wait.min())} to {fmt_duration(wait.max())})"
            )
        late_too = roles[roles["role"] == "slow"]["worker"].astype(str).tolist()
        also = (
            " Slow itself too, though less (late in nearly every step, and waiting for it): "
            + ", ".join(a.named(x) for x in late_too[:NAMED_VICTIMS])
            + (
                f" and {len(late_too) - NAMED_VICTIMS} more"
                if len(late_too) > NAMED_VICTIMS
                else ""
            )
            + "."
            if late_too
            else ""
        )
        verdict = dbc.Alert(
            [
                html.Strong(f"{a.named(w)} is the culprit"),
                f" (late in {len(mine)} of {int(culprit['steps'].iloc[0])} steps, by "
                f"{fmt_duration(float(mine['excess_ns'].mean()))} on average; cause: {cause}). ",
                waits + "." if waits else "",
                also,
            ],
            color="danger",
        )
    estimated = a.arrivals[a.arrivals["estimated"]]["worker"].unique()
    named = ", ".join(a.named(str(w)) for w in estimated[:NAMED_VICTIMS]) + (
        f" and {len(estimated) - NAMED_VICTIMS} more" if len(estimated) > NAMED_VICTIMS else ""
    )
    note = (
        empty(
            f"{named}: traced with the Python tracer only; its own work "
            "is taken as the traced workers' median in each step, so its arrival is decided by "
            "its step start (a slow step inside would not show)."
        )
        if len(estimated)
        else None
    )
    return card(
        html.H5("Culprits and victims"),
        verdict,
        grid(a.with_task(ranked_roles(roles, a.stragglers)), origin=a.start_ns),  # latest first
        note,
        html.H6(
            "Slow worker-steps (cause: one component ≥ 80 % of the step's excess, else mixed; "
            "largest: that component either way)",
            className="mt-3",
        ),
        paged_grid(ids.WK_SLOW, a, "420px")
        if len(slow)
        else empty(
            "No slow worker-step: no worker is late against the others, no step is "
            "beyond its worker's mean + 3 σ."
        ),
    )


def collectives_section(a: SessionAnalysis, session: str) -> Any:
    s = a.collective_summary
    if s.empty:
        return nothing("Collectives", "No collective ops or kernels in this capture.")
    measured = bool((s["measured"] > 0).any())
    return card(
        html.H5("Collectives"),
        grid(s, origin=a.start_ns),
        None
        if measured
        else empty(
            "Each collective has one traced participant (the safe plan traces the chief's ops "
            "alone): skew, last arriver and waits need two; the culprits section estimates "
            "them from step starts."
        ),
        html.H6("Instances", className="mt-3"),
        paged_grid(ids.WK_COLLECTIVES, a, "360px"),
    )


def input_section(a: SessionAnalysis, session: str) -> Any:
    it, summary = a.iterators, a.input_pipeline
    if it.empty:
        why = no_input_pipeline(a)
        return nothing("Input pipeline", why[0].upper() + why[1:] + ".")
    advice = [
        html.Li(
            [
                html.Strong(f"{a.named(r.worker)}: "),
                f"bottleneck {r.bottleneck_stage}"
                + (f" ({r.user_name})" if r.user_name else "")
                + f", {r.bottleneck_work_share:.0%} of the pipeline's work. {r.suggestion}",
            ]
        )
        for r in summary[summary["bottleneck"] != ""].itertuples()
    ]
    return card(
        html.H5("Input pipeline"),
        html.Ul(advice),
        grid(summary.drop(columns=["slowest_call_start_ns", "suggestion"]), origin=a.start_ns),
        html.H6(
            "Iterators as a tree, consumer above its inputs (self time as XProf's input op "
            "table; an asynchronous stage's self time is waiting for its producer, not work)",
            className="mt-3",
        ),
        paged_grid(ids.WK_ITERATORS, a, "360px"),
    )


def memory_section(a: SessionAnalysis, session: str) -> Any:
    report = a.memory_report
    if report.empty:
        return nothing(
            "Memory",
            "No allocator events: TF records them for BFC allocators (GPU hosts, or CPU "
            "with TF_CPU_ALLOCATOR_USE_BFC=true).",
        )
    leaks = report[report["leak"]]
    verdict = (
        dbc.Alert(
            "Heap grows every step: "
            + "; ".join(
                f"{r.worker} {r.allocator} +{r.growth_bytes_per_step / 2**20:,.3f} MiB per step"
                for r in leaks.itertuples()
            ),
            color="danger",
        )
        if len(leaks)
        else None
    )
    # a GPU's live blocks ran to 36 kB of text in one cell; the download names them all
    shown = report.assign(top_live=report["top_live"].map(lambda t: first_of(t, 5)))
    return card(
        html.H5("Memory"),
        verdict,
        grid(with_ops_links(shown, session), links=("ops",), origin=a.start_ns),
    )


def ps_section(a: SessionAnalysis, session: str) -> Any:
    ps = a.ps_balance
    if ps.empty:
        return nothing(
            "Parameter servers",
            "No parameter-server task (one that applies variable updates, computes no "
            "gradients and runs no training steps).",
        )
    view = with_ops_links(ps, session)
    return card(
        html.H5("Parameter servers"),
        empty("TF's trace has no tensor sizes on _Send / ReadVariableOp: the load is time."),
        grid(view, links=("ops",), origin=a.start_ns),
    )


def layout(session: str | None = None, **_: str) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None or session is None:
        return alert
    return html.Div(
        [
            card(
                dbc.Row(
                    [
                        dbc.Col(html.H4("Why is the job slow across workers?"), md=7),
                        dbc.Col(
                            dcc.Dropdown(
                                id=ids.WK_TABLE,
                                options=[{"label": t, "value": k} for k, (t, _) in TABLES.items()],
                                value="slow_steps",
                                clearable=False,
                            ),
                            md=3,
                        ),
                        dbc.Col(
                            [
                                dbc.Button("CSV", id=ids.WK_CSV, size="sm", className="me-1"),
                                dbc.Button("Parquet", id=ids.WK_PARQUET, size="sm"),
                            ],
                            md=2,
                            className="text-end",
                        ),
                    ]
                ),
                dcc.Download(id=ids.WK_DOWNLOAD),
            ),
            culprits_section(analysis, session),
            collectives_section(analysis, session),
            input_section(analysis, session),
            memory_section(analysis, session),
            ps_section(analysis, session),
        ]
    )


def _slow_links(rows: pd.DataFrame, _: SessionAnalysis, session: str) -> list[str]:
    return [
        link("/timeline", session=session, worker=w, step=s)
        for w, s in zip(rows["worker"], rows["step"], strict=True)
    ]


def _instance_links(rows: pd.DataFrame, a: SessionAnalysis, session: str) -> list[str]:
    """The timeline of the last arriver (or the one traced participant) at that step."""
    keys = ["key", "step", "occurrence"]
    mine = a.collective_participants.merge(rows[keys].drop_duplicates(), on=keys)
    who = (
        mine.sort_values("last", ascending=False, kind="stable")
        .drop_duplicates(keys)
        .set_index(keys)["worker"]
    )
    return [
        link("/timeline", session=session, worker=who.get((k, st, o)), step=st, q=k)
        for k, st, o in zip(rows["key"], rows["step"], rows["occurrence"], strict=True)
    ]


def _iterator_tree(a: SessionAnalysis) -> pd.DataFrame:
    """Iterators as a tree: each worker's, consumer above its inputs, indented by depth."""
    tree = a.iterators.sort_values(["worker", "iterator"], kind="stable")
    return tree.assign(
        tree=["\u2003" * d + s for d, s in zip(tree["depth"], tree["stage"], strict=True)]
    ).drop(columns=["parent", "depth", "stage"])


def _iterator_links(rows: pd.DataFrame, _: SessionAnalysis, session: str) -> list[str]:
    return [
        link("/timeline", session=session, worker=w, q=i)
        for w, i in zip(rows["worker"], rows["iterator"], strict=True)
    ]


#: The page's tables that grow with steps, collectives or iterators, by grid id.
PAGED = {
    ids.WK_SLOW: Paged(lambda a: a.slow_steps, _slow_links, "worker"),
    ids.WK_COLLECTIVES: Paged(lambda a: a.collectives, _instance_links, "key"),
    ids.WK_ITERATORS: Paged(_iterator_tree, _iterator_links, "tree"),
}


def _serve_blocks(component_id: str) -> None:
    dash.callback(
        Output(component_id, "getRowsResponse"),
        Input(component_id, "getRowsRequest"),
        State(ids.URL, "search"),
        prevent_initial_call=True,
    )(lambda request, search: _block_of(component_id, request, search))


for _grid in PAGED:
    _serve_blocks(_grid)


@dash.callback(
    Output(ids.WK_DOWNLOAD, "data"),
    Input(ids.WK_CSV, "n_clicks"),
    Input(ids.WK_PARQUET, "n_clicks"),
    State(ids.WK_TABLE, "value"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def download(_csv: int | None, _pq: int | None, table: str, search: str | None) -> Any:
    session, analysis, _ = load_session(session_of(search))
    if analysis is None or table not in TABLES:
        return dash.no_update
    return download_frame(TABLES[table][1](analysis), f"{table}_{session}", ids.WK_PARQUET)
