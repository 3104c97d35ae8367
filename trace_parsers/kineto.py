"""PyTorch profiler (Kineto) traces → ``TraceFrames``, in the shape XPlane's frames have.

    >>> from podscope.trace_parsers.kineto import parse_kineto
    >>> frames = parse_kineto(open("rank-0.pt.trace.json.gz", "rb").read(), worker="rank-0")

What ``torch.profiler`` writes (``export_chrome_trace``, ``tensorboard_trace_handler``'s
``<worker>.<time>.pt.trace.json[.gz]``) is Chrome-trace JSON with Kineto's header
(``schemaVersion``, ``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``) and
categories. It becomes:

* plane ``/host:CPU``, a line per thread (``thread_name`` metadata names it): CPU ops,
  user annotations (``ProfilerStep#N`` carries ``step_num`` N), CUDA/HIP runtime and driver
  calls, Python functions;
* a plane ``/device:GPU:<device>`` per GPU (``args.device``), a line per stream
  (``Stream #<stream>``; line id the stream): kernels, memcpy, memset and syncs; the GPU user
  annotations on a line of their own per stream (``Stream #<stream> annotations``, line id
  ``ANNOTATION_LINES`` + stream), so they never nest the kernels;
* every event's ``args`` in ``stats`` (long form; lists and objects as JSON text), its
  category as stat ``cat``, the place of a GPU event or a launch call in the file's
  ``traceEvents`` as ``trace_order``, ``args.correlation`` as ``correlation_id`` (a runtime launch and
  the kernel it launched share it: the launch → kernel flow);
* ``op_name`` and ``op_type`` the CPU op's own name (``aten::mm``) on the op and on the
  launches and kernels of its ``External id``; a kernel's ``grid``, ``block``, registers,
  shared memory and occupancy as XPlane's ``kernel_details`` text;
* ``deviceProperties`` of each GPU as its plane's stats; ``distributedInfo`` (``rank``,
  ``world_size``, ``backend``…), ``schemaVersion``, ``baseTimeNanoseconds`` and
  ``fractional_timestamps`` (1 when any time had a fraction of a µs) as ``/host:CPU``'s.

Times are µs, integers or decimals (nanosecond-resolution traces): their text is read exactly
(a float64 of an epoch µs time is off by up to 0.25 µs); they become ns since the epoch
(``baseTimeNanoseconds`` added when the trace gives times relative to it). A negative
duration is read as zero and counted; partial overlaps on one line nest clipped (as XPlane's
do). Flow events are counted (the correlation ids carry the links); instants and Kineto's
own ``Trace`` span are left out (the span sets the capture window). The one budget of the
input bounds inflation and rows (``trace_parsers.budget``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from podscope.trace_parsers._columns import cat, id_cat, missing
from podscope.trace_parsers.budget import Budget
from podscope.trace_parsers.chrome_json import load_json
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.nesting import depth_column, nest_columns
from podscope.trace_parsers.schema import (
    HOST_PLANE,
    KINETO_MARK,
    SCHEMA,
    TRACE_ORDER,
    TraceFrames,
    validate,
)

FORMAT = "kineto"
#: Line ids of the GPU user annotations: this plus the stream.
ANNOTATION_LINES = 1 << 32
#: Categories of events that run on a GPU (HTA's ``GPU_EVENT_CATEGORY_PATTERN``, and the GPU
#: user annotations).
_GPU_CATEGORY = re.compile(r"(.*kernel)|(^gpu_)|(^mtia_ccp_events)|(^cuda_sync)")
_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)")
_INT64 = 1 << 63
#: Stat text longer than this is cut (a ``Input Dims`` of a thousand tensors).
MAX_STAT_TEXT = 4096


def looks_like_kineto(head: bytes) -> bool:
    """A JSON object whose first keys are Kineto's (``schemaVersion`` leads its header)."""
    text = head.lstrip()[:2048]
    return text.startswith(b"{") and b'"schemaVersion"' in text


