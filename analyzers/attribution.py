"""Why a worker-step is slow: culprit or victim, the excess split into categories and ops, and
a cause named only when one component explains most of it.

    >>> arr = arrivals(pod, comparable_workers(methods))   # arrival, wait, estimated?
    >>> slow = slow_steps(arr, op_steps)         # per slow worker-step: excess and its split
    >>> roles(arr, slow)                         # per worker: culprit / victim / —
    >>> stragglers(arr, roles(arr, slow))        # per worker: lateness score, named or not

One decision, read everywhere: a worker is *the* straggler (Pod Viewer badge, ``straggler``
and ``straggler_cause`` findings, Workers page, CLI) exactly when ``roles`` calls it the
culprit; ``stragglers`` only adds its mean lateness as a multiple of the median step.

Synchronous jobs (MultiWorkerMirroredStrategy): every worker ends a step together, so a slow
worker does not have a longer step; it *arrives* at the step's collectives later, and the
others wait for it there. A worker's arrival = its step start + its own work (step time −
collective time). Its own work begins with whatever runs in the step before the step's
function is called (``before_call_ns``: Keras's ``on_train_batch_begin`` callbacks, a loop's
Python), measured on every worker at every tracer level (``analyzers.steps``: the call is a
TraceMe of the host tracer and a ``__call__`` of the Python tracer). A worker traced with the
Python tracer only (the safe plan's non-chief workers) has no categories: its work inside the
function is estimated as the traced workers' median there (``estimated``), so a worker slowed
before its call (a chief's callbacks) is late on every plan, and one slowed inside its
function is late only where it is traced.

* late (a worker-step): arrives later than the others' median arrival by at least
  ``min_excess`` of the median step time (asynchronous jobs: a step longer than the others'
  median by as much);
* culprit (a worker): late, by its own doing, in ≥ 2/3 of its steps and in ≥ 2× as many as
  any other worker (``roles``);
* victim: waits for the last arriver (its wait ≥ half the last arriver's lateness) without
  being late itself; its extra time is the wait;
* outlier: a step longer than the worker's own mean + 3 σ (``history_sigma``), split
  against the worker's own median step.

Only workers whose steps span the same thing are compared (``comparable_workers``): a worker
whose steps were found from its ``EagerLocalExecute`` calls is left out when the others' come
from markers or the Python tracer's ``__call__``.

The excess is split into components: ``late start`` (its step started after the others',
beyond what its previous step's late end explains), ``previous step ended late`` (the
collectives that close every step finished late for it — a slow link to it, not its own work:
such steps never make it the culprit), each category of its own work (vs the others' or its own median) and ``unattributed`` (what
the medians do not add up to); the cause is the largest component when it explains at
least ``cause_share`` (80 %) of the excess, else ``mixed``; ``largest`` names that component
either way. Ops: the op types whose self time in that step exceeds the reference the most.

A worker's cause (``worker_causes``) is read from its slow steps' excess summed, not from their
labels: on a loaded machine a 60 ms late start shares some steps with 20 ms of a late previous
end, and half of a straggler's steps were ``mixed`` although the late start was the largest
component of every one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from podscope.analyzers.breakdown import CATEGORIES
from podscope.analyzers.pod import is_synchronous

OWN_WORK = [c for c in CATEGORIES if c != "device_collectives"]
LATE = "late start"
#: the worker's own host time in the step before its step function was called (callbacks,
#: a loop's Python), not waiting for input
BEFORE_CALL = "before the step function (callbacks, Python)"
#: a late start that its previous step's late end explains: the collectives that close every
#: step finished late for this worker (a slow link to it), not work of its own between steps
LINK = "previous step ended late"
#: no component explains enough of the excess to be named
MIXED = "mixed"
UNATTRIBUTED = "unattributed"
SLOW_COLUMNS = [
    "worker",
    "step",
    "step_num",
    "basis",
    "role",
    "excess_ns",
    "cause",
    "largest",
    "cause_share",
    "components",
    "ops",
    "victims",
]


#: Step-finding methods whose steps span the same thing: a marker and the Python tracer's
#: ``__call__`` both wrap the whole step call; a ``function`` step is the narrower
#: ``EagerLocalExecute`` inside it; ``group_id`` steps are XProf's groups; ``xla_program`` steps
#: run from one execution of the step's program to the next.
SPAN_FAMILY = {
    "marker": "call",
    "python_call": "call",
    "function": "function",
    "group_id": "group",
    "xla_program": "program",
}


def comparable_workers(methods: pd.DataFrame) -> set[str]:
    """The workers whose steps can be compared with each other: those whose step method spans
    the same thing as most workers' (ties go to the whole-call family). Comparing a worker's
    ``EagerLocalExecute`` span with another's whole ``__call__`` would make a culprit of a
    method."""
    fam = methods.assign(family=methods["method"].map(SPAN_FAMILY)).dropna(subset=["family"])
    if fam.empty:
        return set()
    counts = fam["family"].value_counts()
    best = counts[counts == counts.max()].index
    chosen = "call" if "call" in best else str(best[0])
    return set(fam.loc[fam["family"] == chosen, "worker"].astype(str))


def arrivals(
    pod: pd.DataFrame,
    comparable: set[str] | None = None,
    synchronous: bool | None = None,
    before: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per worker × step: when it arrived at the step's collectives and how long it waited.

    Args:
        pod: ``analyzers.pod.pod_view`` output.
        comparable: the workers to compare (``comparable_workers``); None: all.
        synchronous: whether the job is synchronous (``analyzers.pod.anchored``: collectives
            inside the steps); None: judged from step ends (``is_synchronous``).
        before: ``analyzers.breakdown.before_call_breakdown`` rows: their categories become
            ``before_<category>_ns`` (0 where a worker-step has none).

    Returns:
        ``pod`` (the comparable workers' rows) with ``synchronous`` (the one answer every
        later analysis reads), ``own_ns`` (step time − collectives; for a worker without
        categories, its time before its step function plus the traced workers' median time
        in theirs: ``estimated``),
        ``arrival_ns``, ``wait_ns`` (last arrival − own arrival, synchronous jobs; 0 for
        asynchronous ones).
    """
    out = pod if comparable is None else pod[pod["worker"].astype(str).isin(comparable)]
    out = out.copy()
    out["synchronous"] = is_synchronous(out) if synchronous is None else synchronous
    split = out["split"].astype(bool)
    coll = out["device_collectives_ns"].astype("Float64").fillna(0).astype(float)
    pre_call = (
        out["before_call_ns"].astype(float)
        if "before_call_ns" in out
        else pd.Series(0.0, out.index)
    )
    own = (out["step_time_ns"] - coll).where(split)
    # what a traced worker does inside its step function, before the collectives: the
    # reference for a worker traced with the Python tracer only, whose own time before its
    # call is measured (its step is the call)
    ref = (own - pre_call).groupby(out["step"]).transform("median")
    out["estimated"] = own.isna()
    out["own_ns"] = own.fillna(pre_call + ref).fillna(pre_call).round().astype("int64")
    out["arrival_ns"] = out["start_ns"].astype("int64") + out["own_ns"]
    if is_synchronous(out):
        out["wait_ns"] = out.groupby("step")["arrival_ns"].transform("max") - out["arrival_ns"]
    else:
        out["wait_ns"] = 0.0
    names = [f"before_{c}_ns" for c in OWN_WORK]
    if before is not None and len(before):
        pre = before[["worker", "step", *(f"{c}_ns" for c in OWN_WORK)]].astype({"worker": str})
        pre = pre.groupby(["worker", "step"], as_index=False).sum()
        pre.columns = ["worker", "step", *names]
        index = out.index
        out = out.assign(worker=out["worker"].astype(str)).merge(
            pre, on=["worker", "step"], how="left"
        )
        out.index = index
        out[names] = out[names].astype("float64").fillna(0.0)
    else:
        out[names] = 0.0
    return out


