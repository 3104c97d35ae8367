"""Ops: which ops cost what, on which worker and device; workers compared; memory over time."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, NamedTuple
from urllib.parse import urlencode

import dash
import dash_ag_grid as dag
import dash_bootstrap_components as dbc
import pandas as pd
from dash import ClientsideFunction, Input, Output, State, dcc, html

from podscope.analyzers.compare import with_per_step
from podscope.analyzers.ops import across_workers, kernel_groups, op_comparison
from podscope.analyzers.session import SessionAnalysis
from podscope.app import ids
from podscope.app.figures.ops import memory_figure, ops_top_figure, ops_treemap_figure, short_name
from podscope.app.grid_source import BLOCK, column_filters, records, rows_response
from podscope.app.pages._common import (
    card,
    chosen_worker,
    device_summary,
    download_buttons,
    download_frame,
    load_session,
    query_of,
    worker_picker,
)
from podscope.app.units import grid_columns, plural

dash.register_page(__name__, path="/ops", name="Ops", order=2)


def grid_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The table as the grid shows it: durations in ms, what and what it costs first, where it
    ran after, most expensive first."""
    view = table.copy()
    for col in [c for c in view.columns if c.endswith("_ps")]:
        view[col.removesuffix("_ps") + "_ms"] = (view[col] / 1e9).round(4)
    view = view.drop(columns=[c for c in view.columns if c.endswith("_ps")])
    costs = ACROSS_LEAD if "workers" in view else COST_COLUMNS
    lead = [c for c in (*NAME_COLUMNS, "ops", *costs, "worker", "device") if c in view]
    view = view[lead + [c for c in view.columns if c not in lead]]
    return view.sort_values("self_ms", ascending=False, kind="stable")


def linked_records(view: pd.DataFrame, session: str) -> list[dict[str, Any]]:
    """Grid rows of ``view`` (a ``grid_frame``), each with a link that opens the timeline
    searching for the op (per op type: for the type)."""
    if "kernel" in view:
        name = view["kernel"]
    elif "op_name" in view:
        name = view["op_name"].where(view["op_name"] != "", view["op_type"])
    else:
        name = view["op_type"]
    # a pod's row is the op across its workers: the link opens the slowest one's timeline
    workers = view["worker"] if "worker" in view else view["slowest_worker"]
    view = view.assign(
        timeline=[
            f"[open](/timeline?{urlencode({'session': session, 'worker': w, 'q': q})})"
            for w, q in zip(workers, name, strict=True)
        ]
    )
    return records(view)


def grid_rows(table: pd.DataFrame, session: str) -> list[dict[str, Any]]:
    """Every row of ``table`` for a grid that holds them all (a kernel's ops)."""
    return linked_records(grid_frame(table), session)


#: The op's name columns (per GPU kernel: the kernel, then its op).
NAME_COLUMNS = ("kernel", "op_name", "op_type")
COST_COLUMNS = (
    "self_ms",
    "self_per_step_ms",
    "total_ms",
    "occurrences",
    "avg_ms",
    "self_share",
    "p95_ms",
)
#: A pod's all-workers table (``across_workers``): its costs, and how the workers differ.
ACROSS_LEAD = (
    "workers",
    "self_ms",
    "self_per_step_ms",
    "spread",
    "slowest_worker",
    "median_worker_ms",
    "max_worker_ms",
    "self_per_worker_ms",
    "occurrences",
)
#: More workers than this, the all-workers table has each op once, across the workers
#: (``analyzers.ops.across_workers``), not a row per worker and op.
ACROSS_WORKERS = 16


def rows_name(columns: Any) -> str | None:
    """The first name column of the grid's columns (pinned on the left)."""
    return next((c for c in NAME_COLUMNS if c in columns), None)


#: The table's views: the ``by`` of ``analyzers.ops.op_stats``, as the URL and the page say them.
VIEWS = {"op": "per op", "type": "per op type", "kernel": "per GPU kernel (grouped by name)"}


def views_of(analysis: SessionAnalysis) -> dict[str, str]:
    """The tables a capture has: no GPU kernel table where no GPU ran (a TPU, a CPU)."""
    gpu = analysis.devices["device"].astype(str).str.startswith("/device:GPU").any()
    return VIEWS if gpu else {k: v for k, v in VIEWS.items() if k != "kernel"}


ALL_DEVICES = "all"