def _ns(value: Any) -> int:
    """A Kineto time in µs (an int, or a decimal's exact text: ``parse_float=str``) → ns.

    Raises:
        ValueError: not a number, or outside int64 ns.
    """
    if isinstance(value, bool):
        raise ValueError("a boolean is not a time")
    if isinstance(value, int):
        ns = value * 1000
    elif isinstance(value, str):
        whole, dot, frac = value.partition(".")
        if dot and frac.isdigit() and (whole.lstrip("-").isdigit() or whole in ("", "-")):
            sign = -1 if whole.startswith("-") else 1
            ns = int(whole or "0") * 1000 + sign * int((frac + "000")[:3])
        else:  # an exponent, inf, nan…
            f = float(value) * 1000
            if f != f or abs(f) >= _INT64:
                raise ValueError(f"time {value!r} is out of range")
            ns = int(f)
    else:
        raise ValueError(f"time {value!r} is not a number")
    if not -_INT64 <= ns < _INT64:
        raise ValueError(f"time {value!r} is out of range")
    return ns


def _stat(value: Any) -> tuple[str, int | None, float | None, str | None]:
    """(kind, int, float, str) of one header value (``_number``'s) as ``plane_stats`` holds it:
    integers (booleans too) as ``int``, numbers as ``double``, text as ``str``, lists and
    objects as JSON text."""
    if isinstance(value, bool):
        return "int", int(value), None, None
    if isinstance(value, int) and -_INT64 <= value < _INT64:
        return "int", value, None, None
    if isinstance(value, float):
        return "double", None, value, None
    if isinstance(value, str):
        return "str", None, None, value[:MAX_STAT_TEXT]
    return "str", None, None, json.dumps(value)[:MAX_STAT_TEXT]


def _number(value: Any) -> Any:
    """A header value with decimals back as floats (``parse_float=str`` read them as text)."""
    if isinstance(value, str):
        try:
            return float(value) if re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", value) else value
        except ValueError:
            return value
    return value


class _Builder:
    """The per-event loop's output, column by column (``args`` kept raw: ``_stats`` types
    them column-wise once the loop is done)."""

    def __init__(self) -> None:
        self.plane: list[str] = []
        self.line_id: list[int] = []
        self.name: list[str] = []
        self.category: list[str] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.arg_rows: list[int] = []
        self.arg_keys: list[Any] = []
        self.arg_values: list[Any] = []
        #: per event: the framework op it is or ran for (``External id`` of a CPU op), and a
        #: kernel's launch dimensions (XPlane's ``kernel_details`` text)
        self.external: list[Any] = []
        self.ops: dict[Any, str] = {}
        self.details: dict[int, str] = {}
        self.line_names: dict[tuple[str, int], str] = {}
        self.threads: dict[int, str] = {}
        self.notes: Counter[str] = Counter()
        self.fractional = False
        self.span: tuple[int, int] | None = None
        self._gpu: dict[str, bool] = {}

    def add(self, e: dict[str, Any], index: int) -> None:
        """Adds ``e``, the ``index``-th of the file's ``traceEvents``."""
        ph = e.get("ph")
        if ph != "X":
            self._untimed(e, ph)
            return
        ts = e.get("ts")
        dur = e.get("dur", 0)
        try:
            start = ts * 1000 if type(ts) is int else _ns(ts)
            length = dur * 1000 if type(dur) is int else _ns(dur)
        except ValueError:
            self.notes["bad_times"] += 1
            return
        if not -_INT64 <= start + length < _INT64:
            self.notes["bad_times"] += 1
            return
        if type(ts) is str:
            self.fractional = True
        if length < 0:
            self.notes["negative_durations"] += 1
            length = 0
        category = e.get("cat")
        category = category if type(category) is str else str(category or "")
        name = e.get("name")
        name = name if type(name) is str else str(name or "")
        args = e.get("args")
        args = args if type(args) is dict else {}
        if category == "Trace":  # Kineto's own span of the capture
            self.span = (start, start + length)
            return
        gpu = self._gpu.get(category)
        if gpu is None:
            gpu = self._gpu[category] = bool(_GPU_CATEGORY.match(category))
        if gpu:
            stream = _int(args.get("stream", e.get("tid")))
            plane = f"/device:GPU:{_int(args.get('device', e.get('pid')))}"
            line = stream + ANNOTATION_LINES if category == "gpu_user_annotation" else stream
            if (plane, line) not in self.line_names:
                suffix = " annotations" if line != stream else ""
                self.line_names[(plane, line)] = f"Stream #{stream}{suffix}"
        else:
            plane, line = HOST_PLANE, _int(e.get("tid"))
        row = len(self.name)
        self.plane.append(plane)
        self.line_id.append(line)
        self.name.append(name)
        self.category.append(category)
        self.start.append(start)
        self.end.append(start + length)
        if args:
            self.arg_rows.extend([row] * len(args))
            self.arg_keys.extend(args)
            self.arg_values.extend(args.values())
        external = args.get("External id")
        self.external.append(external if type(external) is int else None)
        if category == "cpu_op" and type(external) is int:
            self.ops[external] = name
        elif category == "kernel":
            details = _kernel_details(args)
            if details:
                self.details[row] = details
        if gpu or "correlation" in args:  # a launch or what it launched: where the file has it
            self.arg_rows.append(row)
            self.arg_keys.append(TRACE_ORDER)
            self.arg_values.append(index)

    def _untimed(self, e: dict[str, Any], ph: Any) -> None:
        if ph == "M":
            args = e.get("args")
            label = args.get("name") if isinstance(args, dict) else None
            if e.get("name") == "thread_name" and isinstance(label, str):
                self.threads[_int(e.get("tid"))] = label
            self.notes["metadata"] += 1
        elif ph in ("s", "t", "f"):
            self.notes["flow_events"] += 1
        else:
            self.notes[f"phase_{ph}"] += 1


