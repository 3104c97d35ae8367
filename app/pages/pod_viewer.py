"""Pod Viewer: the step-time breakdown of every worker and device, stragglers named."""

from __future__ import annotations

import base64
from typing import Any, NamedTuple
from urllib.parse import urlencode

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
import pandas as pd
from dash import ClientsideFunction, Input, Output, State, dcc, html

from podscope.analyzers import hosts as pod_hosts
from podscope.analyzers.session import SessionAnalysis
from podscope.app import ids
from podscope.app.context import current
from podscope.app.figures.hosts import (
    METRIC_LABELS,
    distribution_figure,
    host_heatmap_figure,
    step_spread_figure,
)
from podscope.app.figures.pod import (
    breakdown_bars_figure,
    step_heatmap_figure,
    step_time_lines_figure,
    straggler_evidence,
)
from podscope.app.grid_source import BLOCK, column_filters, records, rows_response
from podscope.app.pages._common import (
    NO_STEPS_HINT,
    card,
    device_summary,
    download_frame,
    index_of,
    load_session,
    ops_href,
    query_of,
    session_of,
    table_header,
)
from podscope.app.units import fmt_duration, grid_columns, plural

dash.register_page(__name__, path="/pod", name="Pod Viewer", order=1)

#: More workers than this and the page summarises the pod (a host × step heat map, each
#: category's spread, the outliers with their cause, search and grouping); the per-host bars
#: and lines appear for a selection of at most this many.
POD_HOSTS = 32


def step_title(analysis: SessionAnalysis, step: int | None) -> str:
    """The bars' title: the step and its step_num, or the number of steps averaged."""
    b = analysis.breakdown
    if step is None:
        n = b["step"].nunique()
        return "The only step" if n == 1 else f"All {n} steps (mean)"
    return f"Step {step} (step_num {b.loc[b['step'] == step, 'step_num'].iloc[0]})"


def straggler_badges(analysis: SessionAnalysis) -> list[Any]:
    """The named straggler with the evidence that names it (``straggler_evidence``)."""
    named, note = straggler_evidence(analysis.shown(analysis.stragglers))
    if not named:
        return [dbc.Badge("no straggler", color="success")]
    badges: list[Any] = [dbc.Badge(t, color="danger", className="me-1") for t in named]
    return badges + ([html.Div(note, className="podscope-muted mt-1")] if note else [])


def worker_notes(analysis: SessionAnalysis) -> list[Any]:
    """How each worker's steps were found, where not from markers: one line per note, the
    workers it is about named (a pod's 512 workers with one note make one line)."""
    if analysis.trace_kind == "android":  # no steps by nature
        return []
    m = analysis.methods[analysis.methods["method"] != "marker"]
    lines = []
    for note, g in m.groupby("note", sort=False):
        names = sorted(g["worker"].astype(str))
        who = names[0] if len(names) == 1 else f"{names[0]} and {plural(len(names) - 1, 'more')}"
        lines.append(html.Li(f"{who}: {note}"))
    return lines


