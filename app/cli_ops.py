"""``podscope ops``: per-op time per worker and device, as CSV or a table.

Its module imports click alone: pandas and the analyses load when the command runs, so a
run without the cache (``--no-cache``) can start its workers first (``analyzers.host_ops``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from podscope.app.cli_options import analysis_options, csv_option, wide_option
from podscope.app.terminal import say

if TYPE_CHECKING:
    import pandas as pd

    from podscope.analyzers.host_ops import Table
    from podscope.analyzers.session import SessionAnalysis


def ops_table(table: pd.DataFrame) -> pd.DataFrame:
    """``op_stats`` in the CLI's units: ``*_ps`` → ``*_time_us`` / ``*_us`` (3 decimals,
    ``host_ops.us_name``), the names and the times first."""
    from podscope.analyzers.host_ops import LEAD_COLUMNS, us_name

    times = [c for c in table.columns if c.endswith("_ps")]
    out = table.assign(**{us_name(c): (table[c] / 1e6).round(3) for c in times}).drop(columns=times)
    names = ("worker", "device", "kernel", "op_name", "op_type", "occurrences")
    lead = [c for c in (*names, *map(us_name, LEAD_COLUMNS[1:8])) if c in out]
    return out[lead + [c for c in out.columns if c not in lead]]


@click.command("ops")
@csv_option
@wide_option
@click.option("--by", default="op", help="op, type or kernel.")
@click.option("--worker", help="Only this worker.")
@click.option("--top", type=int, default=20, help="Rows in the table view.")
@click.option(
    "--launch",
    is_flag=True,
    help="With --by kernel: each kernel's registers, shared memory, grid, block and occupancy.",
)
@analysis_options
def ops_command(
    path: Path,
    csv: bool,
    wide: bool,
    by: str,
    worker: str | None,
    top: int,
    launch: bool,
    session: str | None,
    no_cache: bool,
    scheduler: str | None,
) -> None:
    """Per-op time per worker and device of PATH (a trace file, a run folder or a logdir):
    occurrences, total and self time, percentiles."""
    from podscope.analyzers.host_ops import BY

    if by not in BY:
        say(f"podscope: error: --by must be one of {', '.join(BY)}", err=True)
        raise click.exceptions.Exit(2)
    host = _host_op_table(path, session, by, worker, scheduler) if no_cache else None
    if host is not None and csv:
        from podscope.analyzers.host_ops import write_csv

        write_csv(host, sys.stdout)
        return
    import pandas as pd

    from podscope.app.cli_analyze import _analysis_or_exit
    from podscope.app.cli_table import show_table

    if host is not None:  # never empty: a session without ops is the frames' path's
        table = ops_table(pd.DataFrame(host))
    else:
        analysis = _analysis_or_exit(path, session, no_cache, frozenset({f"ops:{by}"}), scheduler)
        table = ops_table(analysis.op_table_for(by, worker))
        if csv:
            table.to_csv(sys.stdout, index=False)
            return
        if table.empty:
            say(f"podscope: no ops to show ({_no_ops(analysis, by, worker)})", err=True)
            return
    name_col = {"op": "op_name", "type": "op_type", "kernel": "kernel"}[by]
    cols = ["worker", "device", name_col, "occurrences", "self_time_us", "total_time_us"]
    top_rows = table.sort_values("self_time_us", ascending=False).head(top)
    shown = (
        top_rows[cols]
        .assign(
            device=top_rows["device"].astype(str).str.replace(r"^/(device|host):", "", regex=True),
            self_share=top_rows["self_share"],
        )
        .rename(
            columns={"occurrences": "calls", "self_time_us": "self_us", "total_time_us": "total_us"}
        )
    )
    if by == "kernel" and launch:  # the launch geometry, as XProf's kernel stats show it
        shown = shown.assign(**_launch_geometry(top_rows)).drop(columns=["total_us"])
    show_table(shown, f"top {top} by self time, per worker and device", wide=wide, cut=name_col)


def _host_op_table(
    path: Path, session: str | None, by: str, worker: str | None, scheduler: str | None
) -> Table | None:
    """``--no-cache`` on a session of host captures (``analyzers.host_ops``): the op table
    (``op_stats``' columns) from each file's decoder columns, in processes forked before pandas
    is imported; the session's line said. None where that path does not apply: another table
    (kernels), a Dask scheduler asked for, a file that is not a host XPlane capture or does not
    parse, no op, a worker not in the session; the frames' path then answers, and reports as
    every command does."""
    import os
    import threading

    from podscope.analyzers.host_ops import KEYS, session_op_table
    from podscope.app.terminal import say_session
    from podscope.trace_parsers import TraceParseError
    from podscope.trace_parsers.loader import PARSERS, resolve, worker_label

    if by not in KEYS or scheduler or os.environ.get("PODSCOPE_DASK_SCHEDULER"):
        return None
    try:
        files = resolve(path, session)
    except TraceParseError:
        return None
    if not files or not all(f.name.endswith(PARSERS["xplane"].suffixes) for f in files):
        return None
    cores = int(os.environ.get("PODSCOPE_DASK_PROCESSES") or len(os.sched_getaffinity(0)))
    # forked while this process runs one thread (a forked child inherits no other thread)
    processes = cores if threading.active_count() == 1 else 1
    table = session_op_table([(f, worker_label(f)) for f in files], by, processes)
    if table is None:
        return None
    if worker is not None:
        keep = [i for i, w in enumerate(table["worker"]) if w == worker]
        if not keep:
            return None
        table = {
            c: [v[i] for i in keep] if isinstance(v, list) else v[keep] for c, v in table.items()
        }
    say_session(path, session)
    return table


def _launch_geometry(kernels: pd.DataFrame) -> dict[str, pd.Series]:
    """A kernel table's registers, shared memory, grid, block and occupancy as short text
    columns (empty where the trace does not say)."""
    import pandas as pd

    def dims(prefix: str) -> pd.Series:
        parts = [kernels.get(f"{prefix}_{a}") for a in "xyz"]
        if any(p is None for p in parts):
            return pd.Series("", index=kernels.index)
        text = parts[0].astype("Int64").astype(str)
        for p in parts[1:]:
            text = text + "," + p.astype("Int64").astype(str)
        return text.where(parts[0].notna(), "")

    def number(col: str) -> pd.Series:
        values = kernels.get(col)
        if values is None:
            return pd.Series("", index=kernels.index)
        return values.astype("Int64").astype(str).where(values.notna(), "")

    return {
        "regs": number("regs"),
        "shm": number("shm"),
        "grid": dims("grid"),
        "block": dims("block"),
        "occ_pct": number("occ_pct"),
    }


def _no_ops(a: SessionAnalysis, by: str, worker: str | None) -> str:
    """Why ``podscope ops`` has no rows for this session."""
    if worker is not None and worker not in a.worker_names:
        return f"no worker {worker!r}; workers: {', '.join(a.worker_names)}"
    if a.trace_kind == "android":
        return (
            "an Android / Perfetto trace: its slices are not TensorFlow ops; TFLite invokes "
            "and delegates are on the dashboard's TFLite page, the counts in `podscope parse`"
        )
    if by == "kernel":
        return "no GPU kernel in this capture (no device plane with kernel events)"
    return "no TensorFlow op or XLA op event in this capture"
