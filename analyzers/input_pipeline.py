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

from podscope.analyzers._match import matches
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


def _by_worker(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``frame``'s rows per worker (as strings), in their order."""
    if frame.empty:
        return {}
    keys = frame["worker"].astype(str)
    return {str(w): part for w, part in frame.groupby(keys, sort=False, observed=True)}


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
    rows = []
    calls = rule_events[matches(rule_events["name"], GET_NEXT, how="match")]
    # each frame split by worker once (a mask per worker was 512 passes over the pod's rows)
    pods, inside_of, mine_of = (
        _by_worker(pod),
        _by_worker(calls),
        _by_worker(iterators),
    )
    for worker in sorted(set(iterators["worker"]) | set(pod["worker"].astype(str))):
        p = pods.get(worker, pod.iloc[:0])
        steps = len(p)
        inside = inside_of.get(worker, calls.iloc[:0])
        if steps:
            t0, t1 = p["start_ns"].to_numpy(), p["end_ns"].to_numpy()
            s = inside["start_ns"].to_numpy()
            k = np.searchsorted(np.sort(t0), s, side="right") - 1
            ok = (k >= 0) & (s < np.sort(t1)[np.clip(k, 0, None)])
            inside = inside[ok]
        slow = inside[inside["dur_ps"] > slow_us * 1e6]
        step_ns = float(p["step_time_ns"].sum())
        traced = bool(p["split"].astype(bool).any()) if steps else False  # categories known
        input_ns = float(p["input_ns"].astype("Float64").fillna(0).sum()) if traced else np.nan
        worst = slow.loc[slow["dur_ps"].idxmax()] if len(slow) else None
        mine = mine_of.get(worker, iterators.iloc[:0])
        top = mine.iloc[0] if len(mine) and float(mine["work_ps"].iloc[0]) > 0 else None
        work = float(mine["work_ps"].sum())
        rows.append(
            (
                worker,
                steps,
                input_ns / steps / 1e6 if steps else np.nan,
                input_ns / step_ns if step_ns else np.nan,  # NaN: Python-traced worker
                len(slow) / steps if traced else np.nan,
                float(worst["dur_ps"]) / 1e9 if worst is not None else np.nan,
                int(worst["start_ns"]) if worst is not None else pd.NA,
                str(top["iterator"]) if top is not None else "",
                str(top["stage"]) if top is not None else "",
                str(top["user_name"]) if top is not None else "",
                float(top["work_ps"]) / work if top is not None and work else np.nan,
                suggestion(str(top["stage"])) if top is not None else "",
            )
        )
    out = pd.DataFrame(rows, columns=cols)
    out["slowest_call_start_ns"] = out["slowest_call_start_ns"].astype("Int64")
    return out