def _kernel_details(args: dict[str, Any]) -> str:
    """A kernel's launch dimensions as XPlane's ``kernel_details`` says them (``regs:32 shm:0
    grid:80,1,1 block:128,1,1 occ_pct:25``), from Kineto's args; only whole numbers."""
    parts = []
    for key, arg in (
        ("regs", "registers per thread"),
        ("shm", "shared memory"),
        ("occ_pct", "est. achieved occupancy %"),
    ):
        value = args.get(arg)
        if type(value) is int and 0 <= value < 1 << 31:
            parts.append(f"{key}:{value}")
    for key in ("grid", "block"):
        dims = args.get(key)
        if (
            isinstance(dims, list)
            and dims
            and all(type(d) is int and 0 <= d < 1 << 31 for d in dims)
        ):
            parts.append(f"{key}:{','.join(map(str, dims[:3]))}")
    return " ".join(parts)


def _step_of(name: str) -> int:
    """N of a ``ProfilerStep#N`` (-1: another name)."""
    m = _STEP.match(name)
    return int(m.group(1)) if m and len(m.group(1)) < 18 else -1


def _int(value: Any) -> int:
    """A pid, tid, device or stream as an int (a string tid such as "stream 7" by its digits;
    else 0)."""
    if isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64:
        return value
    digits = re.search(r"-?\d{1,18}", str(value))
    return int(digits.group()) if digits else 0


def parse_kineto(data: bytes, *, worker: str, source: str = "<bytes>") -> TraceFrames:
    """Parses one rank's PyTorch profiler trace (``.json`` or ``.json.gz``).

    Raises:
        TraceParseError: not JSON, not an object with a ``traceEvents`` list, or no timed
            event in it.
    """
    budget = Budget.for_input(len(data), source, FORMAT)
    doc = load_json(budget.inflate(data), source, parse_float=str)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceParseError(source, FORMAT, "not a PyTorch profiler trace (no traceEvents list)")
    events = doc["traceEvents"]
    budget.charge_rows(len(events))  # before the work: one event row at most per event
    b = _Builder()
    for i, e in enumerate(events):
        if isinstance(e, dict):
            b.add(e, i)
        else:
            b.notes["skipped_events"] += 1
    if not b.name:
        raise TraceParseError(source, FORMAT, "no timed events in the PyTorch profiler trace")
    budget.charge_rows(len(b.arg_rows) + len(b.name))  # the stats rows
    base = doc.get("baseTimeNanoseconds")
    if isinstance(base, int) and not isinstance(base, bool) and 0 < base < _INT64 // 2:
        b.start = [s + base for s in b.start]
        b.end = [s + base for s in b.end]
        b.span = (b.span[0] + base, b.span[1] + base) if b.span else None
    else:
        base = None
    return validate(_frames(b, doc, worker, source, base), source)