def _others_median(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Per row, the median of ``cols`` over the *other* workers of the same step (NaN where
    no other worker has a value), as ``np.nanmedian`` over them gives it.

    Each step's values are sorted once; a row's median leaves out its own rank, so a step of
    n workers costs n log n, not n² (512 workers × 60 steps × 8 columns was 1 GB of copies)."""
    ref = np.full((len(frame), len(cols)), np.nan)
    values_all = frame[cols].to_numpy(dtype=np.float64)
    # the steps' rows side by side, steps of one size at a time: a loop over a thousand steps
    # was a tenth of a second of the Pod Viewer's first load
    codes = pd.factorize(frame["step"].to_numpy())[0]
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes)
    firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for n in np.unique(sizes[sizes >= 2]):
        idx = order[firsts[sizes == n][:, None] + np.arange(n)]  # (steps, n) rows
        for c in range(len(cols)):
            ref[idx, c] = _median_of_others(values_all[idx, c])
    return pd.DataFrame(ref, index=frame.index, columns=cols)


def _median_of_others(values: np.ndarray) -> np.ndarray:
    """(steps, n) values → per element, the median of its row's other non-NaN values."""
    rank_order = np.argsort(values, axis=1, kind="stable")  # NaN last
    ordered = np.take_along_axis(values, rank_order, axis=1)
    rank = np.empty_like(rank_order)
    np.put_along_axis(rank, rank_order, np.arange(values.shape[1])[None, :], axis=1)
    valid = ~np.isnan(values)
    count = valid.sum(axis=1, keepdims=True) - valid  # the others' values per element
    lo, hi = (count - 1) // 2, count // 2

    def nth(j: np.ndarray) -> np.ndarray:  # the j-th of the others: own rank skipped
        j = j + (valid & (j >= rank))
        return np.take_along_axis(ordered, np.clip(j, 0, values.shape[1] - 1), axis=1)

    out = (nth(lo) + nth(hi)) / 2
    out[count == 0] = np.nan
    return out


def _previous_end_lag(arr: pd.DataFrame) -> pd.Series:
    """Per worker-step: how much later than the earliest worker its previous step ended (0 for
    a worker's first step). In a synchronous job every step ends with collectives, so a worker
    whose previous step ends late had them finish late for it: its late start is the link's."""
    order = arr.sort_values("step")
    prev_end = order.groupby(order["worker"].astype(str))["end_ns"].shift(1)
    lag = prev_end - prev_end.groupby(order["step"]).transform("min")
    return lag.fillna(0).clip(lower=0).reindex(arr.index).astype("float64")


def lateness(arr: pd.DataFrame) -> pd.Series:
    """Per worker-step (``arrivals`` rows): how much later it arrives at the collectives than
    the other workers' median arrival in that step (synchronous), or how much longer its step
    is than theirs (asynchronous), in ns; NaN where no other worker has that step."""
    if arr.empty:
        return pd.Series(dtype="float64")
    first = arr.groupby("step")["start_ns"].transform("min")
    # relative to the step's first start: epoch nanoseconds do not fit a float exactly
    metric = arr["arrival_ns"] - first if is_synchronous(arr) else arr["step_time_ns"]
    frame = pd.DataFrame({"step": arr["step"], "_metric": metric.astype(float)}, index=arr.index)
    return frame["_metric"] - _others_median(frame, ["_metric"])["_metric"]


#: A worker last in at least this share of its steps arrives last "in nearly every step"…
STEADY_SHARE = 0.95
#: …and is named when chance alone (each worker last in 1 of n steps) would do that less than
#: once in this many captures…
STEADY_CHANCE = 1e-3
#: …and its mean lateness is at least this share of the median step. Healthy jobs have a
#: worker that is last most of the time by a little: make verify's kept baselines (seed 7)
#: reach 81 % of 140 steps at 0.031 of the step, 75 % of 20 at 0.104; their slowed workers
#: are last in 100 % at 0.43–1.9; a JAX slow device of 11 ms was last in 100 % at 0.24 and went
#: unnamed (its steps under 0.1 of the step were not late ones).
STEADY_FLOOR = 0.05


#: A worker whose late steps are mostly ``MIXED`` (no part of its own step explains the
#: excess)…
UNEXPLAINED_SHARE = 0.5
#: …is the culprit only when late by this share of the median step on average, or last in
#: nearly every step (``steady_last``). A collective's own asymmetry makes such lateness: in a
#: healthy 2-rank DDP job of make verify (seed 11) gloo left rank 1 late by 0.23 of its 5.4 ms
#: step in 12 of 15 steps, 11 of them mixed, last in 87 %; the slowed workers whose late steps
#: are mostly mixed (JAX slow hosts) are late by 1.7-1.9 steps, last in 100 %.
UNEXPLAINED_FLOOR = 0.5


def steady_last(arr: pd.DataFrame, late: pd.Series | None = None) -> list[str]:
    """The workers of ``arrivals`` rows that arrive last in nearly every step
    (``STEADY_SHARE``) where chance would not (``STEADY_CHANCE``: a binomial tail, each of
    the n workers last with probability 1/n), late on average by ``STEADY_FLOOR`` of the
    median step or more. ``late``: ``lateness(arr)``, when the caller has it."""
    if arr.empty or arr["worker"].nunique() < 2:
        return []
    late = lateness(arr) if late is None else late
    last = late.eq(late.groupby(arr["step"]).transform("max")) & (late > 0)
    return _steadily(arr, late, last, 1 / arr["worker"].nunique())


def _steadily(arr: pd.DataFrame, late: pd.Series, hit: pd.Series, chance: float) -> list[str]:
    """The workers whose steps are ``hit`` in ``STEADY_SHARE`` of them or more, where
    ``chance`` per step would make that rarer than ``STEADY_CHANCE`` (a binomial tail), and
    whose ``late`` averages ``STEADY_FLOOR`` of the median step or more."""
    by = pd.DataFrame({"hit": hit, "late": late / float(arr["step_time_ns"].median())}).groupby(
        arr["worker"].astype(str)
    )
    steps, hits, mean = by.size(), by["hit"].sum(), by["late"].mean()
    return [
        str(w)
        for w in steps.index[(hits >= STEADY_SHARE * steps) & (mean >= STEADY_FLOOR)]
        if _binomial_tail(int(hits[w]), int(steps[w]), chance) <= STEADY_CHANCE
    ]


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p), 0 < p < 1 (in logs: a pod's thousands of steps)."""
    log_n = math.lgamma(n + 1)
    return math.fsum(
        math.exp(
            log_n
            - math.lgamma(i + 1)
            - math.lgamma(n - i + 1)
            + i * math.log(p)
            + (n - i) * math.log1p(-p)
        )
        for i in range(k, n + 1)
    )


def _split(
    names: Sequence[object], delta: np.ndarray, excess: float, share: float
) -> tuple[str, str, float, str]:
    """(cause, the largest component, its share of the excess, the components as text) from
    per-component excess ``delta`` (of the components ``names``), in numpy: a pandas Series
    per slow step cost 4 ms each."""
    pos = np.flatnonzero(delta > 0.005 * excess)
    if excess <= 0 or not len(pos):
        return MIXED, "", 0.0, ""
    pos = pos[np.argsort(-delta[pos], kind="stable")]  # largest first, ties in order
    top, top_share = str(names[pos[0]]), float(delta[pos[0]] / excess)
    text = ", ".join(f"{names[i]} {float(delta[i]) / 1e6:+.2f} ms" for i in pos[:4])
    return (top if top_share >= share else MIXED), top, min(top_share, 1.0), text


def worker_causes(
    slow: pd.DataFrame, roles: Sequence[str] = ("late",), share: float = 2 / 3
) -> pd.DataFrame:
    """Per worker with slow steps of the ``roles`` (``slow_steps`` rows): the component that
    explains the most of their excess summed, named when it explains at least ``share`` of it
    (twice the rest together), else ``mixed``.

    A component is counted in the steps where it is the largest (``largest`` ×
    ``cause_share`` of the step's excess), so its share is a lower bound. Two components of
    equal size stay ``mixed``, whichever of them each step lists first.

    Returns:
        Indexed by worker: ``cause``, ``share`` (of the summed excess), ``steps``.
    """
    own = slow[slow["role"].astype(str).isin(list(roles))]
    worker = own["worker"].astype(str).rename("worker")
    out = own.groupby(worker)["excess_ns"].agg(steps="size", total="sum")
    explained = (own["cause_share"] * own["excess_ns"]).groupby([worker, own["largest"]]).sum()
    explained = explained.drop("", level=1, errors="ignore")  # steps with no positive part
    by_worker = explained.groupby(level=0)
    out["share"] = (by_worker.max() / out["total"]).reindex(out.index).fillna(0.0).clip(upper=1.0)
    top = pd.Series({w: c for w, c in by_worker.idxmax()}, dtype=object)
    out["cause"] = top.reindex(out.index).where(out["share"] >= share, MIXED).fillna(MIXED)
    return out[["cause", "share", "steps"]]


def _op_texts(op_steps: pd.DataFrame, rows: dict[int, list[tuple[int, str]]]) -> dict[int, str]:
    """Per slow row (``rows``: per step, its rows' positions and workers), ``_op_text`` of
    its worker in that step against the median of the *other* workers. Each step's op times
    are one op type x worker matrix (``op_steps_of`` has one row per worker, step and op
    type), so a row's reference is a median over its columns, not a groupby per row (9 ms
    each, on every late step of a pod's culprit)."""
    ops = op_steps[op_steps["step"].isin(list(rows))]
    # codes in sorted order, as a groupby's levels (ties are broken in op type order); a
    # groupby of a pod's million rows on two string columns cost 0.25 s
    type_code, types = pd.factorize(ops["op_type"], sort=True)
    worker_code, workers = pd.factorize(ops["worker"].astype(str), sort=True)
    steps, step_code = np.unique(ops["step"].to_numpy(np.int64), return_inverse=True)
    known = type_code >= 0  # a missing op type is no group (groupby's dropna)
    order = np.argsort(step_code[known], kind="stable")
    step_code, type_code = step_code[known][order], type_code[known][order]
    worker_code = worker_code[known][order]
    values = ops["self_ps"].to_numpy(dtype=np.float64)[known][order]
    column = {str(w): j for j, w in enumerate(workers)}
    bounds = np.searchsorted(step_code, np.arange(len(steps) + 1))
    out: dict[int, str] = {}
    for k, step in enumerate(steps):
        here = slice(bounds[k], bounds[k + 1])
        present, local = np.unique(type_code[here], return_inverse=True)
        cell = local * len(workers) + worker_code[here]
        size = len(present) * len(workers)
        m = np.bincount(cell, values[here], minlength=size).reshape(len(present), len(workers))
        m[np.bincount(cell, minlength=size).reshape(m.shape) == 0] = np.nan
        names = pd.Index(types[present])
        for i, worker in rows.get(int(step), []):
            out[i] = _extra_text(m, column.get(worker), names)
    return out


def _extra_text(m: np.ndarray, col: int | None, names: pd.Index) -> str:
    """``_op_text`` of column ``col`` of a step's op type x worker times ``m`` (rows in op
    type order) against the median of the other columns, with numpy."""
    mine = m[:, col] if col is not None else np.full(len(m), np.nan)
    others = np.delete(m, col, axis=1) if col is not None else m
    has_other = ~np.isnan(others).all(axis=1)
    ref = np.zeros(len(m))
    ref[has_other] = _row_medians(others[has_other])
    present = ~np.isnan(mine) | has_other  # the op types ``Series.sub`` aligns on
    extra = (np.nan_to_num(mine) - ref)[present]
    top = np.argsort(-extra, kind="stable")[:3]  # ``nlargest(3)``: ties in op type order
    top = top[extra[top] > 0]
    return _ms_text(zip(names[present][top], extra[top], strict=True))


def _row_medians(values: np.ndarray) -> np.ndarray:
    """Per row, the median of its non-NaN values (at least one), as ``np.nanmedian(axis=1)``
    gives it, from one sort: numpy's path for short rows goes through masked arrays, 1 ms a
    late step's op types x 511 workers."""
    ordered = np.sort(values, axis=1)  # NaN last
    count = (~np.isnan(values)).sum(axis=1)
    rows = np.arange(len(values))
    return (ordered[rows, (count - 1) // 2] + ordered[rows, count // 2]) / 2


def _ms_text(extra: Iterable[tuple[object, float]]) -> str:
    """Op types and their extra time (ps), as the slow steps' ``ops`` column says them."""
    return ", ".join(f"{k} {v / 1e9:+.2f} ms" for k, v in extra)


def _op_text(mine: pd.DataFrame, ref: pd.Series) -> str:
    """The three op types of one worker-step's op rows ``mine`` most beyond ``ref``, with
    their extra ms."""
    extra = mine.set_index("op_type")["self_ps"].sub(ref, fill_value=0.0).nlargest(3)
    extra = extra[extra > 0]
    return _ms_text(extra.items())


SLOW_OP_COLUMNS = ["worker", "step", "op_type", "self_ps"]


def _no_op_steps() -> pd.DataFrame:
    """An empty ``op_steps_of`` frame, typed (an untyped one breaks ``nlargest``)."""
    return pd.DataFrame(
        {
            "worker": pd.Series(dtype=str),
            "step": pd.Series(dtype="int64"),
            "op_type": pd.Series(dtype=str),
            "self_ps": pd.Series(dtype="float64"),
        }
    )


def op_steps_of(op_counts: pd.DataFrame, aligned: pd.DataFrame) -> pd.DataFrame:
    """``rule_inputs.op_counts`` (per own step start) → per worker, aligned step and op type:
    ``worker, step, op_type, self_ps``."""
    cols = SLOW_OP_COLUMNS
    if op_counts.empty or aligned.empty:
        return _no_op_steps()
    keys = aligned[["worker", "start_ns", "step"]].astype({"worker": str})
    keys = keys.rename(columns={"start_ns": "step_start_ns"})
    return op_counts.merge(keys, on=["worker", "step_start_ns"])[cols]


def slow_steps(
    arr: pd.DataFrame,
    op_steps: pd.DataFrame | None = None,
    min_excess: float = 0.1,
    history_sigma: float = 3.0,
    cause_share: float = 0.8,
    outliers: bool = True,
) -> pd.DataFrame:
    """Every slow worker-step, against the other workers in that step and against the
    worker's own history (unless not ``outliers``: ``roles`` reads only the late steps),
    with the excess split and a cause.

    Args:
        arr: ``arrivals`` output.
        op_steps: ``op_steps_of`` output (None or empty: no ops named; the roles do not
            depend on it).
        min_excess: lateness (or extra step time) that makes a step slow, as a share of the
            median step time.
        history_sigma: a step beyond the worker's mean + this many σ is an outlier.
        cause_share: share of the excess one component must explain to be named the cause.

    Returns:
        Columns ``SLOW_COLUMNS``: ``basis`` is ``vs other workers`` or ``vs own history``;
        ``role`` ``late`` (late against the others in that step; a worker late in most of
        its steps is the culprit, see ``roles``) or ``outlier``; ``victims`` the workers that
        waited for it
        with their wait (``w0 58.1 ms``); largest excess first.
    """
    if arr.empty:
        return pd.DataFrame(columns=SLOW_COLUMNS)
    if op_steps is None:
        op_steps = _no_op_steps()
    sync = is_synchronous(arr)
    cats = [f"{c}_ns" for c in OWN_WORK]
    median_step = float(arr["step_time_ns"].median())
    comp = arr[cats].astype("Float64").astype(float)
    comp.columns = OWN_WORK
    # the time before the step function is a component of its own (an input wait there is
    # input): the categories are those of the work inside the function
    pre = pd.DataFrame(
        {c: arr.get(f"before_{c}_ns", 0.0) for c in OWN_WORK}, index=arr.index
    ).astype(float)
    comp = comp - pre
    comp["input"] = comp["input"] + pre["input"]
    comp[arr["estimated"].to_numpy()] = np.nan
    frame = pd.concat([arr[["worker", "step"]], comp], axis=1)
    before = arr["before_call_ns"].astype(float) if "before_call_ns" in arr else 0.0
    frame[BEFORE_CALL] = before - pre["input"]
    late_start = arr["start_ns"] - arr.groupby("step")["start_ns"].transform("min")
    frame[LINK] = np.minimum(_previous_end_lag(arr), late_start)
    frame[LATE] = late_start - frame[LINK]
    ref = _others_median(frame, [*OWN_WORK, BEFORE_CALL, LATE, LINK])
    rows: list[tuple[object, ...]] = []
    excess = lateness(arr)
    # a worker last in nearly every step is late in each of them, however little (its steps
    # under ``min_excess`` too): small against the step, but never by chance
    steady = arr["worker"].astype(str).isin(steady_last(arr, excess)).to_numpy()
    slow = np.flatnonzero(
        ((excess >= min_excess * median_step) | (steady & (excess > 0))).to_numpy()
    )
    # what the slow steps' rows read, grouped once (a filter per row cost more than the rest)
    workers, steps = arr["worker"].to_numpy(dtype=object), arr["step"].to_numpy()
    wait = arr["wait_ns"].to_numpy()
    in_slow = np.flatnonzero(np.isin(steps, steps[slow]))
    arr_by_step = {
        int(k): (workers[in_slow[p]], wait[in_slow[p]])
        for k, p in pd.Series(steps[in_slow]).groupby(steps[in_slow]).indices.items()
    }
    parts = [*OWN_WORK, BEFORE_CALL, LATE, LINK] if sync else [*OWN_WORK, BEFORE_CALL]
    deltas = (frame[parts].astype(float) - ref[parts]).fillna(0.0).to_numpy()
    step_nums = arr["step_num"].to_numpy()
    of_step: dict[int, list[tuple[int, str]]] = {}
    for i in slow:
        of_step.setdefault(int(steps[i]), []).append((int(i), str(workers[i])))
    op_texts = _op_texts(op_steps, of_step)
    components = [*parts, UNATTRIBUTED]
    for i in slow:
        worker, step = str(workers[i]), int(steps[i])
        late = float(excess.iloc[i])
        d = deltas[i]
        delta = np.append(d, late - float(np.clip(d, 0, None).sum()))
        cause, largest, share, text = _split(components, delta, late, cause_share)
        same_worker, same_wait = arr_by_step[step]
        victim = (same_worker != worker) & (same_wait >= 0.5 * late) & sync
        rows.append(
            (
                worker,
                step,
                step_nums[i],
                "vs other workers",
                "late",
                late,
                cause,
                largest,
                share,
                text,
                op_texts.get(int(i), ""),
                ", ".join(
                    f"{w} {v / 1e6:.1f} ms"
                    # Python numbers: numpy scalars format 3x slower (511 victims a row)
                    for w, v in zip(
                        same_worker[victim].tolist(), same_wait[victim].tolist(), strict=True
                    )
                ),
            )
        )
    if outliers:
        rows += _outliers(arr, op_steps, history_sigma, cause_share)
    out = pd.DataFrame(rows, columns=SLOW_COLUMNS)
    return out.sort_values("excess_ns", ascending=False, ignore_index=True)


def _may_have_outliers(
    arr: pd.DataFrame, positions: dict[str, np.ndarray], sigma: float
) -> list[str]:
    """The workers, in ``positions``' order, with a step that may be past their mean +
    ``sigma`` σ: all workers' means and deviations at once, with a margin, so that the exact
    test (``_outliers``, per worker) runs only where it can succeed. Per worker, it cost 2 ms
    for each of a pod's 512 hosts, none of which had an outlier."""
    t = arr["step_time_ns"].to_numpy(dtype=np.float64)
    code = np.empty(len(arr), dtype=np.int64)
    names = list(positions)
    for i, w in enumerate(names):
        code[positions[w]] = i
    n = np.bincount(code, minlength=len(names)).astype(np.float64)
    mean = np.bincount(code, t, minlength=len(names)) / np.maximum(n, 1)
    dev = t - mean[code]
    std = np.sqrt(np.bincount(code, dev * dev, minlength=len(names)) / np.maximum(n - 1, 1))
    limit = mean + sigma * std
    margin = 1e-9 * (np.abs(mean) + sigma * std)  # far above float rounding
    top, bottom = np.full(len(names), -np.inf), np.full(len(names), np.inf)
    np.maximum.at(top, code, t)
    np.minimum.at(bottom, code, t)
    # steps of one length have none past their mean (the margin would keep them all)
    may = (n >= 5) & (top > bottom) & (top > limit - margin)
    return [w for i, w in enumerate(names) if may[i]]


def _outliers(
    arr: pd.DataFrame,
    op_steps: pd.DataFrame,
    sigma: float,
    cause_share: float,
) -> list[tuple[object, ...]]:
    """Steps beyond the worker's own mean + sigma·σ, split against its own median step."""
    rows: list[tuple[object, ...]] = []
    # each worker's op steps, found once and only when a worker has an outlier (a mask per
    # worker was 512 passes in a pod; a frame per worker, 0.1 s at 2,048 hosts with none)
    ops_of: dict[str, np.ndarray] | None = None
    positions = arr.groupby(arr["worker"].astype(str)).indices  # per worker, sorted by name
    for w in _may_have_outliers(arr, positions, sigma):
        g = arr.iloc[positions[w]]
        t = g["step_time_ns"].astype(float)
        limit = t.mean() + sigma * t.std()
        if not (t > limit).any():  # most workers of a pod: nothing to split
            continue
        comp = g[[f"{c}_ns" for c in CATEGORIES]].astype("Float64").astype(float)
        comp.columns = list(CATEGORIES)
        med = comp.median()
        if ops_of is None:
            ops_of = op_steps.groupby(op_steps["worker"].astype(str), sort=False).indices
        mine = op_steps.iloc[ops_of.get(w, np.empty(0, dtype=np.int64))]
        op_med = mine.groupby(["op_type", "step"])["self_ps"].sum().groupby("op_type").median()
        for idx in g.index[(t > limit).to_numpy()]:
            excess = float(t.loc[idx] - t.median())
            delta = (comp.loc[idx] - med).fillna(0.0)
            delta[UNATTRIBUTED] = excess - float(delta.clip(lower=0).sum())
            cause, largest, share, text = _split(
                delta.index, delta.to_numpy(float), excess, cause_share
            )
            step = int(arr.loc[idx, "step"])
            rows.append(
                (
                    w,
                    step,
                    arr.loc[idx, "step_num"],
                    "vs own history",
                    "outlier",
                    excess,
                    cause,
                    largest,
                    share,
                    text,
                    _op_text(mine[mine["step"] == step], op_med),
                    "",
                )
            )
    return rows


def roles(
    arr: pd.DataFrame,
    slow: pd.DataFrame,
    majority: float = 2 / 3,
    dominance: float = 2.0,
    z_min: float = 3.0,
) -> pd.DataFrame:
    """Per worker: in how many steps it was late, how much it waited, and its role.

    A worker is the culprit when it is late in at least ``majority`` of its steps *and* in at
    least ``dominance`` times as many steps as any other worker, or in significantly more
    (``_late_z`` ≥ ``z_min``): with two workers and noise alone, one of them is late in about
    half the steps by construction, so a bare majority would name a culprit on a healthy job
    by a coin flip. The significance test is for asynchronous jobs on a busy machine, where a
    healthy worker is late in up to half its steps: a make verify run's 45 ms PS straggler,
    late in 31 of 31 steps, was not named beside a runner-up late in 16 (2 × 16 > 31). In an
    asynchronous job (``arr``'s ``synchronous`` False) only significance counts: a healthy PS
    worker was named, late in 9 of 13 steps beside one late in 2 (twice as many, z 2.8; chance
    about one run in eight), while the PS stragglers of make verify stand at z 6.9–9.2.

    Returns:
        Columns ``worker, steps, late_steps, mean_wait_ms, wait_share, role`` (``culprit``;
        ``slow`` when it arrives after the others' median in nearly every step, by
        ``STEADY_FLOOR`` of the step on average, though not the culprit: a second slowed host
        that also waits for the first is slow itself, not its victim; ``victim`` when it waits
        for the culprit in ``majority`` of the steps; else empty).
    """
    steps = arr.groupby(arr["worker"].astype(str)).agg(
        steps=("step", "size"), wait=("wait_ns", "mean"), time=("step_time_ns", "mean")
    )
    # a step late because its previous step's collectives ended late (the link) is not the
    # worker's own lateness
    culprit = slow[(slow["role"] == "late") & (slow["cause"] != LINK)]
    steps["late_steps"] = culprit.groupby("worker").size().reindex(steps.index).fillna(0)
    late = steps["late_steps"]
    ranked = steps.sort_values("late_steps", ascending=False)
    runner_up = ranked.iloc[1] if len(ranked) > 1 else None
    ahead = late >= dominance * (runner_up["late_steps"] if runner_up is not None else 0.0)
    if runner_up is not None:
        significant = (
            _late_z(late, steps["steps"], runner_up["late_steps"], runner_up["steps"]) >= z_min
        )
        asynchronous = "synchronous" in arr and not arr["synchronous"].astype(bool).any()
        ahead = significant if asynchronous else ahead | significant
    named = steps.index[(late >= majority * steps["steps"]) & (late == late.max()) & ahead]
    named = _explained(arr, culprit, named)
    # per worker, the culprit's steps it waited in (counted at once: a Series cell per victim
    # cost 1 s on a 512-host pod)
    waited = Counter(
        part.rsplit(" ", 2)[0] for v in culprit["victims"] for part in v.split(", ") if part
    )
    victim_steps = pd.Series(waited, dtype=float).reindex(steps.index, fill_value=0.0)
    out = steps.reset_index().rename(columns={"index": "worker"})
    out["late_steps"] = out["late_steps"].astype("int64")
    out["mean_wait_ms"] = out.pop("wait") / 1e6
    out["wait_share"] = out["mean_wait_ms"] * 1e6 / out.pop("time")
    is_victim = (victim_steps >= majority * steps["steps"]).reindex(out["worker"]).to_numpy()
    is_slow = out["worker"].isin(_late_itself(arr)).to_numpy()
    out["role"] = np.where(
        out["worker"].isin(named),
        "culprit",
        np.where(is_slow, "slow", np.where(is_victim, "victim", "")),
    )
    return out[["worker", "steps", "late_steps", "mean_wait_ms", "wait_share", "role"]]


def _explained(arr: pd.DataFrame, late_steps: pd.DataFrame, named: pd.Index) -> list[str]:
    """``named`` less the workers whose lateness nothing of their own explains and that is
    small and unsteady (``UNEXPLAINED_SHARE``, ``UNEXPLAINED_FLOOR``)."""
    mixed = (late_steps["cause"] == MIXED).groupby(late_steps["worker"].astype(str)).mean()
    doubtful = {str(w) for w in named if mixed.get(str(w), 0.0) >= UNEXPLAINED_SHARE}
    if not doubtful or "arrival_ns" not in arr:
        return [str(w) for w in named]
    excess = lateness(arr)
    mean = (excess / float(arr["step_time_ns"].median())).groupby(arr["worker"].astype(str)).mean()
    kept = {w for w in doubtful if mean.get(w, 0.0) >= UNEXPLAINED_FLOOR}
    kept |= doubtful & set(steady_last(arr, excess))
    return [str(w) for w in named if str(w) not in doubtful or str(w) in kept]


def _late_itself(arr: pd.DataFrame) -> list[str]:
    """The workers that arrive after the others' median in nearly every step
    (``STEADY_SHARE``), where chance would not (``STEADY_CHANCE``: after the median half the
    time), by ``STEADY_FLOOR`` of the median step or more on average."""
    if arr.empty or "arrival_ns" not in arr:
        return []
    late = lateness(arr)
    return _steadily(arr, late, late > 0, 0.5)


def ranked_roles(roles: pd.DataFrame, stragglers: pd.DataFrame) -> pd.DataFrame:
    """``roles`` with each worker's ``late_ms`` (``stragglers``: its mean arrival after the
    others' median), the latest first: in a pod the culprits are the first rows, not rows 8
    and 400 of a table sorted by name."""
    late = stragglers.set_index("worker")["late_ms"] if len(stragglers) else pd.Series()
    table = roles.assign(late_ms=roles["worker"].astype(str).map(late))
    return table.sort_values(
        ["late_ms", "worker"], ascending=[False, True], na_position="last", ignore_index=True
    )


def _late_z(late: pd.Series, steps: pd.Series, other_late: float, other_steps: float) -> pd.Series:
    """Two-proportion z statistic (pooled) of each worker's late share against another
    worker's: how many standard errors apart the two shares are."""
    pooled = (late + other_late) / (steps + other_steps)
    se = np.sqrt(pooled * (1 - pooled) * (1 / steps + 1 / other_steps))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (late / steps - other_late / other_steps) / se
    return z.fillna(0.0)


STRAGGLER_COLUMNS = [
    "worker",
    "score",
    "late_ms",
    "last_share",
    "mean_step_time_ns",
    "median_step_ns",
    "mode",
    "straggler",
]


def stragglers(arr: pd.DataFrame, role_table: pd.DataFrame) -> pd.DataFrame:
    """One row per compared worker: its mean lateness and whether it is the straggler.

    Args:
        arr: ``arrivals`` output.
        role_table: ``roles`` output for the same rows (the decision: role ``culprit``).

    Returns:
        Columns ``STRAGGLER_COLUMNS``, highest score first: ``score`` = mean ``lateness``
        over its steps as a multiple of the median step time (``0.4`` = 0.4× the median step;
        not a share), ``late_ms`` the same in ms (the mean of its ``lateness`` cells),
        ``median_step_ns`` the median step time the score divides by, ``last_share`` the share of steps in which
        it arrived last (asynchronous: was the slowest), ``mode`` synchronous or
        asynchronous, ``straggler`` True for the culprit of ``roles``.
    """
    if arr.empty:
        return pd.DataFrame(columns=STRAGGLER_COLUMNS)
    late = lateness(arr)
    median_step = float(arr["step_time_ns"].median())
    worker = arr["worker"].astype(str)
    last = late.eq(late.groupby(arr["step"]).transform("max"))
    out = pd.DataFrame(
        {
            "score": (late / median_step).groupby(worker).mean(),
            "late_ms": late.groupby(worker).mean() / 1e6,
            "last_share": last.groupby(worker).mean(),
            "mean_step_time_ns": arr.groupby(worker)["step_time_ns"].mean(),
        }
    ).rename_axis("worker")
    out = out.reset_index()
    out["median_step_ns"] = median_step
    out["mode"] = "synchronous" if is_synchronous(arr) else "asynchronous"
    culprits = set(role_table.loc[role_table["role"] == "culprit", "worker"].astype(str))
    out["straggler"] = out["worker"].isin(culprits)
    return out.sort_values("score", ascending=False, ignore_index=True)[STRAGGLER_COLUMNS]


def straggler_verdict(
    pod: pd.DataFrame, comparable: set[str] | None = None, synchronous: bool | None = None
) -> pd.DataFrame:
    """``stragglers`` straight from a pod view (no op split of the slow steps), for a library
    user holding ``pod_view``: the decision ``SessionAnalysis.stragglers`` makes when
    ``synchronous`` is ``analyzers.pod.anchored(aligned)``, as it is there. Without it the job
    is judged from step ends, which a straggler's late ends can flip on a loaded machine (a
    3-worker all-reduce job with a 60 ms straggler read as asynchronous: no culprit)."""
    arr = arrivals(pod, comparable, synchronous)
    return stragglers(arr, roles(arr, slow_steps(arr)))
