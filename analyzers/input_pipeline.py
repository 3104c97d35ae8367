"""The tf.data input pipeline per iterator, for every worker: what each stage costs, which
calls blocked the training step, the bottleneck stage and what to change.

TF's host tracer records one event per iterator ``GetNext`` call, named by the iterator's
path (``Iterator::Root::Prefetch::MapAndBatch::ForeverRepeat[1]::TensorSlice``), on the thread
that made the call: the step's own thread for a synchronous chain, a background thread for
what an asynchronous stage (``Prefetch``, ``ParallelMapV2``…) produces ahead.

    >>> it = iterator_table(frames.events, frames.stats)     # per worker and iterator path
    >>> pipeline_summary(it, rule_events, pod)               # per worker: bottleneck, advice

``iterator_table`` reproduces XProf's *input op table* (``input_pipeline_analyzer``): per
iterator, calls, total time, and self time = time not spent in a child iterator's call on
the same thread. Ours adds what XProf's table does not say:

* ``blocking_self_ps``: self time inside a call the step waited for (under ``IteratorGetNext``
  on the same thread); the rest ran ahead on background threads;
* ``work_ps`` / ``wait_ps``: an asynchronous stage's self time is waiting for its producer
  (its buffer was empty), not work; a synchronous stage's self time is its own work (its
  function, its source's reads). The bottleneck is the stage with the most work.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from podscope.analyzers._match import matches, worker_time_keys
from podscope.trace_parsers.nesting import nest_columns

#: Stages that produce on background threads: their self time on a caller's thread is waiting.
ASYNC_STAGES = frozenset(
    {
        "Prefetch",
        "ParallelMap",
        "ParallelMapV2",
        "MapAndBatch",
        "ParallelInterleave",
        "ParallelInterleaveV2",
        "ParallelInterleaveV3",
        "ParallelInterleaveV4",
        "LegacyParallelInterleave",
        "ParallelBatch",
        "ParallelFilter",
    }
)
SOURCES = frozenset(
    {"TFRecord", "TextLine", "FixedLengthRecord", "Generator", "TensorSlice", "Range", "Tensor"}
)
#: The call the training step makes (op or its DoCompute), and MultiDeviceIterator's.
GET_NEXT = r"(?:IteratorGetNext|MultiDeviceIteratorGetNextFromShard)"

_SUGGESTIONS = (
    (
        re.compile(r"^Map$"),
        "This map runs on one thread: give it num_parallel_calls=tf.data.AUTOTUNE; if its "
        "output is the same every epoch, put .cache() after it.",
    ),
    (
        re.compile(r"^(?:ParallelMap|ParallelMapV2|MapAndBatch|ParallelBatch)$"),
        "This map is already parallel: set num_parallel_calls=tf.data.AUTOTUNE, vectorize it "
        "(batch first, then map over the batch), or .cache() its output if it is deterministic.",
    ),
    (
        re.compile(r"Interleave"),
        "Interleave with num_parallel_calls=tf.data.AUTOTUNE and a larger cycle_length "
        "(deterministic=False if order does not matter).",
    ),
    (
        re.compile(r"^Generator$"),
        "A Python generator yields one element at a time under the GIL: move its work into "
        "tf ops (from_tensor_slices + map) or interleave several generators.",
    ),
    (
        re.compile(r"^(?:TFRecord|TextLine|FixedLengthRecord|FlatMap)$"),
        "The source reads slowly: read files in parallel (list_files → interleave(..., "
        "num_parallel_calls=tf.data.AUTOTUNE)), raise buffer_size, or .cache() a small dataset.",
    ),
    (
        re.compile(r"Batch"),
        "Batching many small elements: batch before per-element work and map over batches, "
        "or turn on Options().experimental_optimization.parallel_batch.",
    ),
    (
        re.compile(r"Filter"),
        "Filter before expensive stages and keep the predicate cheap (or filter offline).",
    ),
    (
        re.compile(r"Shuffle"),
        "A large shuffle buffer fills slowly: shuffle file names, or use a smaller buffer.",
    ),
)
ITERATOR_COLUMNS = [
    "worker",
    "iterator",
    "parent",
    "depth",
    "stage",
    "user_name",
    "calls",
    "total_ps",
    "self_ps",
    "blocking_self_ps",
    "work_ps",
    "wait_ps",
]


def stage_of(path: str) -> str:
    """The dataset kind of an iterator path's last stage: ``…::ForeverRepeat[1]::TensorSlice``
    → ``TensorSlice``; ``Iterator::Root`` → ``Root``."""
    return re.sub(r"\[\d+\]$", "", path.rsplit("::", 1)[-1])


def suggestion(stage: str) -> str:
    """What to change when ``stage`` (a dataset kind) is the bottleneck."""
    for pattern, text in _SUGGESTIONS:
        if pattern.search(stage):
            return text
    return "Profile this stage's function; parallelize (num_parallel_calls) or .cache() it."


def iterator_table(events: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """Per worker and iterator path: calls, total and self time (XProf's input op table),
    the self time that blocked the step, and work versus waiting.

    Args:
        events: the ``events`` frame (one worker or many).
        stats: the ``stats`` frame (the user's ``name=`` of a stage is its ``name`` stat).

    Returns:
        Columns ``ITERATOR_COLUMNS`` (``parent``: the consuming iterator's path, ``depth``: 0
        for ``Iterator::Root``), per worker the most work first; empty without tf.data events.
    """
    is_it = matches(events["name"], "Iterator::", how="startswith")
    is_get = matches(events["name"], GET_NEXT, how="match")
    sub = events[is_it | is_get]
    if not is_it.any():
        return pd.DataFrame({c: pd.Series(dtype=object) for c in ITERATOR_COLUMNS})
    group = pd.factorize(
        pd.MultiIndex.from_arrays([sub["worker"].astype(str), sub["line_id"].astype(str)])
    )[0]
    start = sub["start_ns"].to_numpy(np.int64) * 1000
    end = start + sub["dur_ps"].to_numpy(np.int64)
    order = np.lexsort((-end, start, group))
    getter = is_get[is_it | is_get][order]
    _, parent, _ = nest_columns(group[order], start[order], end[order])
    blocked = getter.copy()  # parents come first in this order: one pass propagates down
    for i in np.flatnonzero(parent >= 0):
        blocked[i] |= blocked[parent[i]]
    it_rows = ~getter
    g_it, s_it, e_it = group[order][it_rows], start[order][it_rows], end[order][it_rows]
    _, _, self_ps = nest_columns(g_it, s_it, e_it)  # self among iterators only (XProf's)
    rows = sub.index.to_numpy()[order][it_rows]
    it = pd.DataFrame(
        {
            "worker": sub["worker"].astype(str).to_numpy()[order][it_rows],
            "iterator": sub["name"].astype(str).to_numpy()[order][it_rows],
            "dur": (e_it - s_it).astype(np.float64),
            "self": self_ps.astype(np.float64),
            "blocking": np.where(blocked[it_rows], self_ps, 0).astype(np.float64),
            "row": rows,
        }
    )
    names = stats[(stats["key"] == "name") & stats["event_row"].isin(rows)]
    user = names.drop_duplicates("event_row").set_index("event_row")["str_value"]
    it["user_name"] = it["row"].map(user)
    g = it.groupby(["worker", "iterator"], sort=True)
    out = g.agg(
        calls=("dur", "size"),
        total_ps=("dur", "sum"),
        self_ps=("self", "sum"),
        blocking_self_ps=("blocking", "sum"),
        user_name=("user_name", "first"),
    ).reset_index()
    out["stage"] = out["iterator"].map(stage_of)
    # the tree: Iterator::Root is depth 0, its input 1, …; a stage's parent is its consumer
    out["depth"] = out["iterator"].str.count("::") - 1
    out["parent"] = out["iterator"].str.rsplit("::", n=1).str[0].where(out["depth"] > 0, "")
    waits = out["stage"].isin(ASYNC_STAGES) | (out["stage"] == "Root")
    out["work_ps"] = np.where(waits, 0.0, out["self_ps"])
    out["wait_ps"] = np.where(waits, out["self_ps"], 0.0)
    out["user_name"] = out["user_name"].astype(object).fillna("").astype(str)
    out = out.sort_values(["worker", "work_ps"], ascending=[True, False], ignore_index=True)
    return out[ITERATOR_COLUMNS]


def pipeline_summary(
    iterators: pd.DataFrame, rule_events: pd.DataFrame, pod: pd.DataFrame, slow_us: float = 50.0
) -> pd.DataFrame:
    """Per worker: how long the step waited for input, the calls that blocked it, and the
    bottleneck stage with a typed suggestion.

    Args:
        iterators: ``iterator_table`` output.
        rule_events: ``analyzers.rule_inputs.rule_events`` (its ``IteratorGetNext`` events are
            the calls the step made).
        pod: ``analyzers.pod.pod_view`` (step times, aligned steps).
        slow_us: a call longer than this blocked the step (XProf's 50 µs).

    Returns:
        Columns ``worker, steps, input_ms_per_step, input_share, slow_calls_per_step,
        slowest_call_ms, slowest_call_start_ns, bottleneck, bottleneck_stage, user_name,
        bottleneck_work_share, suggestion``; a worker without tf.data events has no
        bottleneck (empty strings); a worker without categories (Python tracer only) has no
        input time (NaN), not zero.
    """
    cols = [
        "worker",
        "steps",
        "input_ms_per_step",
        "input_share",
        "slow_calls_per_step",
        "slowest_call_ms",
        "slowest_call_start_ns",
        "bottleneck",
        "bottleneck_stage",
        "user_name",
        "bottleneck_work_share",
        "suggestion",
    ]
    calls = rule_events[matches(rule_events["name"], GET_NEXT, how="match")]
    workers = pd.Index(
        sorted(set(iterators["worker"].unique()) | set(pod["worker"].astype(str).unique()))
    )
    n = len(workers)
    # Every worker at once (a loop of a dozen pandas calls per worker was 2 s of a 512-host
    # pod's Workers page): the pod's steps per worker...
    pw = workers.get_indexer(pod["worker"].astype(str))
    steps = np.bincount(pw, minlength=n)
    step_ns = np.bincount(pw, pod["step_time_ns"].to_numpy(np.float64), minlength=n).astype(float)
    traced = np.bincount(pw, pod["split"].astype(bool).to_numpy(np.float64), minlength=n) > 0
    input_ns = np.bincount(
        pw, pod["input_ns"].astype("Float64").fillna(0).to_numpy(np.float64), minlength=n
    ).astype(float)  # int where there are no steps
    input_ns[~traced] = np.nan  # Python-traced only: no categories, no input time
    # ... the calls inside one of their worker's steps (the k-th start and the k-th end of
    # its steps, as sorted apart); all of a worker's calls where it has no steps...
    t0, t1 = pod["start_ns"].to_numpy(np.int64), pod["end_ns"].to_numpy(np.int64)
    by_start, by_end = np.lexsort((t0, pw)), np.lexsort((t1, pw))
    cw = workers.get_indexer(calls["worker"].astype(str))
    s = calls["start_ns"].to_numpy(np.int64)
    step_worker = pw[by_start]
    call_key, step_key = worker_time_keys(cw, s, step_worker, t0[by_start])
    k = np.searchsorted(step_key, call_key, side="right") - 1
    j = np.clip(k, 0, None)
    in_step = (k >= 0) & (step_worker[j] == cw) & (s < t1[by_end][j]) if len(pw) else False
    kept = (cw >= 0) & (in_step | (steps[cw] == 0))
    # ... the slow ones, each worker's longest first (its first in the events' order)...
    dur = calls["dur_ps"].to_numpy()
    slow = np.flatnonzero(kept & (dur > slow_us * 1e6))
    n_slow = np.bincount(cw[slow], minlength=n)
    worst = slow[np.lexsort((slow, -dur[slow], cw[slow]))]
    worst = worst[np.unique(cw[worst], return_index=True)[1]]
    worst_ms, worst_start = np.full(n, np.nan), np.full(n, pd.NA, dtype=object)
    worst_ms[cw[worst]] = dur[worst] / 1e9
    worst_start[cw[worst]] = [int(v) for v in s[worst]]
    # ... and each worker's top iterator (``iterator_table``: by work, largest first)
    iw = workers.get_indexer(iterators["worker"].astype(str))
    work_ps = iterators["work_ps"].to_numpy(np.float64)
    work = np.bincount(iw, work_ps, minlength=n).astype(float)
    first = np.unique(iw, return_index=True)[1]  # each worker's first row
    first = first[work_ps[first] > 0]
    top = np.full(n, -1)
    top[iw[first]] = first
    has = top >= 0
    text = {c: np.full(n, "", dtype=object) for c in ("iterator", "stage", "user_name")}
    for c, values in text.items():
        values[has] = iterators[c].astype(str).to_numpy(dtype=object)[top[has]]
    share, shared = np.full(n, np.nan), has & (work > 0)
    share[shared] = work_ps[top[shared]] / work[shared]
    with np.errstate(divide="ignore", invalid="ignore"):
        per_step = np.where(steps > 0, input_ns / steps / 1e6, np.nan)
        input_share = np.where(step_ns > 0, input_ns / step_ns, np.nan)
        calls_per_step = np.where(traced, n_slow / np.maximum(steps, 1), np.nan)
    rows = list(
        zip(
            workers.tolist(),
            steps.tolist(),
            per_step.tolist(),
            input_share.tolist(),
            calls_per_step.tolist(),
            worst_ms.tolist(),
            worst_start.tolist(),
            text["iterator"].tolist(),
            text["stage"].tolist(),
            text["user_name"].tolist(),
            share.tolist(),
            [suggestion(str(st)) if h else "" for st, h in zip(text["stage"], has, strict=True)],
            strict=True,
        )
    )
    out = pd.DataFrame(rows, columns=cols)
    out["slowest_call_start_ns"] = out["slowest_call_start_ns"].astype("Int64")
    return out