def _frames(
    b: _Builder, doc: dict[str, Any], worker: str, source: str, base: int | None
) -> TraceFrames:
    start, end = np.array(b.start, dtype=np.int64), np.array(b.end, dtype=np.int64)
    planes, plane_codes = np.unique(np.array(b.plane, dtype=object), return_inverse=True)
    line_ids = np.array(b.line_id, dtype=np.int64)
    order = np.lexsort((start - end, start, line_ids, plane_codes))
    plane_codes, line_ids, start, end = (
        plane_codes[order],
        line_ids[order],
        start[order],
        end[order],
    )
    change = np.ones(len(order), dtype=bool)  # a new line where the plane or line id changes
    change[1:] = (plane_codes[1:] != plane_codes[:-1]) | (line_ids[1:] != line_ids[:-1])
    key_codes = np.cumsum(change) - 1
    depth, parent, self_ns = nest_columns(key_codes, start, end)
    n = len(order)
    names = np.array(b.name, dtype=object)[order]
    name_codes, name_uniques = pd.factorize(pd.Index(names, dtype=object))
    name_cat = cat(name_codes, list(name_uniques))
    line_label = [
        b.line_names.get((str(planes[pc]), int(lid)))
        or (b.threads.get(int(lid)) or "thread") + f" ({int(lid)})"
        for pc, lid in zip(*_first_of_each(plane_codes, line_ids, key_codes), strict=True)
    ]
    steps = np.array([_step_of(str(u)) for u in name_uniques], dtype=np.int64)
    step = steps[name_codes] if len(steps) else np.zeros(0, np.int64)
    correlation, stats = _args(b)
    corr = correlation[order]
    cols: dict[str, Any] = {
        "worker": cat(np.zeros(n, dtype=np.int64), [worker]),
        "plane": cat(plane_codes, [str(p) for p in planes]),
        "line_id": id_cat(key_codes, _first_of_each(plane_codes, line_ids, key_codes)[1]),
        "line": cat(key_codes, line_label),
        "metadata_id": id_cat(np.zeros(n, dtype=np.int8), np.zeros(1, dtype=np.int64)),
        "name": name_cat,
        "display_name": name_cat,
        "start_ns": start,
        "dur_ps": (end - start) * 1000,
        "depth": depth_column(depth),
        "parent": parent.astype(np.int32),
        "self_ps": self_ns * 1000,
        "step_num": pd.arrays.IntegerArray(step, step < 0),
        "correlation_id": pd.arrays.IntegerArray(corr, corr < 0),
        **_op_columns(b, order),
    }
    events = pd.DataFrame(
        {c: cols[c] if c in cols else missing(n, t) for c, t in SCHEMA["events"].items()}
    )
    return TraceFrames(
        events=events,
        stats=_renumbered(stats, order),
        plane_stats=_plane_stats(b, doc, worker, [str(p) for p in planes]),
        planes=pd.DataFrame(
            {
                "worker": cat(np.zeros(len(planes), dtype=np.int64), [worker]),
                "plane_id": np.arange(len(planes), dtype=np.int64),
                "plane": pd.Categorical([str(p) for p in planes]),
                "n_lines": np.bincount(
                    _first_of_each(plane_codes, line_ids, key_codes)[0], minlength=len(planes)
                ).astype(np.int64),
                "n_events": np.bincount(plane_codes, minlength=len(planes)).astype(np.int64),
            }
        ),
        lines=_lines(
            worker,
            [str(p) for p in planes],
            plane_codes,
            line_ids,
            key_codes,
            line_label,
            start,
            end,
        ),
        parse_notes=pd.DataFrame(
            {
                "worker": cat(np.zeros(len(b.notes), dtype=np.int64), [worker]),
                "key": pd.Categorical(list(b.notes)),
                "value": np.array(list(b.notes.values()), dtype=np.int64),
            }
        ),
        workers=_workers(b, doc, worker, source, base, int(start.min()), int(end.max())),
    )


def _op_columns(b: _Builder, order: np.ndarray) -> dict[str, Any]:
    """``op_name`` and ``op_type`` (the CPU op, ``aten::mm``, PyTorch's own name for both: the
    op tables group by it), on each CPU op and on every event that shares its ``External id``
    (its launches and kernels); and the kernels' ``kernel_details``."""
    op = [b.ops.get(x) if x is not None else None for x in b.external]
    details: list[str | None] = [None] * len(b.name)
    for row, text in b.details.items():
        details[row] = text
    ops = pd.Categorical(np.array(op, dtype=object)[order])
    return {
        "op_name": ops,
        "op_type": ops,
        "kernel_details": pd.Categorical(np.array(details, dtype=object)[order]),
    }


