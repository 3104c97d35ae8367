"""XLA program executions as steps: what a JAX (or TF ``jit_compile``) loop repeats.

A JAX training or serving loop is the repeated execution of one compiled XLA program on every
device; XProf finds steps only from step markers (``StepTraceAnnotation``, ``tf.profiler``
``Trace``) and shows none without them. Here, the executions themselves are the steps.

**Executions**, as the trace states them (``program_executions``), per worker and device:

1. a device plane's ``XLA Modules`` line (TPU): each event is one execution, named
   ``<module>(<program id>)``;
2. else the program's ops, which carry ``hlo_module`` (and ``program_id``):
   * with a ``run_id`` stat (XLA:CPU thunks, on host threads): one execution per run id;
   * without one (GPU kernels): one execution per host ``<module>:XLA GPU module`` event, the
     kernel's launch found by its ``correlation_id``; kernels whose launch is not in the trace
     form one execution per run of consecutive kernels of the same program.

An execution spans its first op's start to its last op's end on that device. A program is a
module name and its program id: a name compiled several times (``jit_matmul`` for two shapes)
is several programs, named ``<module>(<program id>)``.

**Steps** (``xla_steps``): the *dominant program* is the one with the most execution time
among those executed at least twice on one device (a loop's body, not its one-off
initialisation), unless it is one shape of a sweep (``is_sweep``: one function compiled for
several shapes, each run a few times in a row, as benchmarks do): then there are no steps. Its executions on each device are numbered in time order; devices with as many
executions as each other are matched by that order, others by time overlap with the device that
has the most (TPU run ids differ between the cores of one host, so ids cannot match them). Step
``k`` of a device lasts from the end of its execution ``k - 1`` to the end of execution ``k``
(the first one: its execution): the gap before an execution is the host's (Python, input, a
blocking fetch, dispatch) and delays that execution, as a step marker's host part precedes
its device part; every worker's step then ends where its step's collectives end. The worker's
step ``k`` spans its devices' steps ``k``. Each step is tied to the host call that dispatched it
(``PjitFunction(<fn>)``): the ``k``-th call when the capture holds one call per execution,
else the latest call before the execution (dispatch runs ahead of the devices, so calls and
executions are paired by order only when none is cut off); that call is the step's
``event_row``.

Where XProf differs: XProf's ``pod_viewer``/``overview_page`` report 0 steps on such captures
(its step rules need step markers or TF step groups); with markers present, markers win here
too (``analyzers.steps``).

    >>> ex = program_executions(frames.events, frames.stats)
    >>> steps = xla_steps(frames.events, frames.stats)     # rows as analyzers.steps writes them
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from podscope.analyzers._match import matches

#: XLA collective ops by HLO name (``all-reduce.3``, ``%all-gather-start = …``) or NCCL/RCCL
#: kernel name.
XLA_COLLECTIVE = (
    r"(?i)^%?(?:all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|"
    r"collective-broadcast|ragged-all-to-all)\b|^(?:nccl|rccl)"
)
#: Device-side copies between memory spaces (TPU async copies, GPU device-to-device).
XLA_DEVICE_COPY = r"(?i)^%?copy-(?:start|done)\b|DtoD|DeviceToDevice|copyBuffer"
EXECUTION_COLUMNS = [
    "worker",
    "device",
    "program",
    "program_id",
    "run_id",
    "start_ns",
    "end_ns",
    "ops",
    "first_row",
]
_MODULE_LINE = "XLA Modules"
_GPU_MODULE = ":XLA GPU module"
_NAMED_ID = re.compile(r"^(.*)\((-?\d+)\)$")


def _stat(stats: pd.DataFrame, key: str, rows: np.ndarray, value: str) -> pd.Series:
    """Stat ``key``'s ``value`` column per event row of ``rows`` (NA where unset)."""
    sel = stats[(stats["key"] == key) & stats["event_row"].isin(rows)]
    return sel.drop_duplicates("event_row").set_index("event_row")[value].reindex(rows)


