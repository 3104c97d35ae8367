"""The pod view: per step, every worker side by side; who is slow, how often, and why.

    >>> pod = pod_view(breakdown)            # one row per worker × step

Who is the straggler is decided once, from the pod view, in ``analyzers.attribution``
(arrivals at the collectives, culprits and victims); this module gives it the per-step rows.

Synchronous jobs (MultiWorkerMirroredStrategy: every worker ends each step together) and
asynchronous ones (ParameterServerStrategy) need different evidence:

* synchronous: the straggler is the worker that *arrives* last; the others wait for it inside
  the all-reduce, so their step times are as long as its. Lateness = step start − the earliest
  start of that step.
* asynchronous: the straggler's steps are simply longer. Excess = step time / median step time
  of all workers − 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from podscope.analyzers.breakdown import CATEGORIES

CATEGORY_NAMES = list(CATEGORIES)


def slowest_devices(rows: pd.DataFrame) -> pd.DataFrame:
    """Per worker × step, the row of its slowest device (breakdown rows, XProf's categories or
    PyTorch's), sorted by step and worker."""
    b = rows.sort_values("step_time_ns", ascending=False).drop_duplicates(["worker", "step"])
    return b.sort_values(["step", "worker"], ignore_index=True)


def pod_view(breakdown: pd.DataFrame) -> pd.DataFrame:
    """Per worker × step (devices of a worker summed by taking the slowest device).

    Args:
        breakdown: ``analyzers.breakdown.step_breakdown`` output.

    Returns:
        Columns ``worker, step, step_num, start_ns, end_ns, step_time_ns, excess,
        bottleneck, split`` plus the category ``_ns`` columns; ``bottleneck`` is the largest
        category (missing when the worker's categories are unknown). Lateness is
        ``analyzers.attribution``'s (arrival at the collectives, not the step's start).
    """
    cols = [f"{c}_ns" for c in CATEGORY_NAMES]
    b = slowest_devices(breakdown)
    out = b[["worker", "step", "step_num", "start_ns", "step_time_ns", "split", *cols]].copy()
    out["end_ns"] = out["start_ns"] + out["step_time_ns"]
    median_time = out.groupby("step")["step_time_ns"].transform("median")
    out["excess"] = out["step_time_ns"] / median_time - 1.0
    values = out[cols].astype("float64").to_numpy()
    has = out["split"].to_numpy(dtype=bool) & ~np.isnan(values).any(axis=1)
    best = np.where(has, np.nan_to_num(values, nan=-1).argmax(axis=1), -1)
    out["bottleneck"] = pd.array(
        [CATEGORY_NAMES[i] if i >= 0 else pd.NA for i in best], dtype="string"
    )
    return out


def with_calls(pod: pd.DataFrame, aligned: pd.DataFrame) -> pd.DataFrame:
    """``pod`` with ``before_call_ns``: per worker-step, the time from the step's start to its
    step function's call (``analyzers.steps``: callbacks, Python, before the tf.function or
    ``train_function``), 0 where the step is the call or none was found."""
    if "call_ns" not in aligned or pod.empty:
        return pod.assign(before_call_ns=0)
    calls = aligned[["worker", "step", "start_ns", "call_ns"]].astype({"worker": str})
    calls = calls.rename(columns={"start_ns": "_host_start"})
    merged = pod.assign(worker=pod["worker"].astype(str)).merge(
        calls, on=["worker", "step"], how="left"
    )
    before = merged["call_ns"].astype("Float64") - merged["_host_start"].astype("Float64")
    out = pod.copy()
    out["before_call_ns"] = (
        before.clip(lower=0).fillna(0).astype("float64").round().astype("int64").to_numpy()
    )
    return out


def anchored(aligned: pd.DataFrame, share: float = 0.5) -> bool:
    """True when some worker's steps hold a collective (``analyzers.steps`` anchors) in at
    least ``share`` of them: the workers' steps are tied by all-reduces, a synchronous job."""
    if aligned.empty or "anchor_end_ns" not in aligned:
        return False
    has = aligned["anchor_end_ns"].notna().groupby(aligned["worker"].astype(str)).mean()
    return bool((has >= share).any())


def is_synchronous(pod: pd.DataFrame, tolerance: float = 0.1) -> bool:
    """True for a synchronous job: the frame's ``synchronous`` column where it has one (set
    from collectives inside the steps, ``anchored``), else when workers end each step together
    (within ``tolerance`` of the step time). A straggler's step that ends late under CPU
    contention does not make an all-reduce job asynchronous."""
    if "synchronous" in pod and len(pod):
        return bool(pod["synchronous"].iloc[0])
    if pod["worker"].nunique() < 2:
        return True
    end = pod.groupby("step")["end_ns"]
    spread = (end.transform("max") - end.transform("min")) / pod.groupby("step")[
        "step_time_ns"
    ].transform("median")
    return bool(spread.median() <= tolerance)


def device_imbalance(breakdown: pd.DataFrame) -> pd.DataFrame:
    """Per worker with several devices: mean over steps of (max − min) / mean device busy time.

    Busy time = step time − all_others − device_idle (time some counted event ran on that
    device).
    """
    b = breakdown[breakdown["split"].astype(bool)]
    idle = b["all_others_ns"].astype("float64") + b["device_idle_ns"].astype("float64")
    busy = (b["step_time_ns"] - idle).rename("busy")
    g = b.assign(busy=busy).groupby(["worker", "step"])["busy"]
    spread = (g.max() - g.min()) / g.mean().replace(0, np.nan)
    counts = b.groupby("worker")["device"].nunique()
    res = spread.groupby("worker").mean().rename("imbalance").reset_index()
    return res[res["worker"].map(counts) > 1].reset_index(drop=True)


def step_rows(
    breakdown: pd.DataFrame, step: int | None, columns: list[str] | None = None
) -> pd.DataFrame:
    """The breakdown of one aligned step, or each worker × device's mean over all steps.

    Args:
        breakdown: ``analyzers.breakdown.step_breakdown`` output (or another frame of
            categories per worker × device × step: ``analyzers.torch_view``).
        step: an aligned step (0..N-1), or None for the means.
        columns: the category columns to average (default: the breakdown's).

    Returns:
        For a step, its breakdown rows. For None, one row per worker × device: ``worker,
        device, step_time_ns`` and the category ``_ns`` columns averaged over the steps, and
        ``split`` (whether the categories are known)::

            worker  device  step_time_ns  device_compute_ns  …  split
            w0      /host   1.2e6         3.1e5              …  True
    """
    if step is not None:
        return breakdown[breakdown["step"] == step]
    numeric = ["step_time_ns", *(columns or (f"{c}_ns" for c in CATEGORY_NAMES))]
    g = breakdown.groupby(["worker", "device"])
    means = g[numeric].mean().reset_index()
    means["split"] = g["split"].first().to_numpy()
    return means


def worker_summary(breakdown: pd.DataFrame, straggler_table: pd.DataFrame) -> pd.DataFrame:
    """Per worker × device (busiest device first): steps, mean and std step time and mean
    categories in ms, and the worker's straggler score.

    Args:
        breakdown: ``step_breakdown`` output.
        straggler_table: ``stragglers`` output for the same session.

    Returns:
        Columns ``worker, device, steps, method, step_ms_mean, step_ms_std,
        <category>_ms…, straggler_score, straggler``::

            worker  device  steps  step_ms_mean  input_ms  …  straggler_score  straggler
            w1      /host   40     12.5          0.4       …  0.61             True
    """
    g = breakdown.groupby(["worker", "device"])
    out = g.agg(steps=("step", "size"), method=("method", "first")).reset_index()
    out["step_ms_mean"] = (g["step_time_ns"].mean() / 1e6).round(3).to_numpy()
    out["step_ms_std"] = (g["step_time_ns"].std() / 1e6).round(3).to_numpy()
    for c in CATEGORY_NAMES:
        out[f"{c}_ms"] = (g[f"{c}_ns"].mean().astype("Float64") / 1e6).round(3).to_numpy()
    s = straggler_table.set_index("worker")
    out["straggler_score"] = out["worker"].map(s["score"]).round(3)
    out["straggler"] = out["worker"].map(s["straggler"])
    # per worker, the busiest device first (a GPU that works before one that waits)
    busy = out["device_compute_ms"].astype(float).fillna(0.0)
    order = out.assign(_busy=busy).sort_values(["worker", "_busy"], ascending=[True, False])
    return order.drop(columns="_busy").reset_index(drop=True)


def device_activity(
    planes: pd.DataFrame, busy: pd.DataFrame, breakdown: pd.DataFrame
) -> pd.DataFrame:
    """Per worker × accelerator (GPU/TPU plane): whether it ran anything, for how long, and in
    how many steps.

    Busy and idle come from the device's own events (``rule_inputs.device_busy``), never from
    steps: a TPU or JAX capture without steps still has busy devices.

    Args:
        planes: the ``planes`` frame (every device plane, even one without events).
        busy: ``rule_inputs.device_busy`` output.
        breakdown: ``step_breakdown`` output (a device has a row only for steps it worked in).

    Returns:
        Columns ``worker, device, events, busy_ms, busy_share, steps_busy, steps,
        compute_ms_per_step, idle``; ``busy_share`` = busy time over the span from the
        worker's first to last device event. ``idle`` is the one rule of "busy" every page
        and finding uses: where the worker has steps, no work in any of them (a device with a
        few events outside the steps, as a V100 capture's GPU:1 with 34 µs, is idle in the
        steps); without steps, no work event at all. Per worker the busiest devices first,
        idle ones last::

            worker  device         events  busy_ms  busy_share  steps_busy  steps  ...  idle
            w       /device:GPU:6  665     14.9     0.71        1           1      ...  False
            w       /device:GPU:0  0       0.0      0.0         0           1      ...  True
    """
    dev = planes[planes["plane"].astype(str).str.match(r"/device:(?:GPU|TPU):")]
    out = pd.DataFrame(
        {"worker": dev["worker"].astype(str), "device": dev["plane"].astype(str)}
    ).drop_duplicates()
    b = busy.set_index(["worker", "device"])
    out = out.join(b[["events", "busy_ns", "first_ns", "last_ns"]], on=["worker", "device"])
    span = (
        out.groupby("worker")["last_ns"].transform("max")
        - out.groupby("worker")["first_ns"].transform("min")
    ).astype(float)
    out["events"] = out["events"].fillna(0).astype("int64")
    busy_ns = out.pop("busy_ns").fillna(0).astype(float)
    out["busy_ms"] = (busy_ns / 1e6).round(3)
    out["busy_share"] = (busy_ns / span.where(span > 0)).fillna(0.0).round(4)
    out = out.drop(columns=["first_ns", "last_ns"])
    steps = breakdown.groupby("worker")["step"].nunique()
    work = breakdown.groupby(["worker", "device"]).agg(
        steps_busy=("step", "nunique"), compute=("device_compute_ns", "sum")
    )
    out = out.join(work, on=["worker", "device"])
    out["steps_busy"] = out["steps_busy"].fillna(0).astype("int64")
    out["steps"] = out["worker"].map(steps).fillna(0).astype("int64")
    per_step = out["compute"].astype(float) / out["steps_busy"].where(out["steps_busy"] > 0)
    out["compute_ms_per_step"] = (per_step.fillna(0.0) / 1e6).round(3)
    out["idle"] = np.where(out["steps"] > 0, out["steps_busy"] == 0, out["events"] == 0)
    out = out.drop(columns="compute").sort_values(
        ["worker", "idle", "busy_ms", "device"],
        ascending=[True, True, False, True],
        ignore_index=True,
    )
    return out
