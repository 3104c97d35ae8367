"""XLA ops: XProf's HLO op table, the roofline and the op profile of JAX, TPU and
``jit_compile`` sessions, per worker, device and execution; the URL holds the whole view."""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import urlencode

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
import pandas as pd
from dash import ClientsideFunction, Input, Output, State, dcc, html

from podscope.analyzers.hlo_stats import op_profile
from podscope.analyzers.session import SessionAnalysis
from podscope.analyzers.timeline import XLA_OP_SEARCH
from podscope.app import ids
from podscope.app.context import current
from podscope.app.figures.xla import (
    hlo_graph_figure,
    memory_figure,
    op_profile_figure,
    roofline_figure,
)
from podscope.app.grid_source import BLOCK, column_filters, records, rows_response
from podscope.app.pages._common import (
    ALL_WORKERS,
    card,
    chosen_worker,
    download_buttons,
    download_frame,
    index_of,
    load_session,
    query_of,
    with_query,
    worker_picker,
)
from podscope.app.store import SessionError
from podscope.app.units import grid_columns, plural
from podscope.trace_parsers import TraceParseError
from podscope.trace_parsers.hlo_graph import MAX_HOPS, module_text, neighbourhood

dash.register_page(__name__, path="/xla", name="XLA", order=3)

ALL = "all"
#: The grid's columns, in order (the rest of ``hlo_stats`` is in the downloads).
GRID_COLUMNS = [
    "hlo_op_name",
    "program",
    "category",
    "occurrences",
    "total_self_time_us",
    "self_time_percent",
    "xla_time_share",
    "avg_time_us",
    "model_flop_rate_gflops",
    "memory_bw_gibs",
    "operational_intensity",
    "bound_by",
    "roofline_efficiency",
    "above_peak",
    "compute_dtype",
    "framework_op",
    "source",
    "device",
    "worker",
    "program_id",
]
PROFILES = {"program": "program › category › op", "category": "category › op"}
COLORS = {"flops": "% of peak FLOP rate", "bandwidth": "% of peak HBM bandwidth"}


class View(NamedTuple):
    """What the page shows, from the URL (a named tuple: Dash loads page modules outside
    ``sys.modules``, where a dataclass cannot resolve its annotations)."""

    worker: str | None
    device: str | None
    devices: list[str]
    execution: int | None
    executions: int
    table: pd.DataFrame  # hlo_stats, with its IDLE row (``ops`` has none)
    peaks: pd.Series | None
    #: hlo_stats by execution (the roofline's per-step program points): all executions
    #: shown and more than one, else None
    steps: pd.DataFrame | None = None

    @property
    def ops(self) -> pd.DataFrame:
        """The table's op rows: the grid and the downloads, as XProf's HLO op table."""
        return self.table[self.table["category"].astype(str) != "IDLE"].reset_index(drop=True)


def view_of(
    analysis: SessionAnalysis,
    worker: str | None,
    device: str | None,
    execution: str | None,
    with_steps: bool = False,
) -> View:
    """The view a URL names; unknown values fall back to the defaults (all of them).
    ``with_steps``: the table by execution too (the roofline's per-step points)."""
    chosen = chosen_worker(worker) if worker in analysis.worker_names else None
    occ = analysis.xla_ops
    if chosen:
        occ = occ[occ["worker"].astype(str) == chosen]
    devices = sorted(set(occ["device"].astype(str)))
    device = device if device in devices else None
    k = index_of(execution)
    n_exec = (
        int(occ["execution"].max()) + 1
        if "execution" in occ and occ["execution"].notna().any()
        else 0
    )
    k = k if k is not None and k < n_exec else None
    if k is not None:
        occ = occ[(occ["execution"] == k).fillna(False).to_numpy(bool)]
    from podscope.analyzers.hlo_stats import hlo_stats

    steps = (
        hlo_stats(occ, analysis.device_peaks, per_device=device is not None, device=device)
        if with_steps and k is None and n_exec > 1
        else None
    )
    occ = occ.drop(columns=["execution"], errors="ignore")
    table = hlo_stats(
        occ,
        analysis.device_peaks,
        per_device=device is not None,
        device=device,
        idle=k is None,  # the op profile's IDLE node (XProf's table has no IDLE row)
        device_time=analysis.device_time,
    )
    peaks = analysis.device_peaks
    mine = peaks[peaks["worker"] == chosen] if chosen else peaks
    if device:
        mine = mine[mine["device"] == device]
    return View(
        chosen, device, devices, k, n_exec, table, mine.iloc[0] if len(mine) else None, steps
    )