def _lines(
    worker: str,
    planes: list[str],
    plane_codes: np.ndarray,
    line_ids: np.ndarray,
    key_codes: np.ndarray,
    labels: list[str],
    start: np.ndarray,
    end: np.ndarray,
) -> pd.DataFrame:
    """One row per line: its first event's start, its span and its events."""
    firsts = np.unique(key_codes, return_index=True)[1]
    n = len(firsts)
    last = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(last, key_codes, end)
    return pd.DataFrame(
        {
            "worker": cat(np.zeros(n, dtype=np.int64), [worker]),
            "plane": cat(plane_codes[firsts], planes),
            "line_id": line_ids[firsts],
            "display_id": line_ids[firsts],
            "line": pd.Categorical(labels),
            "timestamp_ns": start[firsts],
            "duration_ps": (last - start[firsts]) * 1000,
            "n_events": np.bincount(key_codes, minlength=n).astype(np.int64),
        }
    )


def _first_of_each(
    plane_codes: np.ndarray, line_ids: np.ndarray, key_codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per line (key code): its plane code and line id."""
    first = np.unique(key_codes, return_index=True)[1]
    return plane_codes[first], line_ids[first]


#: ``args`` value types by kind code (anything else: JSON text).
_KIND = {int: 0, str: 1, bool: 2}
#: A decimal's text as ``parse_float=str`` hands it over.
_DECIMAL = r"-?\d+(?:\.\d+(?:[eE][-+]?\d+)?|[eE][-+]?\d+)"


def _args(b: _Builder) -> tuple[np.ndarray, pd.DataFrame]:
    """Per event its ``args.correlation`` (-1: none), and every other arg and the event's
    category (key ``cat``) as ``stats`` rows in the parse's event order, typed column-wise:
    ints (and booleans) as ``int``, decimals as ``double``, text as ``str``, lists and
    objects as JSON ``str``."""
    n_events, values = len(b.name), b.arg_values
    rows = np.array(b.arg_rows, dtype=np.int64)
    keys = np.array(b.arg_keys, dtype=object)
    types = np.array(list(map(type, values)), dtype=object)  # one C pass, compared column-wise
    kind = np.full(len(values), 3, dtype=np.int8)
    for t, code in _KIND.items():
        kind[types == t] = code
    ints = np.zeros(len(values), dtype=np.int64)
    is_int = np.flatnonzero((kind == 0) | (kind == 2))
    for i in is_int.tolist():  # range-checked one by one: a 100-digit integer is text
        v = int(values[i])
        if -_INT64 <= v < _INT64:
            ints[i] = v
        else:
            kind[i] = 3
    correlation = np.full(n_events, -1, dtype=np.int64)
    is_corr = (keys == "correlation") & ((kind == 0) | (kind == 2))
    good = is_corr & (ints >= 0)
    correlation[rows[good]] = ints[good]
    keep = ~is_corr
    texts = np.empty(len(values), dtype=object)
    floats = np.full(len(values), np.nan)
    as_str = np.flatnonzero(kind == 1)
    if len(as_str):
        strings = pd.Series([values[i] for i in as_str.tolist()], dtype=object)
        decimal = strings.str.fullmatch(_DECIMAL).to_numpy(dtype=bool)
        floats[as_str[decimal]] = strings[decimal].astype(float).to_numpy()
        texts[as_str[~decimal]] = strings[~decimal].str.slice(0, MAX_STAT_TEXT).to_numpy()
        kind[as_str[decimal]] = 4
    as_json: dict[str, str] = {}  # args repeat ("Input Dims" of every call of an op)
    for i in np.flatnonzero(kind == 3).tolist():
        value = values[i]
        seen = repr(value)
        text = as_json.get(seen)
        if text is None:
            text = as_json[seen] = json.dumps(value)[:MAX_STAT_TEXT]
        texts[i] = text
    kind_names = np.array(["int", "str", "int", "str", "double"], dtype=object)[kind]
    is_number = (kind == 0) | (kind == 2)
    stats = pd.DataFrame(
        {
            "event_row": np.concatenate([rows[keep], np.arange(n_events)]),
            "key": pd.Categorical(np.concatenate([keys[keep], np.full(n_events, "cat", object)])),
            "kind": pd.Categorical(
                np.concatenate([kind_names[keep], np.full(n_events, "str", object)])
            ),
            "int_value": pd.arrays.IntegerArray(
                np.concatenate([ints[keep], np.zeros(n_events, np.int64)]),
                np.concatenate([~is_number[keep], np.ones(n_events, bool)]),
            ),
            "float_value": pd.arrays.FloatingArray(
                np.concatenate([floats[keep], np.zeros(n_events)]),
                np.concatenate([(kind != 4)[keep], np.ones(n_events, bool)]),
            ),
            "str_value": pd.Categorical(
                np.concatenate([texts[keep], np.array(b.category, dtype=object)])
            ),
        }
    )
    return correlation, stats


def _renumbered(stats: pd.DataFrame, order: np.ndarray) -> pd.DataFrame:
    """``stats`` with its rows renumbered to the events' sorted ``order``, sorted by row."""
    row_of = np.empty(len(order), dtype=np.int32)
    row_of[order] = np.arange(len(order), dtype=np.int32)
    stats["event_row"] = row_of[stats["event_row"].to_numpy()]
    return stats.sort_values("event_row", kind="stable", ignore_index=True)


def _plane_stats(b: _Builder, doc: dict[str, Any], worker: str, planes: list[str]) -> pd.DataFrame:
    """Each GPU's ``deviceProperties`` on its plane; the trace's header on the host's."""
    rows: list[tuple[str, str, Any]] = []
    for device in doc.get("deviceProperties") or []:
        if isinstance(device, dict):
            plane = f"/device:GPU:{_int(device.get('id'))}"
            if plane in planes:
                rows += [(plane, str(k), _number(v)) for k, v in device.items() if k != "id"]
    info = doc.get("distributedInfo")
    if isinstance(info, dict):
        rows += [(HOST_PLANE, str(k), _number(v)) for k, v in info.items()]
    for key in ("schemaVersion", "baseTimeNanoseconds", "displayTimeUnit"):
        if key in doc:
            rows.append((HOST_PLANE, key, _number(doc[key])))
    rows.append((HOST_PLANE, KINETO_MARK, int(b.fractional)))
    stats = [_stat(v) for _, _, v in rows]
    return pd.DataFrame(
        {
            "worker": cat(np.zeros(len(rows), dtype=np.int64), [worker]),
            "plane": pd.Categorical([p for p, _, _ in rows]),
            "key": pd.Categorical([k for _, k, _ in rows]),
            "kind": pd.Categorical([s[0] for s in stats]),
            "int_value": pd.array([s[1] for s in stats], dtype="Int64"),
            "float_value": pd.array([s[2] for s in stats], dtype="Float64"),
            "str_value": pd.Categorical([s[3] for s in stats]),
        }
    )


def _workers(
    b: _Builder,
    doc: dict[str, Any],
    worker: str,
    source: str,
    base: int | None,
    first: int,
    last: int,
) -> pd.DataFrame:
    lo, hi = b.span if b.span is not None else (first, last)
    host = doc.get("host_name")
    # an epoch time: relative to baseTimeNanoseconds, or µs since 1970 past 2001
    epoch = base is not None or first > 10**18
    return pd.DataFrame(
        {
            "worker": pd.Categorical([worker]),
            "host": pd.array([str(host) if isinstance(host, str) else worker], dtype="string"),
            "port": pd.array([None], dtype="Int64"),
            "file": pd.array([source], dtype="string"),
            "capture_start_ns": pd.array([lo], dtype="Int64"),
            "capture_stop_ns": pd.array([hi], dtype="Int64"),
            "time_base": pd.array(["epoch" if epoch else "relative"], dtype="string"),
            "hostnames": pd.array([str(host) if isinstance(host, str) else ""], dtype="string"),
            "errors": pd.array([""], dtype="string"),
            "warnings": pd.array([""], dtype="string"),
        }
    )


__all__ = ["FORMAT", "looks_like_kineto", "parse_kineto"]
