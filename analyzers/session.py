"""The one façade over a session's frames: every derived frame, computed once, on first use.

The CLI, the dashboard, the benchmarks and the diagnostics rules all read a session through
``SessionAnalysis``; none of them chains the analyzers by hand.

    >>> from podscope.analyzers.session import SessionAnalysis
    >>> a = SessionAnalysis(trace_parsers.load("runs/job"))
    >>> a.breakdown.groupby("worker")["input_ns"].mean()     # steps found and aligned first
    >>> a.op_table_for("kernel", worker=None).head()
    >>> [f.rule_id for f in a.findings if f.severity != "none"]

The chain (each arrow one pure function of ``analyzers``)::

    frames.events ─ find_steps ─> steps ─ align_steps ─> aligned, missing
    aligned ─ step_breakdown ─> breakdown ─ pod_view ─> pod
    frames.planes + breakdown ─ device_activity ─> devices (busy GPUs first, idle flagged)
    frames.events ─ op_events / op_stats ─> ops, op_table, kernels, op_table_for(by, worker)
    frames.events ─ collective_events ─> collective_calls ─ match_collectives ─> collectives
    pod ─ arrivals ─> arrivals ─ slow_steps (+ op_steps) ─> slow_steps ─ roles ─> roles
    arrivals + roles ─ stragglers ─> stragglers (the one straggler decision)
    frames.events ─ iterator_table ─> iterators ─ pipeline_summary ─> input_pipeline
    memory + aligned ─ memory_summary ─> memory_report;  op_summary ─ ps_load ─> ps_balance

Attributes are computed lazily and kept, so a page that shows the pod view never parses op
tables, and a second page pays nothing. The object is not thread-safe for the *first*
computation of an attribute (two threads may both compute it; both get equal frames).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np
import pandas as pd

from podscope.analyzers._match import matches
from podscope.analyzers.attribution import (
    arrivals,
    comparable_workers,
    lateness,
    op_steps_of,
    roles,
    slow_steps,
    stragglers,
)
from podscope.analyzers.breakdown import CATEGORIES, before_call_breakdown, step_breakdown
from podscope.analyzers.collectives import collective_events, collective_summary, match_collectives
from podscope.analyzers.compare import traced_steps
from podscope.analyzers.gpu_views import launch_summary
from podscope.analyzers.hlo_stats import (
    hlo_stats,
    with_executions,
    xla_op_events,
    xla_op_occurrences,
)
from podscope.analyzers.hosts import outliers as host_outliers
from podscope.analyzers.input_pipeline import iterator_table, pipeline_summary
from podscope.analyzers.memory import memory_summary
from podscope.analyzers.ops import memory_timeline, op_events, op_stats
from podscope.analyzers.pod import (
    anchored,
    device_activity,
    pod_view,
    slowest_devices,
    step_rows,
    with_calls,
    worker_summary,
)
from podscope.analyzers.ps_balance import ps_load
from podscope.analyzers.roofline import device_peaks
from podscope.analyzers.rule_inputs import (
    device_busy,
    first_device_starts,
    first_starts_per_aligned_step,
    host_syncs,
    op_counts,
    op_summary,
    per_aligned_step,
    rule_events,
    worker_events,
)
from podscope.analyzers.steps import (
    align_steps,
    find_steps,
    partial_steps,
    step_methods,
    whole_steps,
)
from podscope.analyzers.timeline import TimelineIndex, event_details, sched_details
from podscope.analyzers.torch_view import TORCH_CATEGORIES, TORCH_COLUMNS, torch_categories
from podscope.analyzers.xla_programs import program_executions
from podscope.trace_parsers.schema import KINETO_MARK, TraceFrames

if TYPE_CHECKING:
    from podscope.analyzers.diagnostics.base import Finding


T = TypeVar("T")


class frame_property(Generic[T]):
    """``functools.cached_property``, but what a caller gets cannot change what the analysis
    holds: a frame comes back as a shallow copy (its columns and index are the caller's own to
    drop, add or reorder; pandas' copy-on-write keeps the values), a list as a new list. A
    caller's ``del a.breakdown["input_ns"]`` once changed every later ``a.findings``.

    A data descriptor, so it is asked on every access (the value stays in the instance's
    ``__dict__``, where ``SessionAnalysis.from_parts`` may set it).
    """

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.__doc__ = func.__doc__
        self.name = func.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> frame_property[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        held = obj.__dict__
        if self.name not in held:
            held[self.name] = self.func(obj)
        value = held[self.name]
        if isinstance(value, pd.DataFrame):
            return value.copy(deep=False)
        return list(value) if isinstance(value, list) else value

    def __set__(self, obj: object, value: T) -> None:
        obj.__dict__[self.name] = value


#: Derived frames that a per-worker analysis computes for each worker and concatenates
#: (``from_parts``; the breakdown is cut to the aligned steps first). Only these and the op
#: tables read events; the findings read none (the timeline and event details do).
#: Of those, the per-worker reductions the rules read besides steps, breakdown and memory.
RULE_FRAMES = (
    "op_counts",
    "op_summary",
    "rule_events",
    "worker_events",
    "device_starts",
    "device_busy",
    "iterators",
    "collective_calls",
    "xla_ops",
    "device_time",
    "host_syncs",
    "launch_summary",
)
PER_WORKER = ("steps", "step_methods", "memory", "breakdown", "before_call", *RULE_FRAMES)


#: What the notes say of a ParameterServerStrategy job's stepless tasks.
PS_NOTE = (
    "parameter server: it holds variables and applies the workers' updates; the workers run "
    "the steps"
)
COORDINATOR_NOTE = (
    "coordinator: it schedules the steps the workers run (ClusterCoordinator) and runs none itself"
)


def _relabel(methods: pd.DataFrame, rows: pd.Series, method: str, note: str) -> pd.DataFrame:
    """``methods`` (a copy) with ``rows`` given ``method`` and ``note``."""
    methods = methods.copy()
    methods.loc[rows, "method"] = method
    methods.loc[rows, "note"] = note
    return methods


#: Workers whose events and timeline index a session keeps in memory.
WORKERS_KEPT = 4


class SessionAnalysis:
    """A parsed session and its derived frames.

    Args:
        frames: the session's ``TraceFrames`` (``trace_parsers.load``), one or many workers;
            or a capture's path (file, run folder or logdir), analysed as ``from_path`` does.

    Raises:
        trace_parsers.TraceParseError: for a path, nothing there could be parsed
            (``TraceNotFound``, also a ``FileNotFoundError``: nothing at the path).

    Every frame an attribute returns is the caller's own (``frame_property``): changing it
    changes no other answer.
    """

    def __init__(
        self,
        frames: TraceFrames | str | os.PathLike[str],
        load_events: Callable[[], TraceFrames] | None = None,
        load_worker: Callable[[str], TraceFrames] | None = None,
    ) -> None:
        if isinstance(frames, str | os.PathLike):  # a capture's path: as from_path reads it
            self.__dict__.update(type(self).from_path(frames).__dict__)
            return
        self._frames = frames
        self._load_events = load_events
        self._load_worker = load_worker
        self._worker_frames: dict[str, TraceFrames] = {}
        self._timelines: dict[str, TimelineIndex] = {}
        self._frames_lock = threading.Lock()
        self._op_tables: dict[tuple[str, str | None], pd.DataFrame] = {}
        self._op_tables_lock = threading.Lock()
        self._gpu_ranks: dict[int, pd.DataFrame] | None = None
        self._tasks: dict[str, tuple[str, str]] | None = None

    @property
    def frames(self) -> TraceFrames:
        """The session's frames; with ``load_events``, loaded on first use (only analyses
        that read events and were not computed per worker get here)."""
        if self._load_events is not None:
            with self._frames_lock:
                if self._load_events is not None:
                    self._frames, self._load_events = self._load_events(), None
        return self._frames

    @property
    def meta(self) -> TraceFrames:
        """The frames as they are now, never loading events: for the small frames (planes,
        lines, workers), which a per-worker analysis already has."""
        return self._frames

    @frame_property
    def start_ns(self) -> int:
        """The session's start (epoch ns): its workers' earliest capture start, else its
        earliest step or event; what times on the pages count from."""
        starts = pd.to_numeric(self.meta.workers.get("capture_start_ns"), errors="coerce")
        starts = starts[starts > 0] if starts is not None else starts
        if starts is not None and len(starts):
            return int(starts.min())
        ev = self.meta.events
        return int(ev["start_ns"].min()) if len(ev) else 0

    @frame_property
    def trace_kind(self) -> str:
        """What wrote the capture, for advice in its own terms: ``android`` (systrace,
        Perfetto, Chrome JSON: no XPlane), ``pytorch`` (torch.profiler traces), ``jax`` (XLA
        programs named ``jit_…``, no TF op on a host), ``tpu`` (a TensorFlow or other XPlane
        with TPU planes) or ``tensorflow``."""
        planes = self.meta.planes["plane"].astype(str)
        if not planes.str.startswith("/").any():
            return "android"
        if (self.meta.plane_stats["key"] == KINETO_MARK).any():
            return "pytorch"
        modules = self.meta.hlo_ops["module"].astype(str)
        tf_ops = self.worker_events["host_tf_ops"].sum()  # XLA launches (XlaModule) not counted
        if modules.str.startswith(("jit_", "pjit_")).any() and not tf_ops:
            return "jax"
        return "tpu" if planes.str.startswith("/device:TPU").any() else "tensorflow"

    @property
    def worker_names(self) -> list[str]:
        """The session's workers, sorted."""
        return sorted(str(w) for w in self.meta.workers["worker"].unique())

    @property
    def tasks(self) -> dict[str, tuple[str, str]]:
        """Worker → (task, address) as the capture's manifest names them (``worker:1``,
        ``rank 3``; ``layout.CaptureManifest.tasks``), read from the folders of the workers'
        files; empty for an upload, a copied run or frames built by hand."""
        if self._tasks is None:
            from podscope.analyzers.execution import worker_tasks  # where files are read

            self._tasks = worker_tasks(self.meta.workers)
        return self._tasks

    def named(self, worker: str) -> str:
        """How pages and findings name a worker: its task with its address beside it
        (``worker:1 (127.0.0.1:6001)``), else its label."""
        task = self.tasks.get(worker)
        return f"{task[0]} ({task[1]})" if task else worker

    def shown(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with its workers named as ``named`` names them: for what a person reads
        (a figure's rows, a badge); anything that links back keeps the labels."""
        if not self.tasks or "worker" not in frame:
            return frame
        return frame.assign(worker=[self.named(str(w)) for w in frame["worker"]])

    def with_task(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with a ``task`` column (``worker:1``; "" where the capture does not say)
        before its ``worker`` column, when the capture names its workers' tasks."""
        if not self.tasks or "worker" not in frame or "task" in frame:
            return frame
        names = {w: t for w, (t, _) in self.tasks.items()}
        out = frame.copy()
        out.insert(
            out.columns.get_loc("worker"), "task", [names.get(str(w), "") for w in frame["worker"]]
        )
        return out

    @classmethod
    def from_path(
        cls,
        path: str | os.PathLike[str],
        *,
        session: str | None = None,
        scheduler: str | None = None,
        cache_dir: str | None = None,
    ) -> SessionAnalysis:
        """A capture (file, run folder or logdir, as ``trace_parsers.load`` reads it) analysed
        one task per worker (``analyzers.execution``): in this process or a pool of local
        ones for a few files or many small ones (forked, or from a fork server beside other
        threads: a notebook's), a ``LocalCluster`` for many with a big one, or the Dask
        cluster at ``scheduler``
        (``tcp://HOST:8786``). Workers whose trace cannot be parsed are left out; the rest
        equal a whole-session analysis.

            >>> a = SessionAnalysis.from_path("logdir", scheduler="tcp://10.0.0.5:8786")
            >>> a.breakdown, a.findings

        Raises:
            trace_parsers.TraceParseError: no capture there, or no file could be parsed.
            analyzers.execution.ExecutionError: the scheduler is unreachable or lost.
        """
        from podscope.analyzers.execution import ExecConfig, analyze_path

        return analyze_path(
            Path(path), session, ExecConfig(scheduler=scheduler, cache_dir=cache_dir)
        )

    @classmethod
    def from_parts(
        cls,
        frames: TraceFrames,
        derived: dict[str, pd.DataFrame],
        load_events: Callable[[], TraceFrames] | None = None,
        load_worker: Callable[[str], TraceFrames] | None = None,
        alignment: tuple[pd.DataFrame, pd.DataFrame] | None = None,
    ) -> SessionAnalysis:
        """An analysis whose derived frames were computed per worker elsewhere and merged
        (``analyzers.execution``): ``frames`` holds the small frames only (planes, workers…), and
        ``derived`` sets frames of ``PER_WORKER`` and the op tables ``ops:<by>``. Attributes
        that read events (a frame not in ``derived``) call ``load_events`` once, or see no
        events without it; the timeline and event details read one worker at a time with
        ``load_worker``. ``alignment``: the steps' ``align_steps(steps, drop_partial=False)``,
        when the caller has it.

        Raises:
            KeyError: an unknown derived frame.
        """
        analysis = cls(frames, load_events, load_worker)
        for name, frame in derived.items():
            if name.startswith("ops:"):
                analysis._op_tables[(name.removeprefix("ops:"), None)] = frame
            elif name in PER_WORKER:
                analysis.__dict__[name] = frame  # what the cached property would hold
            else:
                raise KeyError(f"unknown derived frame {name!r}")
        if alignment is not None:
            analysis.__dict__["_alignment"] = alignment
        return analysis

    # ------------------------------------------------------------------ steps

    @frame_property
    def steps(self) -> pd.DataFrame:
        """Steps of every worker, by the best method each worker allows (``find_steps``)::

        worker  step_num  start_ns   end_ns     method
        w0      12        1.7e18     1.7e18+9e6 marker
        """
        return find_steps(self.frames.events, self.frames.stats)

    @frame_property
    def _alignment(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Every aligned step, partial ones included, and the missing ones: aligned once."""
        return align_steps(self.steps, drop_partial=False)

    @frame_property
    def aligned(self) -> pd.DataFrame:
        """Steps every worker has, numbered 0..N-1 in column ``step`` (``align_steps``; the
        partial first and last left out, ``partial``)::

        steps: w0 12, w0 13, w1 13   →   aligned: w0 step 0 (13), w1 step 0 (13)
        """
        return whole_steps(self._alignment[0])

    @frame_property
    def partial(self) -> pd.DataFrame:
        """The first and last aligned steps, left out of ``aligned`` as partial when there are
        more than ``analyzers.steps.PARTIAL_AFTER`` (XProf's rule; ``partial_steps``)."""
        return partial_steps(self._alignment[0])

    @property
    def partial_note(self) -> str | None:
        """What the Pod Viewer and ``podscope steps`` say of the partial steps, or None."""
        if self.partial.empty:
            return None
        n = self.partial["step"].nunique()
        return (
            f"the first and last of {len(self.aligned['step'].unique()) + n} steps are left out "
            "as partial (XProf's rule: the capture window cuts them, and the first carries "
            "warm-up)"
        )

    @frame_property
    def capture_steps(self) -> pd.DataFrame:
        """Every worker-step of the capture (``worker, step, split``): the whole steps of the
        pod view and the partial first and last (``step`` -1 and -2). What op times per step
        divide by: the ops they count ran in all of them."""
        pod = self.pod[["worker", "step", "split"]].assign(worker=self.pod["worker"].astype(str))
        if self.partial.empty:
            return pod.reset_index(drop=True)
        split = pod.groupby("worker")["split"].first()
        first = self.partial.groupby(self.partial["worker"].astype(str))["step"].transform("min")
        extra = pd.DataFrame(
            {
                "worker": self.partial["worker"].astype(str).to_numpy(),
                "step": np.where(self.partial["step"] == first, -1, -2),
            }
        )
        extra["split"] = extra["worker"].map(split).fillna(False).astype(bool)
        return pd.concat([pod, extra], ignore_index=True)

    @property
    def missing(self) -> pd.DataFrame:
        """(worker, step_num) pairs that some workers lack (left out of ``aligned``)."""
        return self._alignment[1]

    @frame_property
    def step_methods(self) -> pd.DataFrame:
        """Per worker, computed from its own trace: how its steps were found (``marker``,
        ``group_id``, …) and a note; a parameter-server task (``ps_balance``: it applies
        updates, computes no gradients and runs no step) is ``parameter_server``."""
        methods = step_methods(self.frames.events, self.steps)
        none = methods["method"] == "none"
        if not none.any():
            return methods
        ps = none & methods["worker"].astype(str).isin(self.ps_balance["worker"].astype(str))
        return _relabel(methods, ps, "parameter_server", PS_NOTE)

    @frame_property
    def methods(self) -> pd.DataFrame:
        """``step_methods`` of every worker, where a ParameterServerStrategy job's other
        stepless task (beside its parameter servers) is its ``coordinator``."""
        methods = self.step_methods
        if not (methods["method"] == "parameter_server").any():
            return methods
        return _relabel(methods, methods["method"] == "none", "coordinator", COORDINATOR_NOTE)

    @property
    def tasks_text(self) -> str:
        """The session's tasks as the Pod Viewer's header names them: "3 workers", or "2
        workers · 1 parameter server · 1 coordinator"."""
        kinds = self.methods["method"].value_counts()
        n_ps, n_co = int(kinds.get("parameter_server", 0)), int(kinds.get("coordinator", 0))
        parts = [(int(kinds.sum()) - n_ps - n_co, "worker", "workers")]
        parts += [
            (n_ps, "parameter server", "parameter servers"),
            (n_co, "coordinator", "coordinators"),
        ]
        return " · ".join(
            f"{n} {one if n == 1 else many}" for n, one, many in parts if n or one == "worker"
        )

    @frame_property
    def step_time_text(self) -> str:
        """What ``step_time_ns`` is, said where it is shown: with several devices per worker,
        each step's time is its slowest device's (so it is above each device's own mean)."""
        per_worker = self.breakdown.groupby(self.breakdown["worker"].astype(str))["device"]
        several = len(self.breakdown) and per_worker.nunique().max() > 1
        return "each step's slowest device; each device's own mean below" if several else ""

    # ------------------------------------------------------------------ breakdown

    @frame_property
    def breakdown(self) -> pd.DataFrame:
        """XProf's step-time categories per worker × device × aligned step (``step_breakdown``)::

        aligned: w0 step 0 [t, t+10 ms]
        breakdown: w0 /host:CPU step 0  step_time_ns 1e7  input_ns 2e6  device_compute_ns …
        """
        f = self.frames
        return step_breakdown(
            f.events, self.aligned, f.stats, hlo_ops=f.hlo_ops, metadata_stats=f.metadata_stats
        )

    @frame_property
    def before_call(self) -> pd.DataFrame:
        """The categories of each host worker-step's time before its step function was
        called (``before_call_breakdown``): what the attribution counts as the worker's own
        time there, split from its time inside the function."""
        f = self.frames
        return before_call_breakdown(
            f.events, self.aligned, f.stats, hlo_ops=f.hlo_ops, metadata_stats=f.metadata_stats
        )

    @frame_property
    def split(self) -> pd.DataFrame:
        """Breakdown rows whose categories are known (not Python-tracer-only workers)."""
        return self.breakdown[self.breakdown["split"].astype(bool)]

    @frame_property
    def pod(self) -> pd.DataFrame:
        """Per worker × step, the slowest device of each worker, with lateness and excess::

        breakdown: w0 GPU:0 8 ms, w0 GPU:1 9 ms   →   pod: w0 step 0 9 ms, lateness 0.4 ms
        """
        return with_calls(pod_view(self.breakdown), self.aligned)

    @frame_property
    def stragglers(self) -> pd.DataFrame:
        """Per compared worker: mean lateness (× the median step), last-arrival share, and
        whether it is the straggler: the culprit of ``roles``, one decision for every page."""
        return stragglers(self.arrivals, self.roles)

    @frame_property
    def pod_summary(self) -> pd.DataFrame:
        """Per worker × device: steps, mean/std step time and categories in ms, straggler score
        (``analyzers.pod.worker_summary``)."""
        return worker_summary(self.breakdown, self.stragglers)

    def step_rows(self, step: int | None) -> pd.DataFrame:
        """The breakdown of aligned ``step``, or per worker × device means when None
        (``mean_step_rows``); a PyTorch capture's in PyTorch's categories
        (``torch_breakdown``)."""
        if step is None:
            return self.mean_step_rows
        if self.trace_kind == "pytorch":
            return step_rows(self.torch_breakdown, step, TORCH_COLUMNS)
        return step_rows(self.breakdown, step)

    @frame_property
    def mean_step_rows(self) -> pd.DataFrame:
        """Per worker × device, the mean of its steps' breakdown (``step_rows(None)``): kept,
        as every Pod Viewer shows it (a pod's: 0.07 s at 1,024 hosts × 8 GPUs)."""
        if self.trace_kind == "pytorch":
            return step_rows(self.torch_breakdown, None, TORCH_COLUMNS)
        return step_rows(self.breakdown, None)

    def own_pod(self, other: SessionAnalysis | None = None) -> tuple[pd.DataFrame, list[str]]:
        """The pod view (``pod``) and its categories in this capture's own terms: PyTorch's
        (``analyzers.torch_view``) for a PyTorch capture — when ``other``, the run it is
        compared with, is one too —, else XProf's."""
        if self.trace_kind == "pytorch" and (other is None or other.trace_kind == "pytorch"):
            return slowest_devices(self.torch_breakdown), list(TORCH_CATEGORIES)
        return self.pod, list(CATEGORIES)

    @frame_property
    def torch_breakdown(self) -> pd.DataFrame:
        """The breakdown in PyTorch's categories (``analyzers.torch_view``): GPU compute,
        communication wait and transfer, memcpy, CPU and Python, DataLoader, GPU idle."""
        return torch_categories(self.breakdown, self.collective_participants)

    @frame_property
    def step_time_ns(self) -> float:
        """Mean step time over the traced worker-steps (ns; the busiest device's span, as on
        the Pod Viewer and in Compare), 0 when no steps."""
        return float(traced_steps(self.pod)["step_time_ns"].mean()) if len(self.pod) else 0.0

    # ------------------------------------------------------------------ ops

    @frame_property
    def ops(self) -> pd.DataFrame:
        """One row per op execution, self time among ops only (``op_events``)."""
        return op_events(self.frames.events, stats=self.frames.stats, hlo_ops=self.frames.hlo_ops)

    @property
    def op_table(self) -> pd.DataFrame:
        """Per op, worker and device: occurrences, total/self time, percentiles (``op_stats``)::

        ops: w0 MatMul 3 µs, w0 MatMul 5 µs   →   op_table: w0 MatMul occurrences 2, total 8 µs
        """
        return self.op_table_for("op", None)

    @property
    def kernels(self) -> pd.DataFrame:
        """``op_stats(by="kernel")``: GPU kernels with launch dimensions and Tensor Core use."""
        return self.op_table_for("kernel", None)

    def op_table_for(self, by: str, worker: str | None) -> pd.DataFrame:
        """``analyzers.ops.op_stats`` for (by, worker), computed once per pair (a worker's
        table is cut from the whole one when that exists).

        Raises:
            ValueError: ``by`` is not one of ``analyzers.ops.BY``.
        """
        key = (by, worker)
        with self._op_tables_lock:
            hit = self._op_tables.get(key)
            whole = self._op_tables.get((by, None))
        if hit is not None:
            return hit.copy(deep=False)
        if whole is not None:  # one worker's rows of the whole table (op_stats groups by worker)
            hit = whole[whole["worker"] == worker].reset_index(drop=True)
        else:
            f = self.frames
            hit = op_stats(
                f.events,
                by=by,
                worker=worker,
                stats=f.stats,
                hlo_ops=f.hlo_ops,
                ops=self.__dict__.get("ops"),  # the op events, where the rules made them
            )
        with self._op_tables_lock:
            return self._op_tables.setdefault(key, hit).copy(deep=False)

    def gpu_view(self, view: str) -> pd.DataFrame:
        """Holistic Trace Analysis' ``view`` of the session's PyTorch ranks
        (``analyzers.gpu_views``; empty without any), the ranks' events read once.

        Raises:
            KeyError: an unknown view.
        """
        from podscope.analyzers.gpu_views import VIEWS, rank_events

        compute = VIEWS[view]
        with self._op_tables_lock:
            ranks = self._gpu_ranks
        if ranks is None:
            ranks = rank_events(self.frames)
            with self._op_tables_lock:
                self._gpu_ranks = ranks
        return compute(ranks)

    @frame_property
    def op_counts(self) -> pd.DataFrame:
        """Op executions per worker, own step and op type (``rule_inputs.op_counts``)."""
        return op_counts(self.ops, self.steps)

    @frame_property
    def ops_per_step(self) -> pd.DataFrame:
        """Mean op executions per aligned step, per worker and op type (tf.data aside)."""
        return per_aligned_step(self.op_counts, self.aligned)

    @frame_property
    def op_summary(self) -> pd.DataFrame:
        """Op executions, tiny ones and time per worker, op and eager flag
        (``rule_inputs.op_summary``): what the rules read instead of ``ops``."""
        return op_summary(self.ops)

    # ------------------------------------------------------------------ XLA ops

    @frame_property
    def xla_ops(self) -> pd.DataFrame:
        """Every occurrence of an XLA op (HLO instruction) with its description, costs and the
        execution of its program it ran in (``analyzers.hlo_stats``)."""
        f = self.frames
        occ = xla_op_occurrences(f.events, f.stats, f.metadata_stats, f.hlo_ops)
        if occ.empty:
            return occ
        executions = []  # per worker: correlation and run ids are a worker's own
        for worker in occ["worker"].astype(str).unique():
            ev = f.events[(f.events["worker"] == worker).to_numpy()]
            st = f.stats[f.stats["event_row"].isin(ev.index).to_numpy()]
            executions.append(program_executions(ev, st))
        return with_executions(occ, pd.concat(executions, ignore_index=True))

    @frame_property
    def device_peaks(self) -> pd.DataFrame:
        """Per worker × GPU/TPU: device type, peak FLOP rate and bandwidths, ridge point
        (``analyzers.roofline.device_peaks``)."""
        return device_peaks(self.meta.plane_stats)

    @frame_property
    def device_time(self) -> pd.DataFrame:
        """Per worker and device (a GPU or TPU plane), its time as XProf counts it for its op
        tables' percentages: from its first op's start to its last op's end, the ops being
        the events of its streams (a GPU) or of its ``XLA Ops`` line (a TPU)
        (``worker, device, time_ps``)."""
        ev = self.frames.events
        planes = ev["plane"].cat.categories.astype(str)
        device = np.flatnonzero(
            pd.Series(ev["plane"].cat.codes).isin(np.flatnonzero(planes.str.startswith("/device:")))
        )
        if not len(device):
            return pd.DataFrame({"worker": [], "device": [], "time_ps": []})
        part = ev.iloc[device]
        # a TPU's ops are on its "XLA Ops" line (its step and module lines span further)
        ops_line = part["line"].astype(str).to_numpy() == "XLA Ops"
        has_ops_line = pd.Series(ops_line).groupby(part["plane"].astype(str).to_numpy()).any()
        keep = ops_line | ~has_ops_line.reindex(part["plane"].astype(str)).to_numpy()
        part = part[keep]
        start = part["start_ns"].to_numpy()
        g = pd.DataFrame(
            {
                "worker": part["worker"].astype(str).to_numpy(),
                "device": part["plane"].astype(str).to_numpy(),
                "start": start,
                "end": start + part["dur_ps"].to_numpy() // 1000,
            }
        ).groupby(["worker", "device"], sort=False)
        span = (g["end"].max() - g["start"].min()) * 1000
        return span.rename("time_ps").reset_index()

    def hlo_table(
        self,
        *,
        per_device: bool = False,
        device: str | None = None,
        by_execution: bool = False,
        idle: bool = False,
    ) -> pd.DataFrame:
        """XProf's HLO op table (``analyzers.hlo_stats.hlo_stats``) per worker, or per
        device, or per execution of each op's program (``by_execution``); with ``idle``, an
        ``IDLE`` row of the device time no op ran."""
        occ = self.xla_ops
        if not by_execution and "execution" in occ:
            occ = occ.drop(columns=["execution"])
        return hlo_stats(
            occ,
            self.device_peaks,
            per_device=per_device,
            device=device,
            idle=idle,
            device_time=self.device_time,
        )

    # ------------------------------------------------------------------ what rules read

    @frame_property
    def rule_events(self) -> pd.DataFrame:
        """The few events rules pick by name (``rule_inputs.rule_events``)."""
        return rule_events(self.frames.events)

    @frame_property
    def worker_events(self) -> pd.DataFrame:
        """Per worker: events, non-Python-tracer events, host TF ops."""
        return worker_events(self.frames.events)

    @frame_property
    def device_starts(self) -> pd.DataFrame:
        """First GPU/TPU event per worker, own step and plane."""
        return first_device_starts(self.frames.events, self.steps)

    @property
    def device_firsts(self) -> pd.DataFrame:
        """First GPU/TPU event per worker, aligned step and plane (launch skew)."""
        return first_starts_per_aligned_step(self.device_starts, self.aligned)

    # ------------------------------------------------------------------ why slow across workers

    @frame_property
    def collective_calls(self) -> pd.DataFrame:
        """Every collective call of every worker (``analyzers.collectives.collective_events``)."""
        return collective_events(self.frames.events)

    @frame_property
    def _collectives(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        return match_collectives(self.collective_calls, self.aligned)

    @property
    def collectives(self) -> pd.DataFrame:
        """One row per collective instance matched across participants: skew, last arriver,
        latency, bandwidth (``match_collectives``)."""
        return self._collectives[0]

    @property
    def collective_participants(self) -> pd.DataFrame:
        """One row per instance × participant: start, duration, wait, arrived last."""
        return self._collectives[1]

    @frame_property
    def collective_summary(self) -> pd.DataFrame:
        """Per worker: collective time and, where measured, wait and last-arrival share; time
        in send/recv transfers."""
        return collective_summary(self.collective_participants, self.pod, self.collective_calls)

    @frame_property
    def arrivals(self) -> pd.DataFrame:
        """The pod view of the workers whose steps compare (same kind of step span) with each
        worker-step's arrival at the collectives and its wait (``analyzers.attribution``)."""
        return arrivals(
            self.pod,
            comparable_workers(self.methods),
            synchronous=self.synchronous or None,
            before=self.before_call,
        )

    @frame_property
    def lateness(self) -> pd.DataFrame:
        """Per compared worker-step: ``lateness_ns``, how much later it arrived at the step's
        collectives than the other workers' median arrival (asynchronous: how much longer its
        step was than theirs; ``analyzers.attribution.lateness``). The one lateness: the Pod
        Viewer's heat map shows these cells, and a straggler's "late per step" is its row's
        mean."""
        arr = self.arrivals
        return pd.DataFrame(
            {
                "worker": arr["worker"].astype(str),
                "step": arr["step"],
                "lateness_ns": lateness(arr),
            }
        ).reset_index(drop=True)

    @frame_property
    def synchronous(self) -> bool:
        """Whether collectives tie the workers' steps together (``analyzers.pod.anchored``);
        False leaves it to the step ends (``is_synchronous``)."""
        return anchored(self.aligned)

    @frame_property
    def op_steps(self) -> pd.DataFrame:
        """Op self time per worker, aligned step and op type."""
        return op_steps_of(self.op_counts, self.aligned)

    @frame_property
    def slow_steps(self) -> pd.DataFrame:
        """Slow worker-steps (late against the others, or outliers of their own history),
        the excess split and a cause (``analyzers.attribution.slow_steps``)."""
        return slow_steps(self.arrivals, self.op_steps)

    @frame_property
    def roles(self) -> pd.DataFrame:
        """Per worker: culprit, victim or neither, with its mean wait. Decided from the late
        steps, whose op split never changes a role: the Pod Viewer's straggler badge needs no
        op table (a per-worker session would load every event for one). Where the op times are
        held (computed per worker), from ``slow_steps``, which the Pod Viewer shows anyway:
        not a second split of every late step (0.3 s on 512 hosts)."""
        if "op_counts" in self.__dict__:
            return roles(self.arrivals, self.slow_steps)
        return roles(self.arrivals, slow_steps(self.arrivals, outliers=False))

    @frame_property
    def outliers(self) -> pd.DataFrame:
        """The hosts that matter, worst first (``analyzers.hosts.outliers``): the Pod Viewer's
        outliers, and the Timeline's first picks."""
        return host_outliers(self.pod, self.stragglers, self.roles, self.slow_steps)

    @frame_property
    def iterators(self) -> pd.DataFrame:
        """tf.data iterators per worker: calls, self time, blocking, work and waiting
        (``analyzers.input_pipeline.iterator_table``)."""
        return iterator_table(self.frames.events, self.frames.stats)

    @frame_property
    def input_pipeline(self) -> pd.DataFrame:
        """Per worker: input wait, blocking calls, bottleneck stage and what to change."""
        return pipeline_summary(self.iterators, self.rule_events, self.pod)

    # ------------------------------------------------------------------ devices, memory

    @frame_property
    def has_device(self) -> bool:
        """Whether any worker has a GPU or TPU plane."""
        planes = self.meta.planes
        device = matches(planes["plane"], "/device:(?:GPU|TPU)", how="match")
        return bool((planes["n_events"].to_numpy()[device] > 0).any())

    @frame_property
    def devices(self) -> pd.DataFrame:
        """Per worker × GPU/TPU: steps it worked in, compute per step, idle flag, busiest
        first (``analyzers.pod.device_activity``)."""
        return device_activity(self.meta.planes, self.device_busy, self.breakdown)

    @frame_property
    def launch_summary(self) -> pd.DataFrame:
        """Per PyTorch rank: its kernel launches, the short ones, its GPU's idle share and
        host wait's share of it, from HTA's views (``gpu_views.launch_summary``)."""
        return launch_summary(self.frames)

    @frame_property
    def host_syncs(self) -> pd.DataFrame:
        """Host calls that wait for the GPU and the GPUs' idle time after each
        (``rule_inputs.host_syncs``)."""
        return host_syncs(self.frames.events)

    @frame_property
    def device_busy(self) -> pd.DataFrame:
        """Per worker × GPU/TPU: events and busy time from the device's own events
        (``rule_inputs.device_busy``), independent of steps."""
        return device_busy(self.frames.events)

    @frame_property
    def memory(self) -> pd.DataFrame:
        """Bytes in use over time per worker and allocator (``memory_timeline``); empty when
        the capture has no allocator events."""
        return memory_timeline(self.frames.events, self.frames.stats)

    @frame_property
    def memory_report(self) -> pd.DataFrame:
        """Per worker and allocator: peak, fragmentation then, live blocks at the peak, growth
        across steps and a leak flag (``analyzers.memory.memory_summary``). Growth is per worker,
        over each worker's own steps: a step that alignment could not pair with the other
        workers' still happened on this one (counting only aligned steps inflated the growth)."""
        return memory_summary(self.memory, self.steps)

    @frame_property
    def ps_balance(self) -> pd.DataFrame:
        """Per parameter-server task: variables, reads, updates, busy time and its share of
        the load (``analyzers.ps_balance.ps_load``); empty without PS tasks."""
        return ps_load(self.op_summary, self.meta.workers, self.steps)

    # ------------------------------------------------------------------ timeline

    def worker_frames(self, worker: str) -> TraceFrames:
        """One worker's events and stats (their row labels kept): loaded alone with
        ``load_worker`` (a per-worker analysis never loads the whole session for this), else
        cut from the session's frames. The last few are kept.

        Raises:
            KeyError: not a worker of this session.
        """
        if worker not in self.worker_names:
            raise KeyError(f"no worker {worker!r} in this session")
        with self._frames_lock:
            hit = self._worker_frames.get(worker)
        if hit is not None:
            return hit
        if self._load_worker is not None:
            hit = self._load_worker(worker)
        else:
            f = self.frames
            events = f.events[(f.events["worker"] == worker).to_numpy()]
            stats = f.stats[np.isin(f.stats["event_row"].to_numpy(), events.index.to_numpy())]
            hit = TraceFrames(
                events=events,
                stats=stats,
                sched=f.sched[(f.sched["worker"] == worker).to_numpy()],
                counters=f.counters[(f.counters["worker"] == worker).to_numpy()],
                # a TPU op's program is stated by its event type (``hlo_stats``)
                metadata_stats=f.metadata_stats[(f.metadata_stats["worker"] == worker).to_numpy()],
            )
        with self._frames_lock:
            self._worker_frames[worker] = hit
            while len(self._worker_frames) > WORKERS_KEPT:
                self._worker_frames.pop(next(iter(self._worker_frames)))
        return hit

    def timeline(self, worker: str) -> TimelineIndex:
        """The timeline index of one worker (``TimelineIndex.build``), kept with its frames.

        Raises:
            KeyError: not a worker of this session.
        """
        with self._frames_lock:
            hit = self._timelines.get(worker)
        if hit is None:
            f = self.worker_frames(worker)
            hit = TimelineIndex.build(
                f.events,
                worker,
                sched=f.sched,
                counters=f.counters,
                xla_ops=xla_op_events(f.events, f.stats, f.metadata_stats),
            )
            with self._frames_lock:
                self._timelines[worker] = hit
                while len(self._timelines) > WORKERS_KEPT:
                    self._timelines.pop(next(iter(self._timelines)))
        return hit

    def event_details(self, worker: str, row: int) -> dict[str, object]:
        """One event of a worker: its columns and stats (``analyzers.timeline.event_details``).

        Raises:
            KeyError: no such worker, or no event at ``row``.
        """
        f = self.worker_frames(worker)
        if row < 0:  # a scheduling slice (``TimelineIndex.rows``)
            return sched_details(f.sched, -1 - row)
        return event_details(f.events, f.stats, row)

    # ------------------------------------------------------------------ diagnostics

    @frame_property
    def findings(self) -> list[Finding]:
        """Every diagnostics rule's finding with default thresholds, ranked."""
        from podscope.analyzers.diagnostics import diagnose  # the rules import this module

        return diagnose(self)