def grid_frame(table: pd.DataFrame) -> pd.DataFrame:
    return table[[c for c in GRID_COLUMNS if c in table]]


def linked_records(view: pd.DataFrame, session: str) -> list[dict[str, Any]]:
    """Grid rows, each with a link to the op's events on the Timeline: the events the row
    counted, its kernels or TPU ops (an ``hlo:`` search; a name search also found the host
    thunks of that name, and ``cudnn-conv.10`` for ``cudnn-conv.1``)."""
    view = view.assign(
        timeline=[
            f"[events](/timeline?{urlencode({'session': session, 'worker': w, 'q': f'{XLA_OP_SEARCH}{q}'})})"
            for w, q in zip(view["worker"], view["hlo_op_name"], strict=True)
        ]
    )
    return records(view)


def _controls(analysis: SessionAnalysis, view: View, q: str | None) -> Any:
    executions = [{"label": "all executions", "value": ALL}] + [
        {"label": f"execution {k}", "value": str(k)} for k in range(view.executions)
    ]
    return dbc.Row(
        [
            dbc.Col(
                [dbc.Label("Worker"), worker_picker(ids.XLA_WORKER, analysis, view.worker)], md=3
            ),
            dbc.Col(
                [
                    dbc.Label("Device"),
                    dcc.Dropdown(
                        id=ids.XLA_DEVICE,
                        options=[{"label": "all devices", "value": ALL}]
                        + [{"label": d.removeprefix("/device:"), "value": d} for d in view.devices],
                        value=view.device or ALL,
                        clearable=False,
                    ),
                ],
                md=2,
            ),
            dbc.Col(
                [
                    dbc.Label("Program execution"),
                    dcc.Dropdown(
                        id=ids.XLA_EXECUTION,
                        options=executions,
                        value=str(view.execution) if view.execution is not None else ALL,
                        clearable=False,
                    ),
                ],
                md=2,
            ),
            dbc.Col(
                [
                    dbc.Label("Filter rows"),
                    dbc.Input(
                        id=ids.XLA_FILTER,
                        value=q or "",
                        placeholder="op, program, source…",
                        debounce=True,
                    ),
                ],
                md=3,
            ),
            dbc.Col(download_buttons(ids.XLA_CSV, ids.XLA_PARQUET), md=2, className="text-end"),
        ]
    )


def layout(
    session: str | None = None,
    worker: str | None = None,
    device: str | None = None,
    execution: str | None = None,
    profile: str | None = None,
    color: str | None = None,
    node: str | None = None,
    op: str | None = None,
    q: str | None = None,
    memory: str | None = None,
    hops: str | None = None,
    expand: str | None = None,
    **_: str,
) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None or session is None:
        return alert
    view = view_of(analysis, worker, device, execution, with_steps=True)
    if view.ops.empty:
        return card(
            _controls(analysis, view, q),
            dbc.Alert(_why_empty(analysis, view), color="secondary", id=ids.XLA_NOTE),
        )
    profile = profile if profile in PROFILES else "program"
    color = color if color in COLORS else "flops"
    tree = op_profile(view.table, analysis.device_peaks, profile)
    node = node if node and node in set(tree["id"]) else ""
    head = grid_frame(view.ops.head(1))
    columns = [*head.columns, "timeline"]
    return html.Div(
        [
            card(
                _controls(analysis, view, q), dcc.Download(id=ids.XLA_DOWNLOAD), _peaks_line(view)
            ),
            dbc.Row(
                [
                    dbc.Col(
                        card(
                            dcc.Graph(
                                id=ids.XLA_ROOFLINE,
                                figure=roofline_figure(view.ops, view.peaks, op, view.steps),
                            )
                        ),
                        md=6,
                    ),
                    dbc.Col(
                        card(
                            dbc.Row(
                                [
                                    dbc.Col(
                                        dbc.RadioItems(
                                            id=ids.XLA_PROFILE,
                                            value=profile,
                                            inline=True,
                                            options=[
                                                {"label": v, "value": k}
                                                for k, v in PROFILES.items()
                                            ],
                                        )
                                    ),
                                    dbc.Col(
                                        dbc.RadioItems(
                                            id=ids.XLA_COLOR,
                                            value=color,
                                            inline=True,
                                            options=[
                                                {"label": v, "value": k} for k, v in COLORS.items()
                                            ],
                                        )
                                    ),
                                ]
                            ),
                            dcc.Graph(
                                id=ids.XLA_PROFILE_GRAPH,
                                figure=op_profile_figure(tree, node, color),
                            ),
                            _node_table(tree, node),
                        ),
                        md=6,
                    ),
                ]
            ),
            card(
                html.H6(_title(view)),
                dag.AgGrid(
                    id=ids.XLA_TABLE,
                    rowModelType="infinite",
                    columnDefs=column_filters(
                        grid_columns(columns, pinned="hlo_op_name", markdown=["timeline"]), head
                    ),
                    defaultColDef={"sortable": True, "resizable": True},
                    dashGridOptions={
                        "pagination": True,
                        "paginationPageSize": 25,
                        "cacheBlockSize": BLOCK,
                        "rowSelection": {
                            "mode": "singleRow",
                            "checkboxes": False,
                            "enableClickSelection": True,
                        },
                    },
                    style={"height": "560px"},
                ),
            ),
            card(_details(view, op, session, hops, expand), id=ids.XLA_DETAILS),
            _memory(session, view.worker, memory),
        ]
    )


