"""ParameterServerStrategy balance: per parameter-server task, the variables it holds, the reads
and updates it served, and how busy it was; one PS carrying most of the load is a bottleneck
that every worker waits on.

    >>> ps_load(op_summary, workers, steps)   # one row per PS task, busiest first

A PS task is recognised by what it runs: variable updates (``ResourceApply*``,
``ResourceScatter*``, ``Assign*VariableOp``), no gradient computation (no op under
``gradient_tape/`` or ``gradients/``) and no training steps of its own: the workers run the
steps and compute gradients, the parameter servers apply them. Per PS:

* ``variables``: distinct update ops (one per variable it holds and updates);
* ``reads`` / ``updates`` / ``sends``: ``ReadVariableOp``, update and ``_Send`` executions
  (each ``_Send`` hands a tensor to a worker: a request served);
* ``busy_ms`` and ``busy_share``: op self time, and its share of the task's capture window.

TF's host tracer records no tensor sizes on ``_Send`` / ``ReadVariableOp``, so bytes served
are not in the trace; the load is measured as time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

UPDATE = r"^(?:ResourceApply\w+|ResourceSparseApply\w+|ResourceScatter\w+|Assign\w*VariableOp)$"
PS_COLUMNS = [
    "worker",
    "variables",
    "reads",
    "updates",
    "sends",
    "busy_ms",
    "busy_share",
    "load_share",
]


def ps_load(op_summary: pd.DataFrame, workers: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per parameter-server task: what it holds and serves, and its share of all PS busy time.

    Args:
        op_summary: ``analyzers.rule_inputs.op_summary`` (per worker, op type and name).
        workers: the ``workers`` frame (capture start/stop per worker).
        steps: ``analyzers.steps.find_steps`` (a task with steps is a worker).

    Returns:
        Columns ``PS_COLUMNS``, busiest first; empty when no task looks like a PS.
    """
    ops = op_summary[~op_summary["on_device"].astype(bool)]
    update = ops["op_type"].astype(str).str.match(UPDATE)
    grads = ops["op_name"].astype(str).str.startswith(("gradient_tape/", "gradients/"))
    trains = set(ops.loc[grads, "worker"].unique()) | set(steps["worker"].astype(str).unique())
    ps = sorted(set(ops.loc[update, "worker"]) - trains)
    if not ps:
        return pd.DataFrame(columns=PS_COLUMNS)
    span = workers.assign(worker=workers["worker"].astype(str)).set_index("worker")
    window = (span["capture_stop_ns"] - span["capture_start_ns"]).astype(float)
    rows = []
    for w in ps:
        mine = ops[ops["worker"] == w]
        t = mine["op_type"].astype(str)
        busy = float(mine["self_ps"].sum()) / 1e9
        win = float(window.get(w, np.nan)) / 1e6
        rows.append(
            (
                w,
                int(mine.loc[t.str.match(UPDATE), "op_name"].nunique()),
                int(mine.loc[t == "ReadVariableOp", "n"].sum()),
                int(mine.loc[t.str.match(UPDATE), "n"].sum()),
                int(mine.loc[t == "_Send", "n"].sum()),
                busy,
                busy / win if win and win > 0 else np.nan,
            )
        )
    out = pd.DataFrame(rows, columns=PS_COLUMNS[:-1])
    total = out["busy_ms"].sum()
    out["load_share"] = out["busy_ms"] / total if total > 0 else np.nan
    return out.sort_values("busy_ms", ascending=False, ignore_index=True)