def _device_of(plane: pd.Series) -> np.ndarray:
    """The device an event ran on: its plane for device planes, ``/host:CPU`` otherwise."""
    p = plane.astype(str).to_numpy()
    return np.where(np.char.startswith(p.astype(str), "/device:"), p, "/host:CPU")


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in EXECUTION_COLUMNS}).astype(
        {"start_ns": "int64", "end_ns": "int64", "ops": "int64", "first_row": "int64"}
    )


def _from_module_lines(ev: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    mods = ev[matches(ev["line"], _MODULE_LINE, how="match") & ev["dur_ps"].gt(0).to_numpy()]
    if mods.empty:
        return _empty()
    names = mods["name"].astype(str)
    parts = names.str.extract(_NAMED_ID)
    run = _stat(stats, "run_id", mods.index.to_numpy(), "int_value")
    return pd.DataFrame(
        {
            "worker": mods["worker"].astype(str).to_numpy(),
            "device": mods["plane"].astype(str).to_numpy(),
            "program": parts[0].fillna(names).to_numpy(),
            "program_id": parts[1].to_numpy(),
            "run_id": run.to_numpy(),
            "start_ns": mods["start_ns"].to_numpy(np.int64),
            "end_ns": (mods["start_ns"] + mods["dur_ps"] // 1000).to_numpy(np.int64),
            "ops": 1,
            "first_row": mods.index.to_numpy(np.int64),
        }
    )


def _host_modules(ev: pd.DataFrame) -> pd.Series:
    """Per host event row with a ``correlation_id``: the row of its enclosing
    ``<module>:XLA GPU module`` event (the execution that launched it), by parent links."""
    launches = ev[ev["correlation_id"].notna().to_numpy() & ~_on_device(ev)]
    parent = ev["parent"].to_numpy(np.int64) if "parent" in ev else None
    if launches.empty or parent is None:
        return pd.Series(dtype="int64")
    is_module = pd.Series(
        ev["name"].astype(str).str.endswith(_GPU_MODULE).to_numpy(), index=ev.index
    )
    pos = pd.Series(np.arange(len(ev)), index=ev.index)
    at = pos.reindex(launches.index).to_numpy()
    found = np.full(len(at), -1, dtype=np.int64)
    module_flags = is_module.to_numpy()
    for _ in range(64):  # nesting depth bound
        live = (found < 0) & (at >= 0)
        if not live.any():
            break
        hit = live & module_flags[np.clip(at, 0, None)]
        found[hit] = ev.index.to_numpy()[at[hit]]
        up = parent[np.clip(at, 0, None)]
        nxt = pos.reindex(up).fillna(-1).to_numpy(np.int64)
        at = np.where(live & ~hit, nxt, -1)
    return pd.Series(found, index=launches["correlation_id"].astype("int64").to_numpy())


def _by_launch_time(
    ev: pd.DataFrame, on_device: np.ndarray, corr: np.ndarray, host: np.ndarray
) -> np.ndarray:
    """``host`` with kernels whose launch is not nested in a module event (ROCm's tracer puts
    API calls on their own ``Host Threads/<tid>`` lines) tied by time: per device, the thread
    of module events that contains most of its launches, then the module event there that
    contains each launch."""
    module = ev[ev["name"].astype(str).str.endswith(_GPU_MODULE).to_numpy()]
    todo = on_device & (host < 0) & (corr >= 0)
    if module.empty or not todo.any():
        return host
    launch = ev[ev["correlation_id"].notna().to_numpy() & ~_on_device(ev)]
    t_of = pd.Series(launch["start_ns"].to_numpy(), index=launch["correlation_id"].astype("int64"))
    t_of = t_of[~t_of.index.duplicated()]
    t = t_of.reindex(corr[todo]).to_numpy()
    device = ev["plane"].astype(str).to_numpy()[todo]
    out = host.copy()
    rows = np.flatnonzero(todo)
    for d in np.unique(device):
        mine = (device == d) & ~np.isnan(t)
        best, best_hits = None, 0
        for _, m in module.groupby("line", observed=True):
            m = m.sort_values("start_ns")
            s = m["start_ns"].to_numpy()
            e = s + m["dur_ps"].to_numpy() // 1000
            i = np.searchsorted(s, t[mine], side="right") - 1
            ok = (i >= 0) & (t[mine] < e[np.clip(i, 0, None)])
            if ok.sum() > best_hits:
                best, best_hits = (m.index.to_numpy(np.int64)[np.clip(i, 0, None)], ok), ok.sum()
        if best is not None:
            at, ok = best
            out[rows[mine][ok]] = at[ok]
    return out


def _on_device(ev: pd.DataFrame) -> np.ndarray:
    return matches(ev["plane"], "/device:", how="startswith")


def _from_ops(ev: pd.DataFrame, stats: pd.DataFrame, skip: set[str]) -> pd.DataFrame:
    """Executions from program ops: device kernels by the host execution that launched them
    (else by ``hlo_module`` runs), XLA:CPU thunks by ``run_id``."""
    on_device = _on_device(ev) & ~ev["plane"].astype(str).isin(skip).to_numpy()
    modules = _host_modules(ev)
    corr = ev["correlation_id"].fillna(-1).astype("int64").to_numpy()
    host = modules.reindex(corr).to_numpy()
    host = np.where(pd.isna(host), -1, host).astype(np.int64)
    host = _by_launch_time(ev, on_device, corr, host)
    tagged = ev.index.isin(stats.loc[stats["key"] == "hlo_module", "event_row"].to_numpy())
    kernels = on_device & ~matches(ev["line"], _MODULE_LINE, how="match") & ((host >= 0) | tagged)
    if kernels.any():
        ops, host = ev[kernels], host[kernels]
    else:  # XLA:CPU: thunks on host threads, one run id per execution
        ops, host = ev[tagged], np.full(int(tagged.sum()), -1, dtype=np.int64)
    keep = ops["dur_ps"].gt(0).to_numpy()
    ops, host = ops[keep], host[keep]
    if ops.empty:
        return _empty()
    idx = ops.index.to_numpy()
    names = ev["name"].astype(str)
    program = _stat(stats, "hlo_module", idx, "str_value").to_numpy(dtype=object)
    linked = host >= 0
    program[linked] = (
        names.reindex(host[linked]).str.removesuffix(_GPU_MODULE).to_numpy(dtype=object)
    )
    program = np.where(pd.isna(program), "", program).astype(str)
    pid = _stat(stats, "program_id", idx, "int_value").to_numpy()
    run = _stat(stats, "run_id", idx, "int_value")
    device = _device_of(ops["plane"])
    key = np.where(linked, host, run.fillna(-1).to_numpy()).astype(np.int64)
    unlinked = ~linked & run.isna().to_numpy()
    if unlinked.any():  # no launch traced, no run id: consecutive ops of one program
        order = np.lexsort((ops["start_ns"].to_numpy(), device))
        d, p = device[order], program[order]
        runs = np.empty(len(order), dtype=np.int64)
        runs[order] = np.cumsum(np.r_[True, (d[1:] != d[:-1]) | (p[1:] != p[:-1])])
        key = np.where(unlinked, -1 - runs, key)
    frame = pd.DataFrame(
        {
            "worker": ops["worker"].astype(str).to_numpy(),
            "device": device,
            "program": program,
            "program_id": pid,
            "run_id": run.to_numpy(),
            "key": key,
            "linked": linked,
            "start_ns": ops["start_ns"].to_numpy(np.int64),
            "end_ns": (ops["start_ns"] + ops["dur_ps"] // 1000).to_numpy(np.int64),
            "row": idx.astype(np.int64),
        }
    )
    frame = frame[frame["program"] != ""]
    g = frame.sort_values("start_ns").groupby(
        ["worker", "device", "program", "linked", "key"], sort=False
    )
    out = g.agg(
        program_id=("program_id", "first"),
        run_id=("run_id", "first"),
        start_ns=("start_ns", "min"),
        end_ns=("end_ns", "max"),
        ops=("row", "size"),
        first_row=("row", "first"),
    ).reset_index()
    return out[EXECUTION_COLUMNS]


def _id_text(value: object) -> str:
    """A program id as the trace wrote it ("" when unknown; 15.0 read as a float is 15)."""
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def program_executions(events: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """Every XLA program execution in ``events``, per worker and device (rules above).

    Returns:
        Columns ``worker, device, program (module name, jit_train_step), program_id, run_id
        (NA where the trace has none), start_ns, end_ns, ops (op events in it), first_row
        (an event row of it)``, sorted by worker, device and start.
    """
    if events.empty or stats.empty:
        return _empty()
    by_line = _from_module_lines(events, stats)
    by_ops = _from_ops(events, stats, set(by_line["device"]))
    parts = [p for p in (by_line, by_ops) if len(p)]
    if not parts:
        return _empty()
    out = pd.concat(parts, ignore_index=True)
    out["run_id"] = pd.array(pd.to_numeric(out["run_id"], errors="coerce"), dtype="Int64")
    # TPU program ids are unsigned 64-bit, the ops' stats signed: kept as written
    out["program_id"] = out["program_id"].map(_id_text)
    # one name compiled several times (jit_matmul for two shapes) is several programs
    ids = (
        out["program_id"]
        .replace("", None)
        .groupby([out["worker"], out["program"]])
        .transform("nunique")
    )
    several = (ids > 1).to_numpy() & (out["program_id"] != "").to_numpy()
    out.loc[several, "program"] = out["program"] + "(" + out["program_id"] + ")"
    return out.sort_values(["worker", "device", "start_ns"], ignore_index=True)


def dominant_program(executions: pd.DataFrame) -> str | None:
    """The program a loop repeats: the most execution time among programs executed at least
    twice on one device; ``None`` when none is, or when it is one shape of a sweep
    (``is_sweep``)."""
    if executions.empty:
        return None
    per_device = executions.groupby(["program", "device"]).size()
    repeated = set(per_device[per_device >= 2].index.get_level_values(0))
    if not repeated:
        return None
    ex = executions[executions["program"].isin(repeated)]
    total = (ex["end_ns"] - ex["start_ns"]).groupby(ex["program"]).sum()
    program = str(total.sort_values(kind="stable").index[-1])
    return None if is_sweep(executions, program) else program


def is_sweep(executions: pd.DataFrame, program: str) -> bool:
    """Whether ``program`` is one shape of a benchmark sweep rather than a loop's body: its
    function compiled for 3 or more shapes (``jit_dot(21)``, ``jit_dot(34)``…), each run
    at least twice, all of one shape's runs in a row on every device. The ROCm gemm sample
    runs six GEMM shapes three times each: those are no 3 "steps". A training loop's body
    is one program, or shapes that interleave (sequence buckets)."""
    name = program.split("(")[0]
    shapes = executions[executions["program"].str.split("(").str[0] == name]
    if shapes["program"].nunique() < 3:
        return False
    for _, dev in shapes.groupby(["worker", "device"], observed=True):
        order = dev.sort_values("start_ns")["program"].to_numpy()
        runs = 1 + int((order[1:] != order[:-1]).sum())
        if runs != len(set(order)) or (dev["program"].value_counts() < 2).any():
            return False
    return True


def _match_to(ref: pd.DataFrame, other: pd.DataFrame) -> np.ndarray:
    """For each execution of ``other``, the position in ``ref`` of the execution it overlaps
    most (-1 if none); each ``ref`` execution taken once, by the first that overlaps."""
    rs, re_ = ref["start_ns"].to_numpy(), ref["end_ns"].to_numpy()
    out = np.full(len(other), -1, dtype=np.int64)
    used = np.zeros(len(ref), dtype=bool)
    for i, (s, e) in enumerate(zip(other["start_ns"], other["end_ns"], strict=True)):
        lo, hi = np.searchsorted(re_, s, side="left"), np.searchsorted(rs, e, side="right")
        best, best_ov = -1, 0
        for j in range(lo, hi):
            ov = min(e, re_[j]) - max(s, rs[j])
            if ov > best_ov and not used[j]:
                best, best_ov = j, ov
        if best < 0 and lo < len(ref) and not used[lo]:
            best = int(lo) if abs(rs[lo] - s) <= (e - s) + (re_[lo] - rs[lo]) else -1
        if best >= 0:
            used[best] = True
            out[i] = best
    return out


def device_steps(executions: pd.DataFrame, program: str) -> pd.DataFrame:
    """One worker's executions of ``program``, each numbered as the worker's step ``k`` and
    given the device's step span (from the previous execution's end on that device).

    Returns:
        Columns ``device, k, start_ns, end_ns, exec_end_ns, first_row``.
    """
    ex = executions[executions["program"] == program]
    by_device = {d: g.sort_values("start_ns") for d, g in ex.groupby("device", sort=True)}
    if not by_device:
        return pd.DataFrame(columns=["device", "k", "start_ns", "end_ns", "exec_end_ns"])
    ref_dev = max(by_device, key=lambda d: (len(by_device[d]), d))
    ref = by_device[ref_dev]
    same_count = len({len(g) for g in by_device.values()}) == 1
    parts = []
    for device, g in by_device.items():
        k = np.arange(len(g)) if device == ref_dev or same_count else _match_to(ref, g)
        end = g["end_ns"].to_numpy(np.int64)
        start = np.r_[g["start_ns"].to_numpy(np.int64)[:1], end[:-1]]
        parts.append(
            pd.DataFrame(
                {
                    "device": device,
                    "k": k,
                    "start_ns": start,
                    "end_ns": end,
                    "exec_end_ns": g["end_ns"].to_numpy(np.int64),
                    "first_row": g["first_row"].to_numpy(np.int64),
                }
            )[k >= 0]
        )
    return pd.concat(parts, ignore_index=True)


def _dispatch_rows(ev: pd.DataFrame, program: str, starts: np.ndarray) -> np.ndarray:
    """Per step start: the row of the host call that dispatched it (``PjitFunction(<fn>)``
    for ``jit_<fn>``), -1 where none is traced (rule in the module's docstring)."""
    fn = re.sub(r"^p?jit_", "", program.split("(", 1)[0])
    calls = ev[matches(ev["name"], rf"^PjitFunction\({re.escape(fn)}\)$", how="match")]
    if calls.empty:
        return np.full(len(starts), -1, dtype=np.int64)
    calls = calls[calls["depth"] == calls["depth"].min()].sort_values("start_ns")
    rows = calls.index.to_numpy(np.int64)
    if len(calls) == len(starts) and (calls["start_ns"].to_numpy() <= starts).all():
        return rows
    at = np.searchsorted(calls["start_ns"].to_numpy(), starts, side="right") - 1
    return np.where(at >= 0, rows[np.clip(at, 0, None)], -1)


def xla_steps(events: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """One worker's steps from its dominant program's executions (columns of
    ``analyzers.steps.STEP_COLUMNS`` without the anchors, method ``xla_program``, ``name`` the
    program); empty when no program is executed twice."""
    ex = program_executions(events, stats)
    program = dominant_program(ex)
    cols = ["worker", "step_num", "start_ns", "end_ns", "method", "name", "event_row"]
    if program is None:
        return pd.DataFrame(columns=cols)
    dev = device_steps(ex, program)
    g = dev.groupby("k")
    span = g.agg(
        start_ns=("start_ns", "min"), end_ns=("end_ns", "max"), first_row=("first_row", "first")
    )
    span = span.sort_values("start_ns")
    host = _dispatch_rows(events, program, span["start_ns"].to_numpy())
    return pd.DataFrame(
        {
            "worker": str(ex["worker"].iloc[0]),
            "step_num": pd.array([pd.NA] * len(span), dtype="Int64"),
            "start_ns": span["start_ns"].to_numpy(np.int64),
            "end_ns": span["end_ns"].to_numpy(np.int64),
            "method": "xla_program",
            "name": program,
            "event_row": np.where(host >= 0, host, span["first_row"].to_numpy(np.int64)),
        }
    )