#: The memory viewer's table: what a buffer alive at the peak is (the rest is in the CLI's CSV).
MEMORY_COLUMNS = {
    "instruction": "buffer",
    "size_mib": "MiB",
    "kind": "kind",
    "opcode": "opcode",
    "shape": "shape",
    "op_name": "framework op",
    "source": "source",
}


def _memory(session: str, worker: str | None, chosen: str | None) -> Any:
    """XProf's memory viewer of one worker's programs (``SessionStore.memory``): a program
    (the URL's ``memory``, else the largest peak), its heap over its order of execution and
    the buffers alive at its peak, largest first."""
    try:
        views = current().store.memory(session, worker)
    except (SessionError, TraceParseError) as e:
        return card(dbc.Alert(f"Memory viewer: {e}", color="warning"), id=ids.XLA_MEMORY)
    programs = views.programs.sort_values("peak_heap_mib", ascending=False)
    refused = programs[programs["error"] != ""]
    programs = programs[programs["error"] == ""]
    notes = [
        html.P(f"{r.program} ({r.program_id}): not replayed: {r.error}", className="text-danger")
        for r in refused.itertuples()
    ]
    if programs.empty:
        return card(
            html.H6("Memory"),
            html.P(
                "This worker's capture carries no XLA program with a buffer assignment: "
                "nothing to show.",
                className="podscope-muted",
            ),
            *notes,
            id=ids.XLA_MEMORY,
        )
    keys = programs["program_id"].astype(str)
    one = programs[keys == chosen].iloc[0] if chosen in set(keys) else programs.iloc[0]
    pid = one["program_id"]
    heap = views.heap[views.heap["program_id"] == pid]
    buffers = views.buffers[views.buffers["program_id"] == pid].sort_values(
        "size_mib", ascending=False, kind="stable"
    )
    table = buffers[list(MEMORY_COLUMNS)].rename(columns=MEMORY_COLUMNS).fillna("")
    table["MiB"] = table["MiB"].map("{:,.3f}".format)
    table["source"] = table["source"].str.rsplit("/", n=1).str[-1]  # its file and line
    graph = (
        dcc.Graph(id=ids.XLA_MEMORY_GRAPH, figure=memory_figure(heap, one))
        if len(heap)
        else html.P(
            "No temporary buffer: the whole peak is the program's parameters, outputs and "
            "constants, alive from its start to its end.",
            className="podscope-muted mt-2",
            id=ids.XLA_MEMORY_GRAPH,
        )
    )
    return card(
        html.H6(
            f"Memory · {one['program']}: peak {one['peak_heap_mib']:,.1f} MiB, "
            f"{plural(len(buffers), 'buffer')} alive there"
        ),
        dcc.Dropdown(
            id=ids.XLA_MEMORY_PROGRAM,
            value=str(pid),
            clearable=False,
            options=[
                {
                    "label": f"{r.program} ({r.program_id}) · peak {r.peak_heap_mib:,.1f} MiB",
                    "value": str(r.program_id),
                }
                for r in programs.itertuples()
            ],
        ),
        graph,
        dbc.Table.from_dataframe(
            table, id=ids.XLA_MEMORY_TABLE, size="sm", striped=True, hover=True, responsive=True
        ),
        *notes,
        id=ids.XLA_MEMORY,
    )