class View(NamedTuple):
    """What the Ops page shows, from the URL: the op table of (worker, view), cut to a device,
    and in the kernel view the kernels grouped by name with the chosen kernel's ops. (A named
    tuple: Dash loads page modules outside ``sys.modules``, where a dataclass cannot resolve
    its annotations.)"""

    by: str
    worker: str | None
    device: str | None
    devices: list[str]
    table: pd.DataFrame  # the op_stats rows shown (kernel × op in the kernel view)
    per_worker: pd.DataFrame  # the same rows per worker (``table`` of a pod is across them)
    groups: pd.DataFrame | None  # kernel_groups of ``table`` in the kernel view
    kernel: str | None
    children: pd.DataFrame | None  # the ops that launched ``kernel``


#: Views made of an analysis, a few per analysis and gone with it: the layout's view is each
#: grid block's too (at 2,048 hosts the pod's table across workers took 0.5 s a block).
_VIEWS: weakref.WeakKeyDictionary[SessionAnalysis, OrderedDict[tuple[object, ...], View]] = (
    weakref.WeakKeyDictionary()
)
_VIEWS_LOCK = threading.Lock()
VIEWS_KEPT = 4


def view_of(
    analysis: SessionAnalysis,
    worker: str | None,
    by: str | None,
    device: str | None,
    kernel: str | None,
) -> View:
    """The view a URL names (made once per analysis and URL); unknown values fall back to
    the defaults. Its frames are shared: a caller copies before changing one."""
    key = (worker, by, device, kernel)
    with _VIEWS_LOCK:
        made = _VIEWS.setdefault(analysis, OrderedDict())
        hit = made.get(key)
        if hit is not None:
            made.move_to_end(key)
            return hit
    view = _view_of(analysis, worker, by, device, kernel)
    with _VIEWS_LOCK:
        made[key] = view
        while len(made) > VIEWS_KEPT:
            made.popitem(last=False)
    return view


def _view_of(
    analysis: SessionAnalysis,
    worker: str | None,
    by: str | None,
    device: str | None,
    kernel: str | None,
) -> View:
    by = by if by in views_of(analysis) else "op"
    chosen = chosen_worker(worker) if worker in analysis.worker_names else None
    whole = with_per_step(analysis.op_table_for(by, chosen), analysis.capture_steps)
    devices = sorted({*whole["device"].astype(str), *_accelerators(analysis, chosen)})
    device = device if device in devices else None
    table = whole[whole["device"].astype(str) == device] if device else whole
    if by != "kernel":
        many = chosen is None and table["worker"].nunique() > ACROSS_WORKERS
        shown = across_workers(table) if many else table
        return View(by, chosen, device, devices, shown, table, None, None, None)
    groups = with_per_step(kernel_groups(table), analysis.capture_steps)
    kernel = kernel if kernel in set(groups["kernel"].astype(str)) else None
    children = table[table["kernel"].astype(str) == kernel] if kernel else None
    return View(by, chosen, device, devices, table, table, groups, kernel, children)


def _accelerators(analysis: SessionAnalysis, worker: str | None) -> list[str]:
    """Every GPU/TPU of the worker(s), idle ones included (they are asked about too)."""
    d = analysis.devices
    if d.empty:
        return []
    mine = d[d["worker"] == worker] if worker else d
    return mine["device"].astype(str).tolist()


def _device_label(device: str) -> str:
    return device.removeprefix("/device:").removeprefix("/host:")


