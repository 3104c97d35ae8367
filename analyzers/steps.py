"""Training steps per worker, found from step markers or, without them, from documented fallbacks.

``find_steps(events)`` → one row per (worker, step):

    worker            step_num  start_ns             end_ns               method
    127.0.0.1_4001    12        1796021524369830243  1796021524384470000  marker
    127.0.0.1_4002    <NA>      1796021524369473531  1796021524384201000  python_call

Methods, tried in this order per worker (a marker wins from one step on, as in XProf — a Keras
``TensorBoard(profile_batch=(3, 5))`` window holds one whole ``train`` marker; the fallbacks
need at least two steps):

1. ``marker``: events with a ``step_num`` stat at depth 0 (``Trace('train', step_num=…, _r=1)``,
   tf-keras ``fit``, torch.profiler's ``ProfilerStep#N``: names that differ only by a
   ``#N`` suffix are one marker); ``train`` is preferred when several marker names exist.
2. ``group_id``: traces already grouped by XProf/TensorBoard (``group_id`` stats on host
   events): each group's time span is a step; on GPU captures only the groups that ran
   device work, each as long as its longest device span (see ``_group_rows``).
3. ``function``: the outermost calls of the most frequent tf.function execution,
   ``EagerLocalExecute: __inference_<name>`` with ``train`` in the name (custom loops without
   markers, ParameterServerStrategy workers).
4. ``python_call``: the Python tracer's ``polymorphic_function.py:<line> __call__`` events at
   depth ≤ 1 — what the collector's safe plan records on non-chief MWMS workers.
5. ``xla_program``: JAX (and other XLA) captures with none of the above: each execution of the
   dominant XLA program is a step (``analyzers.xla_programs``, which needs ``stats``). It comes
   first when step markers hold at least half of the executions' dispatch calls: JAX's
   ``StepTraceAnnotation`` spans only the asynchronous dispatch, so its markers number the
   steps (``step_num``) while the executions are the steps.

Each step also gets an anchor: the span (``anchor_start_ns``, ``anchor_end_ns``) of the last
collective (all-reduce, …) that ends inside it. In a synchronous job every worker's step k
overlaps it: a worker enters that collective before it can complete anywhere, and leaves its
step after the collective completed for it, which needs every participant to have entered.
That ties the workers' steps together whatever their spans look like.

``align_steps`` then numbers the steps every worker has (XProf's ``step`` 0..N-1): by
``step_num`` where workers have one; a worker without step numbers is matched to the reference
worker's steps by time — its step must overlap the reference step's anchor, or (a reference
without collectives) overlap the step itself for most of its length — never by counting steps from the
capture's start in a synchronous job; a step that matches no reference step, or whose match is
shared with another of its steps, is left out (``missing`` lists the reference steps a worker
lacks). Without collectives, steps pair by time overlap when that pairs at least half of every
worker's steps (a synchronous job traced without its collectives); otherwise the job is
asynchronous (ParameterServerStrategy: the coordinator hands each step to whichever worker is
free) and shares no step across workers, so every worker's k-th step is compared with the
reference's k-th, for step time only, never arrivals. The decision is the job's, not a
worker's: pairing some workers by overlap and others by order left few common steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from podscope.analyzers._match import isin, matches, rows_by, worker_time_keys
from podscope.analyzers.collectives import DEVICE_COLLECTIVE, HOST_COLLECTIVE, TORCH_GLOO
from podscope.analyzers.groups import device_spans
from podscope.analyzers.lines import DERIVED_LINES
from podscope.analyzers.xla_programs import XLA_COLLECTIVE, xla_steps

METHODS = ("marker", "group_id", "function", "python_call", "xla_program")
_FUNCTION = r"^EagerLocalExecute: __inference_\w*train\w*"
#: The step number a marker's name may end with (torch.profiler's ``ProfilerStep#12``).
_NUMBERED = r"#\d+$"
_PY_CALL = r"polymorphic_function\.py:\d+ __call__$"
STEP_COLUMNS = [
    "worker",
    "step_num",
    "start_ns",
    "end_ns",
    "method",
    "name",
    "event_row",
    "anchor_start_ns",
    "anchor_end_ns",
    "call_ns",
]


def _rows(ev: pd.DataFrame, method: str) -> pd.DataFrame:
    out = pd.DataFrame(
        {
            "worker": ev["worker"].astype(str),
            "step_num": ev["step_num"].astype("Int64")
            if method == "marker"
            else pd.array([pd.NA] * len(ev), dtype="Int64"),
            "start_ns": ev["start_ns"].to_numpy(),
            "end_ns": ev["start_ns"].to_numpy() + ev["dur_ps"].to_numpy() // 1000,
            "method": method,
            "name": ev["name"].astype(str),
            "event_row": ev.index.to_numpy(dtype=np.int64),
        }
    )
    return out.sort_values("start_ns", kind="stable")


def _group_rows(ev: pd.DataFrame, device: pd.DataFrame) -> pd.DataFrame:
    """Steps of traces grouped by XProf (``group_id`` stats).

    Without device work, each group's host time span. With it (``device``: the grouped
    events on device stream lines), XProf's rules: only groups that ran device work are
    steps (a lone ``tf_data_iterator`` group is input work, not a step), and a step lasts as
    long as the longest span one device spent on it, unless the host's span includes that
    (``StepDetails::StepTime``): two GPUs that ran the same step 650 ms apart make one step
    of one GPU's length, not a 670 ms step."""
    end = ev["start_ns"] + ev["dur_ps"] // 1000
    g = ev.assign(end_ns=end).groupby("group_id", observed=True)
    span = g.agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max")).reset_index()
    first = g["start_ns"].idxmin()
    if len(device):
        dev = device_spans(device)
        longest = dev.loc[
            dev.assign(d=dev["end_ns"] - dev["start_ns"]).groupby("group_id")["d"].idxmax()
        ]
        span = span.merge(longest, on="group_id", suffixes=("_host", ""))
        host_has = (span["start_ns_host"] <= span["start_ns"]) & (
            span["end_ns_host"] >= span["end_ns"]
        )
        span.loc[host_has, "start_ns"] = span.loc[host_has, "start_ns_host"]
        span.loc[host_has, "end_ns"] = span.loc[host_has, "end_ns_host"]
        first = first.reindex(span["group_id"].to_numpy())
    out = pd.DataFrame(
        {
            "worker": str(ev["worker"].iloc[0]),
            "step_num": span["group_id"].astype("Int64"),
            "start_ns": span["start_ns"].to_numpy(),
            "end_ns": span["end_ns"].to_numpy(),
            "method": "group_id",
            "name": ev["name"].astype(str).loc[first.to_numpy()].to_numpy(),
            "event_row": first.to_numpy(dtype=np.int64),
        }
    )
    return out.sort_values("start_ns", kind="stable")


