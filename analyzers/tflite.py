"""TFLite inference analysis from ATrace sections: invokes, per-op latency, delegates.

    >>> inv = invokes(frames.events)          # one row per Interpreter::Invoke
    >>> ops = tflite_op_stats(frames.events)  # one row per op type (and node)

Input: ``events`` of an Android trace (TFLite sections ``<tag>@<node>/<subgraph>``). Output
times are integer ns. An op section is attributed to the invoke that encloses it in time on
the same thread; sections of a trace that starts mid-invoke (no enclosing invoke) are still
counted in the op table, with ``invoke`` missing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from podscope.trace_parsers.tflite import sections


def _with_sections(events: pd.DataFrame) -> pd.DataFrame:
    sec = sections(events["name"])
    ev = events.assign(
        tag=sec["tag"],
        node=sec["node"],
        subgraph=sec["subgraph"],
        kind=sec["kind"],
        dur_ns=events["dur_ps"] // 1000,
        end_ns=events["start_ns"] + events["dur_ps"] // 1000,
    )
    return ev[ev["kind"].notna()]


def invokes(events: pd.DataFrame) -> pd.DataFrame:
    """One row per ``invoke@-1/0``: ``worker, thread, invoke (0..), start_ns, dur_ns, app_section``
    (the enclosing app section such as ``runInference``, if any), ``ops`` (op sections inside)."""
    ev = _with_sections(events)
    inv = ev[ev["kind"] == "invoke"].sort_values(["worker", "line", "start_ns"])
    if inv.empty:
        return pd.DataFrame(
            columns=["worker", "thread", "invoke", "start_ns", "dur_ns", "app_section", "ops"]
        )
    parent = inv["parent"].to_numpy()
    names = events["name"].astype(str).to_numpy()
    app = [names[p] if p >= 0 else None for p in parent]
    ops = ev[ev["kind"].isin(["op", "delegate"])]
    counts = _enclosing(ops, inv).value_counts()
    out = pd.DataFrame(
        {
            "worker": inv["worker"].astype(str).to_numpy(),
            "thread": inv["line"].astype(str).to_numpy(),
            "invoke": np.arange(len(inv)),
            "start_ns": inv["start_ns"].to_numpy(),
            "dur_ns": inv["dur_ns"].to_numpy(),
            "app_section": app,
        }
    )
    out["ops"] = out["invoke"].map(counts).fillna(0).astype("int64")
    return out


def _enclosing(ops: pd.DataFrame, inv: pd.DataFrame) -> pd.Series:
    """Per op row: the index (0..) of the invoke that encloses it on its thread, or -1."""
    result = np.full(len(ops), -1, dtype=np.int64)
    inv = inv.reset_index(drop=True)
    for (worker, line), group in inv.groupby(["worker", "line"], observed=True):
        sel = ((ops["worker"] == worker) & (ops["line"] == line)).to_numpy()
        k = (
            np.searchsorted(
                group["start_ns"].to_numpy(), ops["start_ns"].to_numpy()[sel], side="right"
            )
            - 1
        )
        inside = (k >= 0) & (
            ops["start_ns"].to_numpy()[sel] < group["end_ns"].to_numpy()[np.clip(k, 0, None)]
        )
        result[np.flatnonzero(sel)[inside]] = group.index.to_numpy()[k[inside]]
    return pd.Series(result, index=ops.index)


def tflite_op_stats(events: pd.DataFrame, by_node: bool = False) -> pd.DataFrame:
    """Per op type (or per op type and node): ``count, per_invoke, total_ns, avg_ns, p50_ns,
    p95_ns, share`` (of all op time), ``delegate`` (sections named after a delegate)."""
    ev = _with_sections(events)
    ops = ev[ev["kind"].isin(["op", "delegate"])]
    n_invokes = max(1, int((ev["kind"] == "invoke").sum()))
    keys = ["tag", "node", "subgraph"] if by_node else ["tag"]
    g = ops.groupby(keys, observed=True, dropna=False)["dur_ns"]
    out = g.agg(count="size", total_ns="sum", avg_ns="mean", p50_ns="median").reset_index()
    out["p95_ns"] = g.quantile(0.95).to_numpy()
    out["per_invoke"] = out["count"] / n_invokes
    out["share"] = out["total_ns"] / max(1, int(ops["dur_ns"].sum()))
    out["delegate"] = out["tag"].str.contains("Delegate")
    out = out.rename(columns={"tag": "op_type"})
    for col in ("avg_ns", "p50_ns", "p95_ns"):
        out[col] = out[col].round().astype("int64")
    return out.sort_values("total_ns", ascending=False, ignore_index=True)