def layout(
    session: str | None = None,
    worker: str | None = None,
    by: str | None = None,
    device: str | None = None,
    kernel: str | None = None,
    q: str | None = None,
    **_: str,
) -> Any:
    session, analysis, alert = load_session(session)
    if analysis is None or session is None:
        return alert
    view = view_of(analysis, worker, by, device, kernel)
    mem = analysis.memory
    memory = (
        dcc.Graph(figure=memory_figure(mem))
        if len(mem)
        else html.P(
            "This capture has no allocator events (TensorFlow records them only when memory profiling "
            "is on, e.g. on GPU hosts), so there is no memory timeline.",
            className="podscope-muted",
        )
    )
    shown = view.groups if view.groups is not None else view.table
    # the grid's columns, and the filters their values take
    head = grid_frame(shown.head(1)) if len(shown) else shown
    columns = [*head.columns, "timeline"] if len(shown) else []
    note = None if len(shown) else dbc.Alert(_why_empty(analysis, view), color="secondary")
    comparison = (
        op_comparison(view.per_worker)
        if view.by == "op" and view.per_worker["worker"].nunique() > 1
        else None
    )
    return html.Div(
        [
            card(
                dbc.Row(
                    [
                        dbc.Col(
                            [
                                dbc.Label("Worker"),
                                worker_picker(ids.OPS_WORKER, analysis, view.worker),
                            ],
                            md=3,
                        ),
                        dbc.Col(
                            [
                                dbc.Label("Device"),
                                dcc.Dropdown(
                                    id=ids.OPS_DEVICE,
                                    options=[
                                        {"label": "all devices", "value": ALL_DEVICES},
                                        *[
                                            {"label": _device_label(d), "value": d}
                                            for d in view.devices
                                        ],
                                    ],
                                    value=view.device or ALL_DEVICES,
                                    clearable=False,
                                ),
                            ],
                            md=2,
                        ),
                        dbc.Col(
                            [
                                dbc.Label("Table"),
                                dbc.RadioItems(
                                    id=ids.OPS_BY,
                                    value=view.by,
                                    inline=True,
                                    options=[
                                        {"label": v, "value": k}
                                        for k, v in views_of(analysis).items()
                                    ],
                                ),
                            ],
                            md=4,
                        ),
                        dbc.Col(
                            [
                                dbc.Label("Filter rows"),
                                dbc.Input(
                                    id=ids.OPS_FILTER,
                                    value=q or "",
                                    placeholder="name contains…",
                                    debounce=True,
                                ),
                            ],
                            md=2,
                        ),
                        dbc.Col(
                            download_buttons(ids.OPS_CSV, ids.OPS_PARQUET),
                            md=1,
                            className="text-end",
                        ),
                    ]
                ),
                device_summary(analysis, session),
                dcc.Download(id=ids.OPS_DOWNLOAD),
            ),
            card(
                html.Div(note, id=ids.OPS_NOTE),
                html.H6(_title(view), className="mt-1"),
                # A block of rows at a time (``table_rows``): the whole table of a
                # multi-GPU worker is megabytes, of which a page shows 25 rows.
                dag.AgGrid(
                    id=ids.OPS_TABLE,
                    rowModelType="infinite",
                    columnDefs=column_filters(
                        grid_columns(columns, pinned=rows_name(columns), markdown=["timeline"]),
                        head,
                    ),
                    defaultColDef={"sortable": True, "resizable": True},
                    dashGridOptions={
                        "pagination": True,
                        "paginationPageSize": 25,
                        "paginationPageSizeSelector": [25, 100, 500],
                        "cacheBlockSize": BLOCK,
                        "rowSelection": {
                            "mode": "singleRow",
                            "checkboxes": False,
                            "enableClickSelection": True,
                        },
                    },
                    style={"height": "560px"},
                ),
                _children(view, session),
            ),
            dbc.Row(
                [
                    dbc.Col(
                        card(dcc.Graph(id=ids.OPS_TOP, figure=ops_top_figure(view.table))), md=6
                    ),
                    dbc.Col(
                        card(dcc.Graph(id=ids.OPS_TREEMAP, figure=ops_treemap_figure(view.table))),
                        md=6,
                    ),
                ]
            ),
            card(
                html.H5("Across workers (self time, ms): ops that differ most"),
                html.Div(
                    dbc.Table.from_dataframe(_comparison_shown(comparison), size="sm")
                    if comparison is not None
                    else html.P(_no_comparison(view), className="podscope-muted"),
                    id=ids.OPS_COMPARE,
                ),
            ),
            card(html.H5("Memory"), memory),
        ]
    )


def _title(view: View) -> str:
    where = " · ".join(
        x
        for x in (view.worker or "all workers", _device_label(view.device or "") or "all devices")
        if x
    )
    if view.groups is not None:
        return (
            f"{plural(len(view.groups), 'kernel')} by self time ({where}); click a kernel for "
            "the ops that launched it"
        )
    if "workers" in view.table:
        return (
            f"{plural(len(view.table), 'op')} across "
            f"{plural(view.per_worker['worker'].nunique(), 'worker')} by self time ({where}): "
            "each op once, its spread across the workers and the slowest one"
        )
    return f"{plural(len(view.table), 'row')} by self time ({where})"


#: Up to this many workers, the comparison has a column per worker; a pod's shows the
#: median, the extremes and the slowest worker (512 columns were 7,770 cells and 0.2 s).
WORKER_COLUMNS = 8


def _comparison_shown(comparison: pd.DataFrame) -> pd.DataFrame:
    """The comparison's 15 first ops in ms, a column per worker or, for a pod, its summary."""
    stats = ["max_ps", "min_ps", "spread_ps", "ratio", "median_ps", "slowest"]
    workers = [c for c in comparison.columns if c not in stats]
    keep = (
        [*workers, "max_ps", "min_ps", "spread_ps", "ratio"]
        if len(workers) <= WORKER_COLUMNS
        else ["median_ps", "min_ps", "max_ps", "slowest", "spread_ps", "ratio"]
    )
    shown = comparison[keep].head(15).copy()
    for c in keep:
        if c.endswith("_ps") or c in workers:
            shown[c] = (shown[c].astype("float64") / 1e9).round(3)
    shown["ratio"] = shown["ratio"].astype("float64").round(2)
    renamed = {c: c.removesuffix("_ps") for c in keep if c.endswith("_ps")}
    return shown.rename(columns=renamed).reset_index()