def _peaks_line(view: View) -> Any:
    p = view.peaks
    if p is None:
        return html.P(
            "No GPU or TPU plane: the device's peaks are unknown (an XLA:CPU capture), so the "
            "roofline has no roof and 'bound by' is not judged.",
            className="podscope-muted mt-2",
        )
    flops = float(p["peak_flop_rate_gflops"])
    name = p["product"] or p["device_type"]
    text = (
        f"{name}: peak {flops / 1000:,.1f} TFLOP/s, HBM {p['peak_hbm_bw_gibs']:,.1f} GiB/s, "
        f"ridge {p['ridge_point']:,.1f} FLOP/byte ({p['peak_source']})"
        if flops > 0
        else f"{p['device_type']}: HBM {p['peak_hbm_bw_gibs']:,.1f} GiB/s; the trace states no peak FLOP "
        "rate (no vendor on the device plane), so compute utilization is not judged"
    )
    return html.P(text, className="podscope-muted mt-2", id=ids.XLA_PEAKS)


def _title(view: View) -> str:
    where = " · ".join(
        x
        for x in (
            view.worker or "all workers",
            (view.device or "").removeprefix("/device:") or "all devices",
            f"execution {view.execution}" if view.execution is not None else "all executions",
        )
        if x
    )
    return f"{plural(len(view.ops), 'XLA op')} by self time ({where}); click one for its HLO text and source"


def _node_table(tree: pd.DataFrame, node: str) -> Any:
    kids = (
        tree[tree["parent"] == node]
        if node
        else tree[(tree["parent"] == "") & (tree["level"] != "root")]
    )
    shown = kids[
        [
            "label",
            "occurrences",
            "self_time_us",
            "time_share",
            "flops_utilization",
            "bandwidth_utilization",
        ]
    ]
    shown = shown.assign(
        time_share=(shown["time_share"] * 100).round(2),
        flops_utilization=(shown["flops_utilization"] * 100).round(2),
        bandwidth_utilization=(shown["bandwidth_utilization"] * 100).round(2),
        self_time_us=shown["self_time_us"].round(1),
    ).rename(
        columns={
            "label": "node",
            "self_time_us": "self µs",
            "time_share": "% of time",
            "flops_utilization": "% peak FLOPs",
            "bandwidth_utilization": "% peak HBM",
        }
    )
    title = "(all)" if not node else node.replace("/", " › ")
    return html.Div(
        [
            html.H6(f"Inside {title}", className="mt-2"),
            dbc.Table.from_dataframe(shown.head(25), size="sm", striped=True),
        ],
        id=ids.XLA_NODE_TABLE,
    )


def _details(
    view: View, op: str | None, session: str, hops: str | None = None, expand: str | None = None
) -> Any:
    if not op or "/" not in op:
        return html.P(
            "Click an op in the table or on the roofline to see it here.",
            className="podscope-muted",
        )
    program_id, name = op.split("/", 1)
    rows = view.ops[(view.ops["program_id"] == program_id) & (view.ops["hlo_op_name"] == name)]
    if rows.empty:
        return html.P(f"{name} did not run in this view.", className="podscope-muted")
    r = rows.iloc[0]
    stack = [html.Li(line) for line in str(r["source_stack"]).splitlines() if line]
    query = {"session": session, "worker": r["worker"], "q": f"{XLA_OP_SEARCH}{name}"}
    link = f"/timeline?{urlencode(query)}"
    return html.Div(
        [
            html.H5(f"{name} · {r['program']} (program {program_id})"),
            html.Pre(str(r["expression"]), className="podscope-code"),
            html.P(
                f"{r['category']}; framework op {r['framework_op'] or '—'}; computes in "
                f"{r['compute_dtype'] or '?'}; {int(r['occurrences'])} occurrences, "
                f"{r['total_self_time_us']:,.1f} µs self; bound by {r['bound_by']}"
                + (
                    f" at {r['roofline_efficiency'] * 100:.1f} % of that roof"
                    if pd.notna(r["roofline_efficiency"])
                    else ""
                )
                + "."
            ),
            html.Div([html.Strong("Source: "), html.Code(str(r["source"]) or "not in the trace")]),
            html.Ul(stack) if stack else None,
            dcc.Link("Its events on the Timeline", href=link),
            *_program_around(session, str(r["worker"]), program_id, name, hops, expand),
        ]
    )