def layout(
    session: str | None = None,
    step: str | None = None,
    worker: str | None = None,
    hosts: str | None = None,
    group: str | None = None,
    heat: str | None = None,
    hz: str | None = None,
    **_: str,
) -> Any:
    session, analysis, alert = load_session(session, head=True)
    if analysis is None:
        return alert
    b = analysis.breakdown
    notes = worker_notes(analysis)
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
    header = _header(analysis, session, n_steps, selected, badges, notes)
    if len(analysis.worker_names) > POD_HOSTS:
        view = PodView.of(analysis, hosts, group, heat, hz)
        return html.Div([header, *pod_body(analysis, session, selected, view)])
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
    table = analysis.with_task(table)  # the job's own names for its workers
    return html.Div(
        [
            header,
            card(
                dcc.Graph(
                    id=ids.POD_BARS, figure=breakdown_bars_figure(analysis.shown(rows), title)
                )
            ),
            dbc.Row(
                [
                    dbc.Col(
                        card(
                            dcc.Graph(
                                id=ids.POD_LINES,
                                figure=step_time_lines_figure(
                                    analysis.shown(analysis.pod), selected
                                ),
                            )
                        ),
                        md=6,
                    ),
                    dbc.Col(
                        card(
                            dcc.Graph(
                                id=ids.POD_HEATMAP,
                                figure=step_heatmap_figure(analysis.shown(analysis.lateness)),
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


def _header(
    analysis: SessionAnalysis,
    session: str | None,
    n_steps: int,
    selected: int | None,
    badges: list[Any],
    notes: list[Any],
) -> Any:
    """The session, its straggler named with the evidence, the notes, and the step picker."""
    return card(
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
    )


# The URL writers of the Pod Viewer's controls run in the browser (``assets/shell.js``):
# their inputs are new on every view drawn, and Dash calls such a callback whose output, the
# shell's URL, is outside the page, whatever ``prevent_initial_call`` says.
dash.clientside_callback(
    ClientsideFunction("podscopePod", "step"),
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.POD_STEP, "value"),
    Input(ids.POD_MODE, "value"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)


@dash.callback(
    Output(ids.POD_DOWNLOAD, "data"),
    Input(ids.POD_CSV, "n_clicks"),
    Input(ids.POD_PARQUET, "n_clicks"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def download(_csv: int | None, _pq: int | None, search: str | None) -> Any:
    session, analysis, _ = load_session(session_of(search), head=True)
    if analysis is None:
        return dash.no_update
    return download_frame(analysis.breakdown, f"pod_{session}", ids.POD_PARQUET)


# ------------------------------------------------------------------------------ pod size


#: The heat map's metric unless the URL names another.
DEFAULT_METRIC = "lateness"


class PodView(NamedTuple):
    """What the URL asks of a pod: the hosts picked (``hosts``: names or patterns), their
    grouping (``group``: a prefix level of the host names, or ``map:<digest>`` of an uploaded
    mapping), the heat map's metric (``heat``) and its zoom (``hz``: x0,x1,y0,y1)."""

    chosen: list[str]
    query: str
    group: str
    groups: pd.Series | None
    levels: int
    metric: str
    zoom: tuple[float, ...] | None
    lost_map: bool
    every: bool  # every host is chosen

    def pick(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The rows of ``frame`` of the chosen hosts (by its ``worker``)."""
        if self.every:  # a filter of 9,216 names by 1,024 costs 0.01 s a frame
            return frame
        return frame[frame["worker"].astype(str).isin(set(self.chosen)).to_numpy()]

    @classmethod
    def of(
        cls,
        analysis: SessionAnalysis,
        hosts: str | None,
        group: str | None,
        heat: str | None,
        hz: str | None,
    ) -> PodView:
        """The view the URL's ``hosts``, ``group``, ``heat`` and ``hz`` ask for (an unknown
        value: the default)."""
        workers = analysis.worker_names
        levels = pod_hosts.name_levels(workers)
        group = group or ""
        groups, lost = None, False
        if group.startswith("map:"):
            mapping = current().host_maps.get(group[4:])
            lost = mapping is None
            groups = None if mapping is None else pod_hosts.group_of(workers, mapping=mapping)
        elif group.isdigit() and 1 <= int(group) <= levels:
            groups = pod_hosts.group_of(workers, int(group))
        else:
            group = ""
        metric = heat if heat in pod_hosts.METRICS else DEFAULT_METRIC
        zoom = None
        try:
            parts = tuple(float(v) for v in (hz or "").split(","))
            zoom = parts if len(parts) == 4 else None
        except ValueError:
            pass
        chosen = pod_hosts.select_hosts(workers, hosts)
        every = len(chosen) == len(workers)
        return cls(chosen, hosts or "", group, groups, levels, metric, zoom, lost, every)


def pod_body(
    analysis: SessionAnalysis, session: str | None, selected: int | None, view: PodView
) -> list[Any]:
    """The Pod Viewer for a pod: which hosts matter and why first, then the whole pod."""
    workers = analysis.worker_names
    if not view.chosen:  # a search that matches no host: say so, keep the controls
        return [
            card(
                _pod_controls(analysis, view),
                html.Div(
                    f"{len(workers)} hosts · no host matches {view.query!r}",
                    id=ids.POD_SUMMARY,
                    className="mt-2",
                ),
            )
        ]
    pod, late = view.pick(analysis.pod), view.pick(analysis.lateness)
    grid = pod_hosts.host_step_matrix(pod, late, view.metric)
    rows_are = "host"
    if view.groups is not None:
        grid, rows_are = pod_hosts.grouped_matrix(grid, view.groups), "group"
    out = analysis.outliers
    if len(out) and view.groups is not None:
        out.insert(0, "group", view.groups.reindex(out["worker"]).fillna("").to_numpy())
    out = view.pick(out) if len(out) else out
    n_groups = view.groups[view.chosen].nunique() if view.groups is not None else 0
    summary = (
        f"{len(workers)} hosts · {len(view.chosen)} selected"
        + (f" · {n_groups} groups" if n_groups else "")
        + f" · {plural(len(out), 'outlier')}"
    )
    return [
        card(
            _pod_controls(analysis, view), html.Div(summary, id=ids.POD_SUMMARY, className="mt-2")
        ),
        card(
            html.H5("Outliers: the hosts that matter, worst first"),
            _outliers_table(analysis, out, session)
            if len(out)
            else html.P(
                "No host stands out: none is late by 5 % of the median step or named culprit.",
                className="podscope-muted",
            ),
            id=ids.POD_OUTLIERS,
        ),
        card(
            dcc.Graph(
                id=ids.POD_HEATMAP,
                figure=host_heatmap_figure(grid, view.metric, rows_are, view.zoom),
            )
            if len(grid)
            else html.P("No steps on the selected hosts.", id=ids.POD_HEATMAP)
        ),
        dbc.Row(
            [
                dbc.Col(
                    card(
                        dcc.Graph(
                            id=ids.POD_DIST,
                            figure=distribution_figure(pod_hosts.category_distribution(pod)),
                        )
                    ),
                    md=6,
                ),
                dbc.Col(
                    card(
                        dcc.Graph(
                            id=ids.POD_LINES,
                            figure=step_spread_figure(pod, list(out["worker"].head(5)))
                            if len(out)
                            else step_spread_figure(pod, []),
                        )
                    ),
                    md=6,
                ),
            ]
        ),
        card(_pod_bars(analysis, selected, view)),
        card(
            table_header("Per host", ids.POD_CSV, ids.POD_PARQUET),
            _host_table(analysis, view),
            dcc.Download(id=ids.POD_DOWNLOAD),
        ),
    ]


def _pod_controls(analysis: SessionAnalysis, view: PodView) -> Any:
    workers = analysis.worker_names
    sample = pod_hosts.host_name(workers[0]) if workers else ""
    options = [{"label": "each host", "value": ""}]
    options += [
        {"label": f"{pod_hosts.group_of([sample], k).iloc[0]}… (name level {k})", "value": str(k)}
        for k in range(1, view.levels + 1)
    ]
    if view.group.startswith("map:") and not view.lost_map:
        options.append({"label": "the uploaded mapping", "value": view.group})
    metrics = ["step_time", "lateness"] + [
        c
        for c in pod_hosts.METRICS[2:]
        if f"{c}_ns" in analysis.pod and (analysis.pod[f"{c}_ns"].astype(float) > 0).any()
    ]
    return html.Div(
        [
            dbc.Row(
                [
                    dbc.Col(
                        [
                            dbc.Label("Hosts", html_for=ids.POD_HOSTS),
                            dbc.Input(
                                id=ids.POD_HOSTS,
                                value=view.query,
                                debounce=True,
                                placeholder="name or pattern: s1-*, *-h00?, r03 (commas: any)",
                            ),
                        ],
                        md=4,
                    ),
                    dbc.Col(
                        [
                            dbc.Label("Group by", html_for=ids.POD_GROUP),
                            dcc.Dropdown(
                                id=ids.POD_GROUP,
                                options=options,
                                value=view.group if not view.lost_map else "",
                                clearable=False,
                            ),
                        ],
                        md=3,
                    ),
                    dbc.Col(
                        [
                            dbc.Label("Heat map of", html_for=ids.POD_METRIC),
                            dcc.Dropdown(
                                id=ids.POD_METRIC,
                                options=[{"label": METRIC_LABELS[m], "value": m} for m in metrics],
                                value=view.metric,
                                clearable=False,
                            ),
                        ],
                        md=3,
                    ),
                    dbc.Col(
                        [
                            dbc.Label("Mapping file"),
                            dcc.Upload(
                                id=ids.POD_MAP_UPLOAD,
                                children=dbc.Button(
                                    "host,group CSV…", color="secondary", outline=True
                                ),
                                max_size=4 << 20,
                            ),
                        ],
                        md=2,
                    ),
                ]
            ),
            html.Div(
                "The uploaded mapping is no longer held by the server: upload it again."
                if view.lost_map
                else "",
                id=ids.POD_MAP_ERROR,
                className="text-danger small mt-1",
            ),
            dcc.Store(id=ids.POD_MAP_KEY),
            dcc.Store(id=ids.POD_DEFAULT_METRIC, data=DEFAULT_METRIC),
        ]
    )


def _outliers_table(analysis: SessionAnalysis, out: pd.DataFrame, session: str | None) -> Any:
    out = analysis.with_task(out)  # the job's name for each host, beside its label
    shown = out.assign(
        worker=[f"[{w}]({_pod_href(session, hosts=w)})" for w in out["worker"]],
        timeline=[
            f"[timeline](/timeline?{urlencode({'session': session or '', 'worker': w})})"
            for w in out["worker"]
        ],
    )
    return dag.AgGrid(
        rowData=records(shown),
        columnDefs=grid_columns(shown.columns, pinned="worker", markdown=["worker", "timeline"]),
        defaultColDef={"sortable": True, "resizable": True},
        dashGridOptions={"domLayout": "autoHeight"},
    )


def _pod_href(session: str | None, **query: str) -> str:
    return "/pod?" + urlencode({"session": session or "", **query})


def _pod_bars(analysis: SessionAnalysis, selected: int | None, view: PodView) -> Any:
    """Each selected host's bars when few enough to read, else each group's (their means),
    else what to do to see them."""
    rows, title = analysis.step_rows(selected), step_title(analysis, selected)
    rows = view.pick(rows)
    if len(view.chosen) <= POD_HOSTS:
        return _bars(analysis.shown(rows), title)
    if view.groups is not None and view.groups[view.chosen].nunique() <= POD_HOSTS:
        by = view.groups.reindex(rows["worker"].astype(str)).to_numpy()
        numeric = [c for c in rows.columns if c.endswith("_ns")]
        means = rows.groupby([by, rows["device"]])[numeric].mean().reset_index()
        means = means.rename(columns={"level_0": "worker"}).assign(split=True)
        return _bars(means, f"{title}: each group's mean host")
    return html.P(
        f"{len(view.chosen)} hosts selected: pick at most {POD_HOSTS} (a pattern such as "
        f"{pod_hosts.group_of(view.chosen[:1], max(view.levels, 1)).iloc[0]}-*, or a click on an "
        f"outlier) or group them into at most {POD_HOSTS} groups to see the bars.",
        id=ids.POD_BARS_NOTE,
        className="podscope-muted",
    )


#: More bar rows than this are too many to read, and slow to draw (plotly.js draws each bar
#: as an SVG path: 32 groups of hosts with 8 GPUs, 256 rows in 9 categories, took 1.5 s):
#: each host's (or group's) accelerators are then one bar, their mean.
BAR_ROWS = 64


def _bars(rows: pd.DataFrame, title: str) -> Any:
    """The bars of ``rows`` (``step_rows``: one per worker × device), each worker's
    accelerators as their mean when there are more than ``BAR_ROWS`` rows."""
    accelerator = (rows["device"].astype(str) != "/host:CPU").to_numpy()
    if len(rows) > BAR_ROWS and accelerator.any():
        devices = rows[accelerator]
        by = devices.groupby(devices["worker"].astype(str), sort=False)
        means = by[[c for c in rows.columns if c.endswith("_ns")]].mean()
        means["device"] = [f"{n} devices' mean" for n in by.size()]
        means["split"] = by["split"].all() if "split" in devices else True
        rows = pd.concat([rows[~accelerator], means.reset_index(names="worker")])
        title += " (each one's accelerators: their mean)"
    return dcc.Graph(id=ids.POD_BARS, figure=breakdown_bars_figure(rows, title))


def _host_rows(analysis: SessionAnalysis, view: PodView) -> pd.DataFrame:
    """The per-host table's rows: each selected host's devices (``pod_summary``), with their
    group when the hosts are grouped; the lateness beside the names, where the eye starts."""
    table = analysis.pod_summary
    table = view.pick(table)
    if view.groups is not None:
        table = table.assign(group=view.groups.reindex(table["worker"].astype(str)).to_numpy())
    table = analysis.with_task(table)
    first = [c for c in ("task", "worker", "group", "device", "straggler_score") if c in table]
    return table[[*first, *[c for c in table.columns if c not in first]]]


def _host_table(analysis: SessionAnalysis, view: PodView) -> Any:
    """The per-host table, its rows a block at a time (``host_block``): 1,024 hosts of 8 GPUs
    are 9,216 rows, 3.6 MB of JSON that the browser parsed and laid out on every view."""
    head = _host_rows(analysis, view).head(1)
    return dag.AgGrid(
        id=ids.POD_TABLE,
        rowModelType="infinite",
        columnDefs=column_filters(grid_columns(head.columns, pinned="worker"), head),
        defaultColDef={"sortable": True, "resizable": True},
        dashGridOptions={"pagination": True, "paginationPageSize": 20, "cacheBlockSize": BLOCK},
        style={"height": "480px"},  # 512 hosts are not 18,000 px of page
    )


@dash.callback(
    Output(ids.POD_TABLE, "getRowsResponse"),
    Input(ids.POD_TABLE, "getRowsRequest"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def host_block(request: dict[str, Any] | None, search: str | None) -> Any:
    """The block of the per-host table the grid asks for, after its sort and filters, for the
    hosts and grouping of the URL."""
    session, analysis, _ = load_session(session_of(search), head=True)
    if not request or analysis is None or session is None:
        return dash.no_update
    q = query_of(search)
    view = PodView.of(analysis, q.get("hosts"), q.get("group"), q.get("heat"), q.get("hz"))
    return rows_response(_host_rows(analysis, view), request)


dash.clientside_callback(
    ClientsideFunction("podscopePod", "hosts"),
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.POD_HOSTS, "value"),
    Input(ids.POD_GROUP, "value"),
    Input(ids.POD_METRIC, "value"),
    State(ids.URL, "search"),
    State(ids.POD_DEFAULT_METRIC, "data"),
    prevent_initial_call=True,
)
dash.clientside_callback(
    ClientsideFunction("podscopePod", "zoom"),
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.POD_HEATMAP, "relayoutData"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
dash.clientside_callback(
    ClientsideFunction("podscopePod", "mapping"),
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.POD_MAP_KEY, "data"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)


#: The largest host mapping file (100,000 hosts of long names fit in it).
MAX_MAP_BYTES = 8 << 20


@dash.callback(
    Output(ids.POD_MAP_KEY, "data"),
    Output(ids.POD_MAP_ERROR, "children"),
    Input(ids.POD_MAP_UPLOAD, "contents"),
    State(ids.POD_MAP_UPLOAD, "filename"),
    prevent_initial_call=True,
)
def upload_mapping(contents: str | None, name: str | None) -> Any:
    """A ``host,group`` file groups the hosts by it (its key goes to the page's store, and
    from there into the URL); a bad one says which line and why."""
    if not contents:
        return dash.no_update, dash.no_update
    if not isinstance(contents, str) or len(contents) > MAX_MAP_BYTES * 4 // 3 + 1024:
        # base64, checked before it is decoded; a crafted request may send anything
        return (
            dash.no_update,
            f"{name or 'the file'}: not a file of at most {MAX_MAP_BYTES >> 20} MiB",
        )
    try:
        text = base64.b64decode(contents.split(",", 1)[1]).decode("utf-8")
        mapping = pod_hosts.parse_mapping(text)
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        return dash.no_update, f"{name or 'the file'}: {e}"
    if not mapping:
        return dash.no_update, f"{name or 'the file'}: no host,group line"
    return f"map:{current().host_maps.add(mapping)}", ""