def _no_comparison(view: View) -> str:
    if view.by != "op":
        return "Workers are compared per op: choose the per-op table."
    return "One worker here: nothing to compare."


def _children(view: View, session: str) -> Any:
    """The ops that launched the chosen kernel (the group's children)."""
    if view.children is None:
        return html.Div(id=ids.OPS_CHILDREN)
    rows = grid_rows(view.children.drop(columns=["kernel"]), session)
    names = rows[0] if rows else []
    return html.Div(
        [
            html.H6(
                f"{plural(len(rows), 'op')} launched {short_name(str(view.kernel))}",
                className="mt-3",
                title=str(view.kernel),
            ),
            dag.AgGrid(
                rowData=rows,
                columnDefs=grid_columns(names, pinned=rows_name(names), markdown=["timeline"]),
                defaultColDef={"sortable": True, "filter": True, "resizable": True},
                dashGridOptions={
                    "domLayout": "autoHeight",
                    "pagination": True,
                    "paginationPageSize": 10,
                },
            ),
        ],
        id=ids.OPS_CHILDREN,
    )


@dash.callback(
    Output(ids.OPS_TABLE, "getRowsResponse"),
    Input(ids.OPS_TABLE, "getRowsRequest"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def table_rows(request: dict[str, Any] | None, search: str | None) -> Any:
    """The block of rows the table asks for: the URL's view, cut by the filter box (``q``)
    and the grid's column filters, in the grid's sort order."""
    query = query_of(search)
    session, analysis, _ = load_session(query.get("session"))
    if request is None or analysis is None or session is None:
        return dash.no_update
    view = view_of(
        analysis, query.get("worker"), query.get("by"), query.get("device"), query.get("kernel")
    )
    shown = view.groups if view.groups is not None else view.table
    return rows_response(
        grid_frame(shown), request, lambda part: linked_records(part, session), query.get("q")
    )


# The controls' URL writer runs in the browser (``assets/shell.js``): its inputs are new on
# every view drawn, and Dash calls such a callback (its output, the URL, is outside the page)
# whatever ``prevent_initial_call`` says: on the server, a round trip before the grid's rows.
dash.clientside_callback(
    ClientsideFunction("podscopeOps", "choose"),
    Output(ids.URL, "search", allow_duplicate=True),
    Input(ids.OPS_WORKER, "value"),
    Input(ids.OPS_DEVICE, "value"),
    Input(ids.OPS_BY, "value"),
    Input(ids.OPS_FILTER, "value"),
    Input(ids.OPS_TABLE, "selectedRows"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)


def _why_empty(analysis: SessionAnalysis, view: View) -> str:
    """Why the op table is empty, for this worker, device and view (shown above the table)."""
    if view.worker:
        w = analysis.worker_events
        w = w[w["worker"] == view.worker]
        if len(w) and int(w["traced"].iloc[0]) == 0:  # every event is a Python call
            return (
                f"{view.worker} was traced with the Python tracer only (the safe capture plan for "
                "workers where the host tracer crashed): its trace has Python calls, no TF ops "
                "or kernels. Pick another worker, or capture it again with host tracer level 2."
            )
    if view.device:
        d = analysis.devices
        idle = d[(d["device"] == view.device) & d["idle"]] if len(d) else d
        if len(idle):
            return f"{_device_label(view.device)} was idle: nothing ran on it in this capture."
        return f"No {VIEWS[view.by].split(' (')[0].removeprefix('per ')} rows on {_device_label(view.device)}."
    if view.by == "kernel":
        return "No GPU kernels here: kernels live on /device:GPU planes, and this capture has none."
    return (
        "No op events here: no TF ops on the host (name:Type or a tf_op stat), no device "
        "kernels and no XLA ops on a TPU's XLA Ops line."
    )


@dash.callback(
    Output(ids.OPS_DOWNLOAD, "data"),
    Input(ids.OPS_CSV, "n_clicks"),
    Input(ids.OPS_PARQUET, "n_clicks"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def download(_csv: int | None, _pq: int | None, search: str | None) -> Any:
    """The table shown (every row of the view, the filter box aside), as CSV or Parquet."""
    query = query_of(search)
    session, analysis, _ = load_session(query.get("session"))
    if analysis is None or session is None:
        return dash.no_update
    view = view_of(analysis, query.get("worker"), query.get("by"), query.get("device"), None)
    table = view.groups if view.groups is not None else view.table
    name = "_".join(x for x in ("ops", view.by, session, _device_label(view.device or "")) if x)
    return download_frame(table, name.replace("/", "_").replace(":", ""), ids.OPS_PARQUET)