def _outermost(ev: pd.DataFrame) -> pd.DataFrame:
    """Events not inside another of ``ev`` (by time, not depth: an event cut by the capture's
    start loses its parents, so its depth differs from its siblings')."""
    ev = ev.sort_values(["start_ns", "dur_ps"], ascending=[True, False], kind="stable")
    end = (ev["start_ns"] + ev["dur_ps"] // 1000).to_numpy()
    before = np.maximum.accumulate(np.concatenate(([np.iinfo(np.int64).min], end[:-1])))
    return ev[ev["start_ns"].to_numpy() >= before]


def _xla(ev: pd.DataFrame, stats: pd.DataFrame | None, modules: bool) -> pd.DataFrame | None:
    """The worker's XLA program steps, numbered by the step markers that hold their dispatch
    calls (JAX's ``StepTraceAnnotation``: it spans only the asynchronous dispatch, so the
    markers number the steps but the executions are the steps); None without a program
    executed twice. ``modules``: whether any event of ``stats`` names an HLO module (asked
    once per frame: each worker of a batch scanned the batch's whole stats)."""
    if stats is None or not len(ev):
        return None
    if not modules and not isin(ev["line"], {"XLA Modules"}).any():
        return None  # no XLA program in the trace
    xla = xla_steps(ev, stats[stats["event_row"].isin(ev.index)])
    if xla.empty:
        return None
    marks = ev[ev["step_num"].notna()]
    rows = xla["event_row"].to_numpy(np.int64)
    known = np.isin(rows, ev.index.to_numpy())
    if marks.empty or not known.any():
        return xla
    call = ev.loc[rows[known]]
    nums = pd.array([pd.NA] * len(xla), dtype="Int64")
    found = np.full(int(known.sum()), -1, dtype=np.int64)
    for line, m in marks.groupby("line", observed=True):
        m = m.sort_values("start_ns")
        start = m["start_ns"].to_numpy()
        end = start + m["dur_ps"].to_numpy() // 1000
        here = (call["line"] == line).to_numpy()
        t = call["start_ns"].to_numpy()[here]
        i = np.searchsorted(start, t, side="right") - 1
        ok = (i >= 0) & (t < end[np.clip(i, 0, None)])
        found[np.flatnonzero(here)[ok]] = m["step_num"].to_numpy(np.int64)[i[ok]]
    nums[np.flatnonzero(known)[found >= 0]] = found[found >= 0]
    return xla.assign(step_num=nums)


def _worker_steps(
    ev: pd.DataFrame, stats: pd.DataFrame | None = None, modules: bool = False
) -> pd.DataFrame:
    xla = _xla(ev, stats, modules)
    if xla is not None and 2 * int(xla["step_num"].notna().sum()) >= len(xla):
        return xla  # JAX with markers: the executions, numbered by the markers
    markers = ev[ev["step_num"].notna() & (ev["depth"] == 0)]
    if len(markers):
        names = markers["name"].astype(str)
        markers = (
            markers[names == "train"]
            if (names == "train").any()
            else markers[names == names.mode().iloc[0]]
        )
        if len(markers) >= 1:
            return _rows(markers, "marker")
    on_device = matches(ev["plane"], "/device:", how="startswith")
    has_group = ev["group_id"].notna().to_numpy()
    grouped = ev[has_group & ~on_device]
    device = ev[has_group & on_device & ~isin(ev["line"], DERIVED_LINES)]
    if len(device):  # GPU groups: the groups that ran device work, however few
        grouped = grouped[grouped["group_id"].isin(device["group_id"].unique())]
    if grouped["group_id"].nunique() >= (1 if len(device) else 2):
        return _group_rows(grouped, device)
    fn = ev[matches(ev["name"], _FUNCTION)]
    if len(fn):
        top = _outermost(fn[fn["name"].astype(str) == fn["name"].astype(str).mode().iloc[0]])
        if len(top) >= 2:
            return _rows(top, "function")
    calls = ev[matches(ev["name"], _PY_CALL) & (ev["depth"] <= 1)]
    if len(calls) >= 2:
        return _rows(_outermost(calls), "python_call")
    if xla is not None:
        return xla
    return pd.DataFrame(
        {
            c: pd.Series(dtype=t)
            for c, t in zip(
                STEP_COLUMNS[:-3],
                ["str", "Int64", "int64", "int64", "str", "str", "int64"],
                strict=True,
            )
        }
    )


def _anchors(ev: pd.DataFrame, steps: pd.DataFrame, step_worker: np.ndarray) -> pd.DataFrame:
    """Per step: start and end of the last collective of its worker (host collective op or
    device collective kernel, PyTorch gloo span) that ends inside it; missing where none does. ``step_worker``:
    each step's worker, as a code of ``ev["worker"]``."""
    on_device = matches(ev["plane"], "/device:", how="startswith")
    coll = ev[
        (~on_device & matches(ev["op_type"], HOST_COLLECTIVE, how="match"))
        | (~on_device & matches(ev["name"], TORCH_GLOO, how="match"))
        | (on_device & matches(ev["name"], DEVICE_COLLECTIVE, how="match"))
        | matches(ev["name"], XLA_COLLECTIVE, how="match")
    ]
    start = pd.array([pd.NA] * len(steps), dtype="Int64")
    out = pd.DataFrame({"anchor_start_ns": start, "anchor_end_ns": start.copy()})
    if coll.empty or steps.empty:
        return out
    c_start = coll["start_ns"].to_numpy(np.int64)
    c_end = c_start + coll["dur_ps"].to_numpy(np.int64) // 1000
    c_worker = coll["worker"].cat.codes.to_numpy()
    c_key, s_key = worker_time_keys(
        c_worker, c_end, step_worker, steps["end_ns"].to_numpy(np.int64)
    )
    order = np.argsort(c_key, kind="stable")  # by worker, then end (ties: in row order)
    c_start, c_end, c_worker, c_key = c_start[order], c_end[order], c_worker[order], c_key[order]
    i = np.searchsorted(c_key, s_key, side="right") - 1  # the last that ends by the step's end
    j = np.clip(i, 0, None)
    ok = (
        (i >= 0) & (c_worker[j] == step_worker) & (c_end[j] >= steps["start_ns"].to_numpy(np.int64))
    )
    for col, values in (("anchor_start_ns", c_start[j]), ("anchor_end_ns", c_end[j])):
        arr = pd.array(values, dtype="Int64")
        arr[~ok] = pd.NA
        out[col] = arr
    return out


def _calls(
    ev: pd.DataFrame, steps: pd.DataFrame, step_worker: np.ndarray, traced_calls: np.ndarray
) -> pd.Series:
    """Per step: when its step function was called, the first call of it by the step's
    worker that starts inside the step: the host tracer's TraceMe of a tf.function call (a
    ``tf_function_call`` stat, ``traced_calls``; named ``train_function`` in Keras, the
    function's name in a loop), else its ``EagerLocalExecute: __inference_…train…``, or the
    Python tracer's ``__call__`` (where the safe plan's workers' steps begin). The TraceMe
    and the ``__call__`` both open as Python calls the function, so the workers' calls are
    the same instant of the same step; ``EagerLocalExecute`` opens ~0.4 ms later, after
    dispatch. The worker's arrival starts there, whatever ran in the step before it (Keras's
    ``on_train_batch_begin``, a loop's Python). NA where none starts inside (XLA program
    steps, group steps); a ``function`` or ``python_call`` step is that call.
    ``step_worker``: as ``_anchors``."""
    out = pd.array([pd.NA] * len(steps), dtype="Int64")
    if steps.empty:
        return pd.Series(out, name="call_ns")
    named = matches(ev["name"], "train")
    calls = ev[
        (np.isin(ev.index.to_numpy(), traced_calls) & named)
        | matches(ev["name"], _FUNCTION)
        | (matches(ev["name"], _PY_CALL) & (ev["depth"] <= 1))
    ]
    own_call = steps["method"].isin(["function", "python_call"]).to_numpy()
    start = steps["start_ns"].to_numpy(np.int64)
    if len(calls):
        t = calls["start_ns"].to_numpy(np.int64)
        t_worker = calls["worker"].cat.codes.to_numpy()
        t_key, s_key = worker_time_keys(t_worker, t, step_worker, start)
        order = np.argsort(t_key, kind="stable")
        t, t_worker, t_key = t[order], t_worker[order], t_key[order]
        i = np.searchsorted(t_key, s_key, side="left")  # the first that starts at or after it
        j = np.clip(i, 0, len(t) - 1)
        inside = (
            (i < len(t))
            & (t_worker[j] == step_worker)
            & (t[j] < steps["end_ns"].to_numpy(np.int64))
        )
        out[inside] = t[j[inside]]
    out[own_call] = start[own_call]
    return pd.Series(out, name="call_ns")


def _marker_steps(
    events: pd.DataFrame, stats: pd.DataFrame | None, modules: bool
) -> tuple[pd.DataFrame, np.ndarray]:
    """The steps of the workers whose step markers give them (``_worker_steps``' first
    choice, where no XLA program can come before it), for every such worker at once: a
    pod's batch of workers paid ~10 ms each for a pass per worker. Returns them, sorted by
    time (stably), and those workers' codes."""
    codes = events["worker"].cat.codes.to_numpy()
    marked = (events["step_num"].notna() & (events["depth"] == 0)).to_numpy().copy()
    if stats is not None and len(events):
        if modules:  # any worker's programs may be steps: each worker is looked at alone
            marked[:] = False
        else:
            xla_workers = np.unique(codes[isin(events["line"], {"XLA Modules"})])
            marked &= ~np.isin(codes, xla_workers)
    markers = events[marked]
    if markers.empty:
        return _rows(markers, "marker"), np.empty(0, dtype=codes.dtype)
    m_codes = codes[marked]
    # A name that numbers its step (PyTorch's "ProfilerStep#12") is one marker family.
    names = (
        markers["name"].astype(str).str.replace(_NUMBERED, "", regex=True).to_numpy(dtype=object)
    )
    # Per worker: its "train" markers if it has any, else those of its most frequent name
    # (the first in order of the names with that count, as Series.mode gives it).
    counts = pd.DataFrame({"w": m_codes, "name": names}).value_counts(sort=False).reset_index()
    counts["train"] = counts["name"] == "train"
    counts = counts.sort_values(
        ["w", "train", "count", "name"], ascending=[True, False, False, True], kind="stable"
    )
    chosen = counts.drop_duplicates("w").set_index("w")["name"]
    keep = names == chosen.reindex(m_codes).to_numpy()
    return _rows(markers[keep], "marker"), chosen.index.to_numpy()


def find_steps(events: pd.DataFrame, stats: pd.DataFrame | None = None) -> pd.DataFrame:
    """Steps of every worker.

    Args:
        events: ``events`` frame (columns worker, name, start_ns, dur_ps, depth, step_num).
        stats: the ``stats`` frame; without it, XLA program executions are not looked for.

    Returns:
        Columns ``worker, step_num (Int64, marker's own number), start_ns, end_ns, method,
        name, event_row, anchor_start_ns, anchor_end_ns`` (the span of the last collective
        that ends inside the step, Int64), ``call_ns`` (when the step's function was called,
        ``_calls``; Int64),
        sorted by worker then time. A worker with no steps has no rows (see
        ``step_methods`` for why).
    """
    traced = (
        stats.loc[matches(stats["key"], "tf_function_call"), "event_row"].to_numpy(np.int64)
        if stats is not None and len(stats)
        else np.empty(0, dtype=np.int64)
    )
    modules = stats is not None and bool((stats["key"] == "hlo_module").any())
    marked, codes = _marker_steps(events, stats, modules)
    done = set(codes.tolist())
    parts = [marked] if len(marked) else []
    names = events["worker"].cat.categories
    for worker, pos in rows_by(events["worker"]).items():  # the others, one by one
        if names.get_loc(worker) not in done:
            st = _worker_steps(events.iloc[pos], stats, modules)
            if len(st):
                parts.append(st)
    if not parts:
        empty = _worker_steps(events.iloc[:0])
        none = events.iloc[:0]
        no = np.empty(0, dtype=np.int64)
        return pd.concat(
            [empty, _anchors(none, empty, no), _calls(none, empty, no, traced)], axis=1
        )
    steps = pd.concat(parts, ignore_index=True)
    # by worker (in the order of its categories), each worker's steps in their own order (a
    # stable sort: the markers' are by time)
    order = np.argsort(names.get_indexer(steps["worker"].to_numpy()), kind="stable")
    steps = steps.iloc[order].reset_index(drop=True)
    step_worker = names.get_indexer(steps["worker"].to_numpy())
    return pd.concat(
        [steps, _anchors(events, steps, step_worker), _calls(events, steps, step_worker, traced)],
        axis=1,
    )


def step_methods(events: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per worker: the method that found its steps, or why none were found.

    Returns:
        Columns ``worker, method, steps, note``.
    """
    rows = []
    found = (
        steps.groupby("worker")["method"].agg(["first", "size"]) if len(steps) else pd.DataFrame()
    )
    for w in (
        events["worker"].cat.categories
        if hasattr(events["worker"], "cat")
        else sorted(events["worker"].unique())
    ):
        if w in found.index:
            method, n = found.loc[w, "first"], int(found.loc[w, "size"])
            note = {
                "marker": "step markers (Trace('train', step_num=…) or Keras fit)",
                "group_id": "no step markers: steps from the trace's group_id stats (grouped by XProf)",
                "function": "no step markers: one tf.function train call per step",
                "python_call": "Python tracer only: one tf.function __call__ per step; TF ops not traced",
                "xla_program": "no step markers: one execution of the XLA program the loop repeats per step",
            }[method]
            rows.append((w, method, n, note))
        else:
            rows.append(
                (
                    w,
                    "none",
                    0,
                    "no step marker, no repeated tf.function train call and no XLA program "
                    "a loop repeats (several shapes of one function, each run a few times in "
                    "a row, are a benchmark sweep, not steps)",
                )
            )
    return pd.DataFrame(rows, columns=["worker", "method", "steps", "note"])


def match_by_time(steps: pd.DataFrame, ref: pd.DataFrame) -> np.ndarray:
    """For each of one worker's ``steps``, the row of ``ref`` (another worker's steps, in time
    order) it is the same step as; -1 where that cannot be proven.

    With anchors in ``ref`` (a synchronous job's collectives), a step matches the reference
    step whose anchor span it overlaps, and only one — or, touching two (it began while the
    reference finished the step before), the one whose step it overlaps at least twice as
    much; a step that overlaps none, or two without such a margin, or more, is unproven; an
    unproven run between two proven steps with the same offset takes it
    (``_between_proven``). Without anchors, a step matches the reference step it overlaps
    most, if that covers at least half of the step. Either way, two steps that match the same
    reference step are both unproven. Counting from the capture's start is never used here.
    """
    start = steps["start_ns"].to_numpy(np.int64)
    end = steps["end_ns"].to_numpy(np.int64)
    out = np.full(len(steps), -1, dtype=np.int64)
    if not len(ref) or not len(steps):
        return out
    a_start, a_end = (
        ref[c].astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
        for c in ("anchor_start_ns", "anchor_end_ns")
    )
    has = np.flatnonzero(~np.isnan(a_end))
    if len(has):  # anchors of consecutive steps follow each other in time
        lo = np.searchsorted(a_end[has], start, side="left")  # first anchor ending after start
        hi = np.searchsorted(a_start[has], end, side="right")  # anchors starting before end
        one = hi - lo == 1
        out[one] = has[lo[one]]
        # A step that began while the reference was still finishing the last collective of
        # the step before touches both anchors: the step it spans (≥ 2× the overlap) wins.
        r_start = ref["start_ns"].to_numpy(np.int64)
        r_end = ref["end_ns"].to_numpy(np.int64)
        for row in np.flatnonzero(hi - lo == 2):
            j = has[lo[row] : hi[row]]
            overlap = np.minimum(end[row], r_end[j]) - np.maximum(start[row], r_start[j])
            first, second = np.sort(overlap)[::-1]
            if first > 0 and first >= 2 * max(second, 0):
                out[row] = j[int(np.argmax(overlap))]
    else:
        r_start = ref["start_ns"].to_numpy(np.int64)
        r_end = ref["end_ns"].to_numpy(np.int64)
        mid = start + (end - start) // 2
        k = np.searchsorted(r_start, mid, side="right") - 1
        best = np.zeros(len(steps), dtype=np.int64)
        for d in (-1, 0, 1):  # the reference step around the middle and its neighbours
            j = np.clip(k + d, 0, len(ref) - 1)
            overlap = np.minimum(end, r_end[j]) - np.maximum(start, r_start[j])
            better = overlap > best
            best[better], out[better] = overlap[better], j[better]
        out[2 * best < end - start] = -1
    taken = pd.Series(out)
    out[taken.duplicated(keep=False).to_numpy() & (out >= 0)] = -1
    # only collectives prove a pairing; overlap alone is no ground to infer more from
    return _between_proven(out, len(ref)) if len(has) else out


def _between_proven(out: np.ndarray, n_ref: int) -> np.ndarray:
    """Unproven steps between two proven ones that pair with the same offset (own index →
    reference index) take that offset: steps follow each other on both workers, so with both
    neighbours fixed nothing else fits. A worker running half a step out of phase with the
    reference touches two anchors in most steps; its proven steps fix the rest. Steps before
    the first or after the last proven one stay unproven."""
    known = np.flatnonzero(out >= 0)
    if len(known) < 2:
        return out
    offset = out[known] - known
    same = (np.diff(known) > 1) & (offset[1:] == offset[:-1])
    for a, b, d in zip(known[:-1][same], known[1:][same], offset[:-1][same], strict=True):
        idx = np.arange(a + 1, b)
        out[idx] = np.where((idx + d >= 0) & (idx + d < n_ref), idx + d, -1)
    return out


#: XProf's overview and input pipeline drop a capture's first and last step as partial when
#: it has more than this many (``ConvertStepEventsToStepDb``'s incomplete steps): the capture
#: window cut them, or the first carries warm-up (a JAX loop's first execution, without the
#: host gap before it).
PARTIAL_AFTER = 5


def align_steps(
    steps: pd.DataFrame, drop_partial: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Numbers the steps every worker has, 0..N-1 in time order (XProf's ``step``).

    Workers with marker ``step_num``s are aligned on it. Workers without are matched to a
    reference worker's steps by time (``match_by_time``): the worker with step numbers and the
    most steps, or, when no worker has numbers, the worker with the most steps (anchored ones
    first), whose steps are numbered in their own order. With ``drop_partial``, of more than
    ``PARTIAL_AFTER`` common steps the first and the last are left out as partial (XProf's
    rule; ``partial_steps`` names them): counts and statistics are those of whole steps.

    Returns:
        ``(aligned, missing)``: ``aligned`` = steps present on every worker with column
        ``step`` (and ``step_num`` filled from the reference); ``missing`` = per worker, the
        reference ``step_num``s it lacks or whose match could not be proven (columns
        ``worker, step_num``).
    """
    if steps.empty:
        return steps.assign(step=pd.Series(dtype="int64")), pd.DataFrame(
            columns=["worker", "step_num"]
        )
    for col in ("anchor_start_ns", "anchor_end_ns"):
        if col not in steps:
            steps = steps.assign(**{col: pd.array([pd.NA] * len(steps), dtype="Int64")})
    workers = sorted(steps["worker"].unique())
    numbered = steps[steps["step_num"].notna()]
    if numbered.empty:
        anchored = steps["anchor_end_ns"].notna().groupby(steps["worker"]).any()
        size = steps.groupby("worker").size()
        ref_worker = max(workers, key=lambda w: (bool(anchored[w]), int(size[w]), w))
        ref = steps[steps["worker"] == ref_worker].sort_values("start_ns")
        ref = ref.assign(step_num=pd.array(np.arange(len(ref)), dtype="Int64"))
    else:
        ref_worker = numbered.groupby("worker").size().idxmax()
        ref = (
            numbered[numbered["worker"] == ref_worker]
            .drop_duplicates("step_num")
            .sort_values("start_ns")
        )
    has_numbers = steps["step_num"].notna().groupby(steps["worker"]).all()
    # each worker's rows, split once (a mask per worker was 512 passes over a pod's steps)
    by_worker = dict(list(steps.groupby("worker", sort=False, observed=True)))
    others = {
        w: by_worker[w].sort_values("start_ns")
        for w in workers
        if w != ref_worker and not has_numbers[w]
    }
    matched = {w: match_by_time(s, ref) for w, s in others.items()}
    if ref["anchor_end_ns"].isna().all() and any(
        2 * (i >= 0).sum() < len(i) for i in matched.values()
    ):
        # No collective ties the steps and time does not pair them: an asynchronous job, which
        # shares no step; every worker's k-th step is compared, for step time only.
        matched = {
            w: np.where(np.arange(len(s)) < len(ref), np.arange(len(s)), -1)
            for w, s in others.items()
        }
    # Keyed by their own numbers: the reference's steps, and every numbered worker's at once
    # (a frame per worker cost 1.3 s on 512 hosts); the others by their match.
    numbered_ = steps[
        steps["worker"].isin([w for w in workers if w not in others and w != ref_worker])
    ]
    parts = [r.assign(key=r["step_num"].astype("int64")) for r in (ref, numbered_)]
    for w, s in others.items():
        ok = matched[w] >= 0
        nums = ref["step_num"].to_numpy()[matched[w][ok]]
        parts.append(s[ok].assign(key=nums.astype("int64"), step_num=pd.array(nums, dtype="Int64")))
    ordered = pd.concat(parts, ignore_index=True)
    rank = pd.Series(np.arange(len(workers)), index=workers)
    # by worker (each worker's rows in their own order: the first of a number is kept)
    ordered = ordered.iloc[np.argsort(rank[ordered["worker"]].to_numpy(), kind="stable")]
    ordered = ordered.reset_index(drop=True).drop_duplicates(["worker", "key"])
    counts = ordered.groupby("key")["worker"].nunique()
    common = counts[counts == len(workers)].index
    aligned = ordered[ordered["key"].isin(common)].copy()
    order = aligned.groupby("key")["start_ns"].min().sort_values()
    # a step's number: its key's place in ``order`` (Series.map took 0.25 s here on a first
    # call, building an Index of strings from its mapper)
    aligned["step"] = order.index.get_indexer(aligned["key"].to_numpy()).astype("int64")
    present = (
        ordered.groupby(["key", "worker"])
        .size()
        .unstack(fill_value=0)
        .reindex(columns=workers, fill_value=0)
    )
    absent = present[~present.index.isin(common)].eq(0).stack()
    missing = absent[absent].reset_index()[["worker", "key"]].rename(columns={"key": "step_num"})
    aligned = aligned.drop(columns="key").sort_values(["worker", "step"], ignore_index=True)
    if drop_partial:
        aligned = whole_steps(aligned)
    return aligned, missing.sort_values(["worker", "step_num"], ignore_index=True)


def own_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Each worker's steps numbered in its own order, as ``align_steps(…, drop_partial=False)``
    numbers them for that worker alone, for every worker at once: what a worker's breakdown
    is computed for before the session's alignment picks its rows (``analyzers.execution``;
    per worker, ``align_steps`` cost 11 ms, a third of a small worker's analysis).

    A worker with numbered steps keeps those, the first of each number; the others' steps
    are numbered in time order. ``step`` counts each worker's kept steps in time order (ties
    by number, else in row order). Rows: the workers in order of appearance, each by step."""
    if steps.empty:
        return align_steps(steps, drop_partial=False)[0]
    for col in ("anchor_start_ns", "anchor_end_ns"):
        if col not in steps:
            steps = steps.assign(**{col: pd.array([pd.NA] * len(steps), dtype="Int64")})
    worker = pd.factorize(steps["worker"].astype(str))[0]
    numbered = steps["step_num"].notna().to_numpy()
    any_numbered = np.zeros(worker.max() + 1, dtype=bool)
    any_numbered[worker[numbered]] = True
    keep = numbered | ~any_numbered[worker]
    keep &= ~(numbered & steps.duplicated(["worker", "step_num"]).to_numpy())
    kept, worker, numbered = steps[keep], worker[keep], numbered[keep]
    start = kept["start_ns"].to_numpy(np.int64)
    tie = np.where(
        numbered, kept["step_num"].to_numpy(dtype=np.int64, na_value=0), np.arange(len(kept))
    )
    order = np.lexsort((tie, start, worker))
    out = kept.iloc[order].reset_index(drop=True)
    w = worker[order]
    first = np.r_[0, np.flatnonzero(w[1:] != w[:-1]) + 1]
    step = np.arange(len(w)) - np.repeat(first, np.diff(np.r_[first, len(w)]))
    unnumbered = ~numbered[order]
    if unnumbered.any():
        nums = out["step_num"].astype("Int64").to_numpy(dtype=object, na_value=pd.NA)
        nums[unnumbered] = step[unnumbered]
        out["step_num"] = pd.array(nums, dtype="Int64")
    out["step"] = step.astype("int64")
    return out


def whole_steps(aligned: pd.DataFrame) -> pd.DataFrame:
    """``aligned`` without its first and last step when it has more than ``PARTIAL_AFTER``
    (renumbered from 0); as it is otherwise."""
    n = int(aligned["step"].max()) + 1 if len(aligned) else 0
    if n <= PARTIAL_AFTER:
        return aligned
    kept = aligned[(aligned["step"] > 0) & (aligned["step"] < n - 1)]
    return kept.assign(step=kept["step"] - 1).reset_index(drop=True)


def partial_steps(every: pd.DataFrame) -> pd.DataFrame:
    """Of ``every`` aligned step (``align_steps(…, drop_partial=False)``), the first and the
    last, which ``whole_steps`` leaves out as partial; none when there are too few."""
    n = int(every["step"].max()) + 1 if len(every) else 0
    if n <= PARTIAL_AFTER:
        return every.iloc[:0]
    return every[every["step"].isin([0, n - 1])].reset_index(drop=True)