#: Hops of the graph around an op unless the URL says (``hops``).
DEFAULT_HOPS = 2


def _program_around(
    session: str, worker: str, program_id: str, name: str, hops: str | None, expand: str | None
) -> list[Any]:
    """The op in its program: the graph of instructions within a few hops (fusions a click
    opens: the URL's ``expand``) and the module's HLO text with the op's line marked."""
    try:
        module = current().store.modules(session, worker).get(int(program_id))
    except (SessionError, TraceParseError, ValueError) as e:
        return [dbc.Alert(f"Its program: {e}", color="warning")]
    if module is None:
        return [
            html.P("The capture holds no HLO module for this program.", className="podscope-muted")
        ]
    n = index_of(hops)
    n = DEFAULT_HOPS if n is None else max(1, min(n, MAX_HOPS))
    opened = {e for e in (expand or "").split(",") if e}
    try:
        graph = neighbourhood(module, name, n, opened)
    except KeyError:
        return [html.P(f"{name} is not in its program's module.", className="podscope-muted")]
    left = (
        f"; {plural(graph.left_out, 'instruction')} further out not drawn" if graph.left_out else ""
    )
    lines = [
        html.Mark(text + "\n", id=ids.XLA_MODULE + "-op") if hit else text + "\n"
        for text, hit in module_text(module, name)
    ]
    return [
        html.H6(f"Around {name} in {module.name}", className="mt-3"),
        dbc.RadioItems(
            id=ids.XLA_GRAPH_HOPS,
            value=n,
            inline=True,
            options=[{"label": plural(k, "hop"), "value": k} for k in range(1, MAX_HOPS + 1)],
        ),
        html.P(
            f"{plural(len(graph.nodes), 'instruction')}, operands to the left of their users"
            f"{left}; a click on a fusion (a square) opens or closes its computation.",
            className="podscope-muted",
        ),
        dcc.Graph(id=ids.XLA_GRAPH, figure=hlo_graph_figure(graph.nodes, graph.edges)),
        html.Details(
            [
                html.Summary(f"Module text ({plural(len(lines), 'line')}; {name} marked)"),
                html.Pre(
                    lines,
                    className="podscope-code",
                    style={"maxHeight": "420px", "overflow": "auto"},
                    id=ids.XLA_MODULE,
                ),
            ],
            open=True,
        ),
    ]


def _why_empty(analysis: SessionAnalysis, view: View) -> str:
    kind = analysis.trace_kind
    if kind == "android":
        return "An Android trace has no XLA programs: see the TFLite page for its ops."
    if kind == "pytorch":
        return "A PyTorch trace has no XLA programs: see the GPU (PyTorch) and Ops pages."
    if view.worker or view.device:
        return "No XLA op ran on this worker or device."
    return (
        "No XLA ops in this capture: no device kernel or XLA:CPU thunk names an HLO instruction "
        "(a TensorFlow graph without jit_compile=True runs TF ops: see the Ops page)."
    )


