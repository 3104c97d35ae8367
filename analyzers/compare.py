"""Two runs side by side: where each run's step time goes, and which ops changed.

    >>> steps = compare_steps(base.pod, new.pod)   # one row per metric
    >>> ops = compare_ops(base.op_table, new.op_table, base.pod, new.pod)

Both read the Pod Viewer's definitions, so Compare, the Pod Viewer, the Ops page and XProf
show the same numbers: a step of a worker lasts as long as its busiest device's span of it
(``analyzers.pod.pod_view``: two GPUs of one host are not averaged), and step metrics are over
a run's worker-steps (mean, p50, p95), so runs of different lengths and sizes compare
directly. Op times are the capture's totals divided by the run's *traced* worker-steps: a
worker traced with the Python tracer only records no ops, so its steps do not divide (ops
outside steps, a warm-up say, count too); a run without steps is compared per worker over the
whole capture instead (``per``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from podscope.analyzers.breakdown import CATEGORIES

STEP_METRICS = ("step_time (mean)", "step_time (p50)", "step_time (p95)", *CATEGORIES)


def step_metrics(breakdown: pd.DataFrame, categories: Iterable[str] = CATEGORIES) -> pd.Series:
    """ms per worker-step: step time statistics and mean categories, both over the same rows:
    those whose categories are known (a Python-traced worker's rows are left out when any
    other worker's are known), so the categories add up to the step time. ``categories``:
    XProf's, or PyTorch's (``analyzers.torch_view``) for a frame of them."""
    names = [*STEP_METRICS[:3], *categories]
    if breakdown.empty:
        return pd.Series(np.nan, index=names)
    breakdown = traced_steps(breakdown)
    step_ms = breakdown["step_time_ns"].astype("float64") / 1e6
    out = {
        "step_time (mean)": step_ms.mean(),
        "step_time (p50)": step_ms.quantile(0.5),
        "step_time (p95)": step_ms.quantile(0.95),
    }
    for cat in names[3:]:
        mean = breakdown[f"{cat}_ns"].astype("Float64").mean(skipna=True)
        out[cat] = np.nan if pd.isna(mean) else float(mean) / 1e6
    return pd.Series(out, dtype="float64").reindex(names)


def traced_steps(pod: pd.DataFrame) -> pd.DataFrame:
    """The worker-steps whose categories and ops are known (all of them when none are): a
    worker traced with the Python tracer only is left out where others are traced."""
    split = pod["split"].astype(bool)
    return pod[split] if split.any() else pod


def with_per_step(table: pd.DataFrame, pod: pd.DataFrame) -> pd.DataFrame:
    """An op table (``analyzers.ops.op_stats``, rows per worker) with ``self_per_step_ps``:
    each row's self time over its worker's traced steps (``traced_steps`` of ``pod``: the
    capture's worker-steps, ``SessionAnalysis.capture_steps``), the per-step time Compare
    shows; missing for a worker without traced steps."""
    steps = traced_steps(pod).groupby(traced_steps(pod)["worker"].astype(str)).size()
    # by each distinct worker, not each row (a pod's table: 100,000 rows a Python call each)
    codes, workers = pd.factorize(table["worker"].astype(str))
    per = steps.reindex(workers).to_numpy(dtype="float64")[codes] if len(codes) else np.ones(0)
    return table.assign(self_per_step_ps=(table["self_ps"].astype("float64") / per).round())


def _with_deltas(frame: pd.DataFrame, base: str, new: str) -> pd.DataFrame:
    frame["delta"] = frame[new] - frame[base]
    frame["change"] = (frame[new] / frame[base] - 1).where(frame[base] > 0)
    return frame


def compare_steps(
    base: pd.DataFrame, new: pd.DataFrame, categories: Iterable[str] = CATEGORIES
) -> pd.DataFrame:
    """Step time and its categories, baseline vs new run.

    Args:
        base, new: ``analyzers.pod.pod_view`` of each run (a ``step_breakdown`` of one device
            per worker is the same), or both in PyTorch's categories
            (``SessionAnalysis.own_pod``).
        categories: the frames' categories (default XProf's).

    Returns:
        One row per metric (``STEP_METRICS``, PyTorch's categories in place of XProf's for
        them): ``metric, base_ms, new_ms, delta`` (ms) and ``change`` (new / base - 1;
        missing where the baseline is 0 or unknown).
    """
    b, n = step_metrics(base, categories), step_metrics(new, categories)
    frame = pd.DataFrame({"metric": list(b.index), "base_ms": b.to_numpy()}).assign(
        new_ms=n.to_numpy()
    )
    return _with_deltas(frame, "base_ms", "new_ms")


def _per_unit(table: pd.DataFrame, units: float) -> pd.DataFrame:
    keys = ["op_type", "op_name"]
    g = table.groupby(keys, sort=False)[["self_ps", "occurrences"]].sum()
    return pd.DataFrame(
        {"self_us": g["self_ps"] / 1e6 / units, "occurrences": g["occurrences"] / units}
    )


def op_rates(ops: pd.DataFrame, steps: pd.DataFrame, per: str = "step") -> pd.DataFrame:
    """Ops' self time (``self_us``) and ``occurrences`` per unit, indexed by (op_type,
    op_name): per traced worker-step of ``steps`` (``per="step"``) or per worker over the
    whole capture (``"capture"``, for runs without steps)."""
    cols = ["worker", "step"] if per == "step" else ["worker"]
    source = traced_steps(steps) if per == "step" else ops
    return _per_unit(ops, float(max(1, len(source[cols].drop_duplicates()))))


def compare_ops(
    base_ops: pd.DataFrame,
    new_ops: pd.DataFrame,
    base_steps: pd.DataFrame,
    new_steps: pd.DataFrame,
) -> pd.DataFrame:
    """Ops' self time per worker-step, baseline vs new run, largest change first.

    Args:
        base_ops, new_ops: ``analyzers.ops.op_stats(..., by="op")`` of each run (all workers
            and devices: an op's rows are summed).
        base_steps, new_steps: each run's worker-steps (``SessionAnalysis.capture_steps``:
            whole and partial, as the ops ran in all of them; its traced worker-steps divide:
            the rows whose categories are known, when any are).

    Returns:
        ``op_type, op_name, base_us, new_us, delta, change, base_per, new_per, status`` with
        ``*_us`` self time per unit (µs), ``*_per`` occurrences per unit, ``status`` one of
        ``new`` / ``gone`` / ``""``, and ``per`` (``step``: per worker-step; ``capture``: per
        worker over the whole capture, when a run has no steps).
    """
    per = "step" if len(base_steps) and len(new_steps) else "capture"
    base, new = op_rates(base_ops, base_steps, per), op_rates(new_ops, new_steps, per)
    both = base.add_suffix("_base").join(new.add_suffix("_new"), how="outer").fillna(0.0)
    out = pd.DataFrame(
        {
            "base_us": both["self_us_base"],
            "new_us": both["self_us_new"],
            "base_per": both["occurrences_base"],
            "new_per": both["occurrences_new"],
        }
    )
    out = _with_deltas(out, "base_us", "new_us").reset_index()
    out["status"] = np.select(
        [out["base_per"] == 0, out["new_per"] == 0], ["new", "gone"], default=""
    )
    out["per"] = per
    order = out["delta"].abs().sort_values(ascending=False, kind="stable").index
    cols_out = ["op_type", "op_name", "base_us", "new_us", "delta", "change"]
    return out.loc[order, [*cols_out, "base_per", "new_per", "status", "per"]].reset_index(
        drop=True
    )