@dash.callback(
    Output(ids.XLA_TABLE, "getRowsResponse"),
    Input(ids.XLA_TABLE, "getRowsRequest"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def table_rows(request: dict[str, Any] | None, search: str | None) -> Any:
    """The block of rows the grid asks for: the URL's view, cut by the filter box."""
    query = query_of(search)
    session, analysis, _ = load_session(query.get("session"))
    if request is None or analysis is None or session is None:
        return dash.no_update
    view = view_of(analysis, query.get("worker"), query.get("device"), query.get("execution"))
    return rows_response(
        grid_frame(view.ops), request, lambda part: linked_records(part, session), query.get("q")
    )


@dash.callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.XLA_WORKER, "value"),
    Input(ids.XLA_DEVICE, "value"),
    Input(ids.XLA_EXECUTION, "value"),
    Input(ids.XLA_FILTER, "value"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def choose(
    worker: str | None, device: str | None, execution: str | None, q: str | None, search: str | None
) -> Any:
    """The controls' values go into the URL; the page is drawn from it (``layout``)."""
    return with_query(
        search,
        worker=None if worker == ALL_WORKERS else worker,
        device=None if device == ALL else device,
        execution=None if execution == ALL else execution,
        q=q,
        node=None,
    )


@dash.callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.XLA_PROFILE, "value"),
    Input(ids.XLA_COLOR, "value"),
    Input(ids.XLA_PROFILE_GRAPH, "clickData"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def navigate(
    profile: str | None, color: str | None, click: dict[str, Any] | None, search: str | None
) -> Any:
    """The op profile's grouping, colour and the node clicked (the treemap zooms there)."""
    if dash.ctx.triggered_id == ids.XLA_PROFILE_GRAPH:
        point = (click or {}).get("points", [{}])[0]
        node = str(point.get("id", ""))
        return with_query(search, node=None if node in ("", "(all)") else node)
    return with_query(
        search,
        profile=None if profile == "program" else profile,
        color=None if color == "flops" else color,
        node=None if dash.ctx.triggered_id == ids.XLA_PROFILE else query_of(search).get("node"),
    )


@dash.callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.XLA_ROOFLINE, "clickData"),
    Input(ids.XLA_TABLE, "selectedRows"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def pick_op(
    click: dict[str, Any] | None, selected: list[dict[str, Any]] | None, search: str | None
) -> Any:
    """An op clicked on the roofline or chosen in the grid: its details below, ringed above."""
    if dash.ctx.triggered_id == ids.XLA_ROOFLINE:
        data = (click or {}).get("points", [{}])[0].get("customdata")
        op = str(data[0]) if data else None
    else:
        row = (selected or [{}])[0]
        op = f"{row.get('program_id')}/{row.get('hlo_op_name')}" if row.get("hlo_op_name") else None
    return with_query(search, op=op, expand=None) if op else dash.no_update


# The module text scrolls to the op's line once drawn (assets/shell.js).
dash.clientside_callback(
    ClientsideFunction("podscopeShell", "showMark"),
    Output(ids.XLA_MODULE, "title"),
    Input(ids.XLA_MODULE, "children"),
)


@dash.callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.XLA_GRAPH_HOPS, "value"),
    Input(ids.XLA_GRAPH, "clickData"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def explore_graph(hops: int | None, click: dict[str, Any] | None, search: str | None) -> Any:
    """The graph's hops, and a fusion clicked: opened, or closed when it was open."""
    if dash.ctx.triggered_id == ids.XLA_GRAPH_HOPS:
        return with_query(search, hops=None if hops == DEFAULT_HOPS else str(hops))
    data = (click or {}).get("points", [{}])[0].get("customdata") or []
    if len(data) < 4 or not data[3]:  # not a fusion
        return dash.no_update
    opened = [e for e in (query_of(search).get("expand") or "").split(",") if e]
    name = str(data[0])
    opened = [e for e in opened if e != name] if name in opened else [*opened, name]
    return with_query(search, expand=",".join(opened) or None)


@dash.callback(
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.XLA_MEMORY_PROGRAM, "value"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def pick_memory_program(program: str | None, search: str | None) -> Any:
    """The memory viewer's program goes into the URL."""
    return with_query(search, memory=program) if program else dash.no_update


@dash.callback(
    Output(ids.XLA_DOWNLOAD, "data"),
    Input(ids.XLA_CSV, "n_clicks"),
    Input(ids.XLA_PARQUET, "n_clicks"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def download(_csv: int | None, _pq: int | None, search: str | None) -> Any:
    """The whole table of the view (every column of ``hlo_stats``), as CSV or Parquet."""
    query = query_of(search)
    session, analysis, _ = load_session(query.get("session"))
    if analysis is None or session is None:
        return dash.no_update
    view = view_of(analysis, query.get("worker"), query.get("device"), query.get("execution"))
    name = "_".join(
        x for x in ("xla_ops", session, (view.device or "").removeprefix("/device:")) if x
    )
    return download_frame(view.ops, name.replace("/", "_").replace(":", ""), ids.XLA_PARQUET)
