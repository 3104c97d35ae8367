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
* every event's ``args`` in ``stats`` (long form; lists and objects as their JSON text), its
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

The JSON is read in one pass by a compiled reader (``_kineto_fast.c``: strict JSON, strings
interned, each event's fields and args as typed columns); the rest is column arithmetic.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from podscope.trace_parsers import compiled
from podscope.trace_parsers._columns import (
    Labels,
    Masked,
    id_labels,
    join_column,
    masked,
    missing,
    sorted_codes,
    sorted_labels,
)
from podscope.trace_parsers.budget import Budget, rows_error
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.nesting import depth_column, nest_columns
from podscope.trace_parsers.schema import (
    HOST_PLANE,
    KINETO_MARK,
    ROW_COLUMNS,
    SCHEMA,
    TRACE_ORDER,
    TraceFrames,
    validate,
)
from podscope.trace_parsers.sniff import looks_like_kineto

try:
    from podscope.trace_parsers import _kineto_fast
except ImportError as e:  # built without a C compiler: parsing says what to install
    _kineto_fast = compiled.missing(e)

FORMAT = "kineto"
#: Line ids of the GPU user annotations: this plus the stream.
ANNOTATION_LINES = 1 << 32
#: Categories of events that run on a GPU (HTA's ``GPU_EVENT_CATEGORY_PATTERN``, and the GPU
#: user annotations).
_GPU_CATEGORY = re.compile(r"(.*kernel)|(^gpu_)|(^mtia_ccp_events)|(^cuda_sync)")
_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)")
#: A list of small whole numbers without leading zeros, as Kineto writes a grid or block.
_DIMS = re.compile(r"\[ *(0|[1-9]\d{0,8}) *(, *(0|[1-9]\d{0,8}) *)*\]")
_INT64 = 1 << 63
#: Stat text longer than this is cut (a ``Input Dims`` of a thousand tensors).
MAX_STAT_TEXT = 4096


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


#: Kinds of an ``args`` value as the reader gives them (``_kineto_fast.c``).
_A_INT, _A_STR, _A_BOOL, _A_JSON, _A_DOUBLE = range(5)
#: ``stats`` kinds, by the codes ``_stats`` gives them.
_KIND_LABELS = ["double", "int", "str"]
#: Kinds of a ``ts`` or ``dur``.
_T_MISSING, _T_INT, _T_DECIMAL, _T_BAD = range(4)
#: The kernel args XPlane's ``kernel_details`` text holds, by its key.
_DETAILS = (
    ("regs", "registers per thread"),
    ("shm", "shared memory"),
    ("occ_pct", "est. achieved occupancy %"),
)


def _digits(text: str) -> int:
    """A pid, tid, device or stream given as text ("stream 7"): its first digits, else 0."""
    digits = re.search(r"-?\d{1,18}", text)
    return int(digits.group()) if digits else 0


def _int(value: Any) -> int:
    """A header's device id as an int (text by its digits; else 0)."""
    if isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64:
        return value
    return _digits(str(value))


def _step_of(name: str) -> int:
    """N of a ``ProfilerStep#N`` (-1: another name)."""
    m = _STEP.match(name) if name.startswith("ProfilerStep") else None
    return int(m.group(1)) if m and len(m.group(1)) < 18 else -1


class _Read:
    """The reader's columns as arrays: strings merged (two spellings of one string, escaped
    and not, are one code), and per-element lookups of an ``args`` key."""

    def __init__(self, r: dict[str, Any]) -> None:
        # Code -1 (absent) reads as "": the last label.
        codes, uniques = pd.factorize(np.array([*r["strings"], ""], dtype=object))
        self.strings: list[str] = [str(u) for u in uniques]
        self._remap = codes
        self.empty = int(codes[-1])
        self.code = {s: i for i, s in enumerate(self.strings)}
        self.raw: list[str] = r["raw"]
        self.n = len(r["ev_object"])
        f = np.frombuffer
        self.is_object = f(r["ev_object"], np.int8).astype(bool)
        self.ph = self._codes(f(r["ev_ph"], np.int32))
        self.name = self._codes(f(r["ev_name"], np.int32))
        self.cat = self._codes(f(r["ev_cat"], np.int32))
        self.ts, self.dur = f(r["ev_ts"], np.int64), f(r["ev_dur"], np.int64)
        self.ts_kind, self.dur_kind = f(r["ev_ts_kind"], np.int8), f(r["ev_dur_kind"], np.int8)
        self.pid = self._ids(f(r["ev_pid"], np.int64), f(r["ev_pid_str"], np.int32))
        self.tid = self._ids(f(r["ev_tid"], np.int64), f(r["ev_tid_str"], np.int32))
        self.ag_event = f(r["ag_event"], np.int64)
        self.ag_key = self._codes(f(r["ag_key"], np.int32))
        self.ag_kind = f(r["ag_kind"], np.int8)
        self.ag_int = f(r["ag_int"], np.int64)
        self.ag_float = f(r["ag_float"], np.float64)
        # a string value's merged code (other kinds keep the reader's: JSON text, or -1)
        self.ag_code = f(r["ag_code"], np.int32).copy()
        text = self.ag_kind == _A_STR
        self.ag_code[text] = self._codes(self.ag_code[text])

    def _codes(self, codes: np.ndarray) -> np.ndarray:
        return self._remap[codes]  # -1 → the last label, ""

    def _ids(self, values: np.ndarray, strings: np.ndarray) -> np.ndarray:
        """An id given as an integer, or as text by its digits."""
        out = values.copy()
        text = np.flatnonzero(strings >= 0)
        if len(text):
            out[text] = [_digits(self.strings[c]) for c in self._codes(strings[text]).tolist()]
        return out

    def is_string(self, codes: np.ndarray, text: str) -> np.ndarray:
        return codes == self.code.get(text, -2)

    def arg_rows(self, key: str) -> np.ndarray:
        """Rows of ``args`` members named ``key``."""
        return np.flatnonzero(self.ag_key == self.code.get(key, -2))

    def arg_ints(self, key: str, default: np.ndarray) -> np.ndarray:
        """Per element ``args[key]`` as a pid, tid, device or stream is read (an integer, the
        digits of text, a decimal's whole part; else 0), ``default`` where it has none."""
        out = default.copy()
        rows = self.arg_rows(key)
        kind = self.ag_kind[rows]
        values = np.where(kind == _A_INT, self.ag_int[rows], 0)
        floats = self.ag_float[rows]
        decimal = (kind == _A_DOUBLE) & (np.abs(floats) < 2.0**62)
        values[decimal] = floats[decimal].astype(np.int64)
        for i in np.flatnonzero((kind == _A_STR) | (kind == _A_JSON)).tolist():
            code = int(self.ag_code[rows[i]])
            values[i] = _digits(self.strings[code] if kind[i] == _A_STR else self.raw[code])
        out[self.ag_event[rows]] = values
        return out


@dataclass
class _Events:
    """The timed events (``ph`` X) a trace keeps, in the file's order, with what the frames
    need of them."""

    index: np.ndarray  #: each one's place in ``traceEvents`` (``trace_order``)
    start: np.ndarray
    end: np.ndarray
    plane: np.ndarray  #: codes into ``planes``
    planes: list[str]
    line_id: np.ndarray
    name: np.ndarray  #: codes into the read's strings
    op: np.ndarray  #: the CPU op's name code (-1: none)
    details: np.ndarray  #: codes into ``detail_texts`` (-1: none)
    detail_texts: list[str]
    correlation: np.ndarray  #: -1: none
    line_names: dict[tuple[str, int], str]
    threads: dict[int, str]
    notes: Counter[str]
    fractional: bool
    span: tuple[int, int] | None


def _events(rd: _Read, base: int) -> _Events:
    """The X events kept (good times, not Kineto's own ``Trace`` span), and the counts of
    what was left out; ``base`` ns added to every time."""
    notes: Counter[str] = Counter()
    obj = rd.is_object
    ph_x = obj & rd.is_string(rd.ph, "X")
    bad = ph_x & ((rd.ts_kind == _T_MISSING) | (rd.ts_kind == _T_BAD) | (rd.dur_kind == _T_BAD))
    good = ph_x & ~bad
    meta = obj & rd.is_string(rd.ph, "M")
    flow = obj & (rd.is_string(rd.ph, "s") | rd.is_string(rd.ph, "t") | rd.is_string(rd.ph, "f"))
    for key, mask in (
        ("metadata", meta),
        ("flow_events", flow),
        ("bad_times", bad),
        ("negative_durations", good & (rd.dur < 0)),
        ("skipped_events", ~obj),
    ):
        if mask.any():
            notes[key] = int(mask.sum())
    other = obj & ~ph_x & ~meta & ~flow
    for code, count in zip(*np.unique(rd.ph[other], return_counts=True), strict=True):
        notes[f"phase_{rd.strings[code] if code != rd.empty else None}"] += int(count)
    trace = np.flatnonzero(good & rd.is_string(rd.cat, "Trace"))
    start_all = rd.ts + base
    length = np.maximum(rd.dur, 0)
    span = (
        (int(start_all[trace[-1]]), int(start_all[trace[-1]] + length[trace[-1]]))
        if len(trace)
        else None
    )
    fractional = bool((good & (rd.ts_kind == _T_DECIMAL)).any())
    keep = np.flatnonzero(good & ~rd.is_string(rd.cat, "Trace"))
    cat = rd.cat[keep]
    gpu_cat = np.zeros(len(rd.strings), bool)  # per string code: a GPU event's category
    for c in np.flatnonzero(np.bincount(cat, minlength=len(rd.strings))).tolist():
        gpu_cat[c] = bool(_GPU_CATEGORY.match(rd.strings[c]))
    gpu = gpu_cat[cat]
    # GPU events: plane per device, line per stream (annotations on a line of their own)
    stream = rd.arg_ints("stream", rd.tid)[keep]
    device = rd.arg_ints("device", rd.pid)[keep]
    annotation = rd.is_string(cat, "gpu_user_annotation")
    line_id = np.where(gpu, stream + np.where(annotation, ANNOTATION_LINES, 0), rd.tid[keep])
    gpu_device = device[gpu]
    devices, device_codes = np.unique(gpu_device, return_inverse=True)
    planes = sorted(
        {f"/device:GPU:{d}" for d in devices.tolist()} | ({HOST_PLANE} if (~gpu).any() else set())
    )  # as np.unique of the labels orders them
    position = {p: i for i, p in enumerate(planes)}
    plane = np.full(len(keep), position.get(HOST_PLANE, -1), dtype=np.int64)
    plane[gpu] = np.array([position[f"/device:GPU:{d}"] for d in devices.tolist()], np.int64)[
        device_codes
    ]
    line_names: dict[tuple[str, int], str] = {}
    for p, lid, s in sorted(
        set(zip(plane[gpu].tolist(), line_id[gpu].tolist(), stream[gpu].tolist(), strict=True))
    ):
        line_names[(planes[p], lid)] = f"Stream #{s}" + (" annotations" if lid != s else "")
    details, detail_texts = _kernel_details(rd, keep)
    return _Events(
        index=keep,
        start=start_all[keep],
        end=start_all[keep] + length[keep],
        plane=plane,
        planes=planes,
        line_id=line_id,
        name=rd.name[keep],
        op=_ops(rd, keep),
        details=details,
        detail_texts=detail_texts,
        correlation=_correlation(rd, keep),
        line_names=line_names,
        threads=_threads(rd, meta),
        notes=notes,
        fractional=fractional,
        span=span,
    )


def _threads(rd: _Read, meta: np.ndarray) -> dict[int, str]:
    """Thread names (``thread_name`` metadata events' ``args.name``) by tid; the last wins."""
    rows = rd.arg_rows("name")
    named = rows[
        (rd.ag_kind[rows] == _A_STR)
        & meta[rd.ag_event[rows]]
        & rd.is_string(rd.name[rd.ag_event[rows]], "thread_name")
    ]
    return {
        int(t): rd.strings[c]
        for t, c in zip(rd.tid[rd.ag_event[named]], rd.ag_code[named], strict=True)
    }


def _external(rd: _Read) -> tuple[np.ndarray, np.ndarray]:
    """Per element its ``args["External id"]`` (an integer) and whether it has one."""
    rows = rd.arg_rows("External id")
    rows = rows[rd.ag_kind[rows] == _A_INT]
    has, value = np.zeros(rd.n, bool), np.zeros(rd.n, np.int64)
    has[rd.ag_event[rows]] = True
    value[rd.ag_event[rows]] = rd.ag_int[rows]
    return value, has


def _ops(rd: _Read, keep: np.ndarray) -> np.ndarray:
    """Per kept event the name code of the CPU op (``cpu_op``) that shares its ``External id``
    (-1: none): the op itself, its launches and its kernels. The last op of an id wins."""
    value, has = _external(rd)
    ops = keep[has[keep] & rd.is_string(rd.cat[keep], "cpu_op")]
    if not len(ops):
        return np.full(len(keep), -1, dtype=np.int64)
    # the ops by id, the last of an id kept; each event's id looked up among them
    by_id = np.argsort(value[ops], kind="stable")
    ids = value[ops][by_id]
    last = np.append(ids[1:] != ids[:-1], True)
    ids, names = ids[last], rd.name[ops][by_id][last]
    at = np.minimum(np.searchsorted(ids, value[keep]), len(ids) - 1)
    return np.where(has[keep] & (ids[at] == value[keep]), names[at], -1)


def _correlation(rd: _Read, keep: np.ndarray) -> np.ndarray:
    """Per kept event its ``args.correlation`` (an integer or boolean ≥ 0; else -1)."""
    rows = rd.arg_rows("correlation")
    rows = rows[
        ((rd.ag_kind[rows] == _A_INT) | (rd.ag_kind[rows] == _A_BOOL)) & (rd.ag_int[rows] >= 0)
    ]
    out = np.full(rd.n, -1, np.int64)
    out[rd.ag_event[rows]] = rd.ag_int[rows]
    return out[keep]


def _kernel_details(rd: _Read, keep: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Per kept event, a kernel's launch dimensions as XPlane's ``kernel_details`` says them
    (``regs:32 shm:0 occ_pct:25 grid:80,1,1 block:128,1,1``), from Kineto's args, only whole
    numbers: codes into the texts (-1: none, and other events). Launches repeat their
    shapes: each distinct one is written once."""
    is_kernel = rd.is_string(rd.cat[keep], "kernel")
    out = np.full(len(keep), -1, dtype=np.int64)
    kernels = keep[is_kernel]
    if not len(kernels):
        return out, []
    # per kernel, a column per part: the number, or the code of the grid/block text (-1: none)
    parts = np.full((len(kernels), len(_DETAILS) + 2), -1, dtype=np.int64)
    at = np.full(rd.n, -1, np.int64)
    at[kernels] = np.arange(len(kernels))
    for j, (_, arg) in enumerate(_DETAILS):
        rows = rd.arg_rows(arg)
        value = rd.ag_int[rows]
        rows = rows[(rd.ag_kind[rows] == _A_INT) & (value >= 0) & (value < 1 << 31)]
        k = at[rd.ag_event[rows]]
        parts[k[k >= 0], j] = rd.ag_int[rows][k >= 0]
    # grid and block by their x,y,z text (one list is written in several ways, or stored
    # once per kernel): codes into ``dims``, -1 where not whole numbers
    dim_code: dict[str, int] = {}
    for j, key in enumerate(("grid", "block"), start=len(_DETAILS)):
        rows = rd.arg_rows(key)
        rows = rows[rd.ag_kind[rows] == _A_JSON]
        k = at[rd.ag_event[rows]]
        raw_codes, inverse = np.unique(rd.ag_code[rows][k >= 0], return_inverse=True)
        found = [_dims(rd.raw[c]) for c in raw_codes.tolist()]
        dim_codes = [dim_code.setdefault(t, len(dim_code)) if t else -1 for t in found]
        parts[k[k >= 0], j] = np.array(dim_codes, dtype=np.int64)[inverse]
    dims = list(dim_code)
    # each distinct row of parts (a shape): one code; per part, its word per distinct value
    shape = np.zeros(len(kernels), np.int64)
    part_codes, words = [], []
    for j, name in enumerate([key for key, _ in _DETAILS] + ["grid", "block"]):
        codes, uniques = pd.factorize(parts[:, j])
        shape = pd.factorize(shape * len(uniques) + codes)[0]
        part_codes.append(codes)
        values = uniques.tolist()
        spelled = [
            f"{name}:{dims[v] if j >= len(_DETAILS) else v}" if v >= 0 else "" for v in values
        ]
        words.append(np.array(spelled, dtype=object))
    firsts = np.unique(shape, return_index=True)[1]
    columns = [w[c[firsts]].tolist() for w, c in zip(words, part_codes, strict=True)]
    texts = [" ".join(w for w in row if w) for row in zip(*columns, strict=True)]
    code = np.array([i if t else -1 for i, t in enumerate(texts)], dtype=np.int64)
    out[is_kernel] = code[shape]
    return out, texts


def _dims(text: str) -> str:
    """A ``grid`` or ``block`` list of whole numbers as ``x,y,z`` ("" if not one)."""
    if _DIMS.fullmatch(text):  # as Kineto writes them: "[80, 1, 1]"
        dims = text[1:-1].replace(" ", "")
        return dims if dims.count(",") < 3 else ",".join(dims.split(",")[:3])
    dims = json.loads(text)
    if isinstance(dims, list) and dims and all(type(d) is int and 0 <= d < 1 << 31 for d in dims):
        return ",".join(map(str, dims[:3]))
    return ""


def parse_kineto(data: bytes, *, worker: str, source: str = "<bytes>") -> TraceFrames:
    """Parses one rank's PyTorch profiler trace (``.json`` or ``.json.gz``).

    Raises:
        TraceParseError: not JSON, not an object with a ``traceEvents`` list, no timed
            event in it, or over the input's budget.
    """
    return build_frames([decode(data, worker=worker, source=source)], source)


#: A table's columns in parts (``_columns.join_column``), by column name.
Table = dict[str, Any]


@dataclass(frozen=True)
class Decoded:
    """One rank's trace, read into its tables' columns (``decode``); ``build_frames`` makes
    the frames of one or several."""

    worker: str
    source: str
    #: Per frame name, its columns as parts (absent: all missing) and its rows.
    tables: dict[str, tuple[Table, int]]

    @property
    def n_events(self) -> int:
        return self.tables["events"][1]


def decode(data: bytes, *, worker: str, source: str = "<bytes>") -> Decoded:
    """The first half of ``parse_kineto``: one rank's trace read, within its budget, into
    column parts.

    Raises:
        TraceParseError: as ``parse_kineto``.
    """
    budget = Budget.for_input(len(data), source, FORMAT)
    raw = budget.inflate(data)
    try:
        r = _kineto_fast.read_kineto(raw, budget.rows_left())
    except ValueError as e:
        if str(e).startswith("row budget"):
            raise rows_error(source, FORMAT, budget.max_rows, budget.size) from e
        if str(e).startswith("not a JSON object"):
            raise TraceParseError(source, FORMAT, _NOT_KINETO) from e
        raise TraceParseError(source, FORMAT, f"not valid trace JSON ({e})") from e
    if not r["found"]:
        raise TraceParseError(source, FORMAT, _NOT_KINETO)
    header = {
        key: json.loads(raw[s:e].decode("utf-8", errors="replace"), parse_float=str)
        for key, s, e in r["header"]
    }
    base = header.get("baseTimeNanoseconds")
    if not (isinstance(base, int) and not isinstance(base, bool) and 0 < base < _INT64 // 2):
        base = None
    rd = _Read(r)
    budget.charge_rows(rd.n)
    ev = _events(rd, base or 0)
    if not len(ev.index):
        raise TraceParseError(source, FORMAT, "no timed events in the PyTorch profiler trace")
    # the events' order in the frames: by plane, line, start, longest first
    order = np.lexsort((ev.start - ev.end, ev.start, ev.line_id, ev.plane))
    stats = _stats(rd, ev, order)
    budget.charge_rows(stats[1])
    return Decoded(worker, source, _tables(rd, ev, order, stats, header, worker, source, base))


def build_frames(ranks: Sequence[Decoded], source: str = "<batch>") -> TraceFrames:
    """The frames of decoded ranks, side by side as ``loader.merge`` of each rank's frames
    gives them: their tables are put end to end and each frame built once (building a frame
    costs the same few pandas calls whatever its rows, so ranks pay it once, not each).

    Raises:
        TraceParseError: the frames do not validate (named ``source``).
    """
    offsets = np.cumsum([0, *(r.n_events for r in ranks)])[:-1].tolist()
    frames = {}
    for name in {n for r in ranks for n in r.tables}:
        kept = [(r.tables[name], off) for r, off in zip(ranks, offsets, strict=True)]
        kept = [(t, off) for t, off in kept if t[1]]  # an empty table adds no category
        if kept:
            frames[name] = _frame(name, kept)
    return validate(TraceFrames(**frames), source)


def _frame(name: str, tables: list[tuple[tuple[Table, int], int]]) -> pd.DataFrame:
    """One frame from its tables (each with the events before its rank's): the columns that
    count event rows shifted, missing columns all missing, a column given twice built once."""
    row_col = ROW_COLUMNS.get(name)
    built: dict[tuple[int, ...], Any] = {}
    cols = {}
    for col, dtype in SCHEMA[name].items():
        if col not in tables[0][0][0]:
            cols[col] = missing(sum(rows for (_, rows), _ in tables), dtype)
            continue
        parts = [t[col] for (t, _), _ in tables]
        if col == row_col:
            parts = [
                np.where(p >= 0, p + off, -1).astype(p.dtype) if off else p
                for p, (_, off) in zip(parts, tables, strict=True)
            ]
        key = tuple(map(id, parts))
        if key not in built:
            built[key] = join_column(dtype, parts)
        cols[col] = built[key]
    return pd.DataFrame(cols, copy=False)


_NOT_KINETO = "not a PyTorch profiler trace (no traceEvents list)"


def _tables(
    rd: _Read,
    ev: _Events,
    order: np.ndarray,
    stats: tuple[Table, int],
    doc: dict[str, Any],
    worker: str,
    source: str,
    base: int | None,
) -> dict[str, tuple[Table, int]]:
    start, end, plane_codes, line_ids = ev.start, ev.end, ev.plane, ev.line_id
    planes = ev.planes
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
    name_codes, name_uniques = pd.factorize(ev.name[order])
    name_labels = [rd.strings[c] for c in name_uniques.tolist()]
    names = Labels(name_codes, name_labels)
    first_plane, first_line = _first_of_each(plane_codes, line_ids, key_codes)
    line_label = [
        ev.line_names.get((planes[pc], int(lid)))
        or (ev.threads.get(int(lid)) or "thread") + f" ({int(lid)})"
        for pc, lid in zip(first_plane, first_line, strict=True)
    ]
    steps = np.array([_step_of(u) for u in name_labels], dtype=np.int64)
    step = steps[name_codes] if len(steps) else np.zeros(0, np.int64)
    corr = ev.correlation[order]
    ops = sorted_codes(ev.op[order], rd.strings)
    events = {
        "worker": _one(worker, n),
        "plane": Labels(plane_codes, planes),
        "line_id": id_labels(key_codes, first_line),
        "line": Labels(key_codes, line_label),
        "metadata_id": Labels(np.zeros(n, dtype=np.int64), np.zeros(1, dtype=np.int64)),
        "name": names,
        "display_name": names,
        "start_ns": start,
        "dur_ps": (end - start) * 1000,
        "depth": depth_column(depth),
        "parent": parent.astype(np.int32),
        "self_ps": self_ns * 1000,
        "step_num": Masked(step, step < 0),
        "correlation_id": Masked(corr, corr < 0),
        "op_name": ops,
        "op_type": ops,
        "kernel_details": sorted_codes(ev.details[order], ev.detail_texts),
    }
    plane_table = {
        "worker": _one(worker, len(planes)),
        "plane_id": np.arange(len(planes), dtype=np.int64),
        "plane": sorted_labels(planes),
        "n_lines": np.bincount(first_plane, minlength=len(planes)).astype(np.int64),
        "n_events": np.bincount(plane_codes, minlength=len(planes)).astype(np.int64),
    }
    notes = {
        "worker": _one(worker, len(ev.notes)),
        "key": sorted_labels(list(ev.notes)),
        "value": np.array(list(ev.notes.values()), dtype=np.int64),
    }
    return {
        "events": (events, n),
        "stats": stats,
        "plane_stats": _plane_stats(ev, doc, worker),
        "planes": (plane_table, len(planes)),
        "lines": _lines(worker, planes, plane_codes, line_ids, key_codes, line_label, start, end),
        "parse_notes": (notes, len(ev.notes)),
        "workers": (_workers(ev, doc, worker, source, base, int(start.min()), int(end.max())), 1),
    }


def _one(label: str, n: int) -> Labels:
    """A column of ``n`` rows of one label (a rank's worker)."""
    return Labels(np.zeros(n, dtype=np.int64), [label])


def _lines(
    worker: str,
    planes: list[str],
    plane_codes: np.ndarray,
    line_ids: np.ndarray,
    key_codes: np.ndarray,
    labels: list[str],
    start: np.ndarray,
    end: np.ndarray,
) -> tuple[Table, int]:
    """One row per line: its first event's start, its span and its events."""
    firsts = np.unique(key_codes, return_index=True)[1]
    n = len(firsts)
    last = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(last, key_codes, end)
    table = {
        "worker": _one(worker, n),
        "plane": Labels(plane_codes[firsts], planes),
        "line_id": line_ids[firsts],
        "display_id": line_ids[firsts],
        "line": sorted_labels(labels),
        "timestamp_ns": start[firsts],
        "duration_ps": (last - start[firsts]) * 1000,
        "n_events": np.bincount(key_codes, minlength=n).astype(np.int64),
    }
    return table, n


def _first_of_each(
    plane_codes: np.ndarray, line_ids: np.ndarray, key_codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per line (key code): its plane code and line id."""
    first = np.unique(key_codes, return_index=True)[1]
    return plane_codes[first], line_ids[first]


def _stats(rd: _Read, ev: _Events, order: np.ndarray) -> tuple[Table, int]:
    """``stats`` rows of the kept events, by their rows in the sorted ``events`` (``order``):
    every arg but a numeric ``correlation`` (a column of its own), ``trace_order`` (the place
    in ``traceEvents``) of GPU events and of launches (events with a correlation), and each
    event's category (``cat``), in that order per event. Typed: integers and booleans as
    ``int``, decimals as ``double``, text as ``str`` (cut at ``MAX_STAT_TEXT``), arrays,
    objects, null and integers beyond int64 as ``str``, their JSON text as the file writes
    it. Each row is put in its place (no sort)."""
    kept = len(ev.index)
    row_of = np.full(rd.n, -1, np.int64)  # element → kept event (file order)
    row_of[ev.index] = np.arange(kept)
    new_row = np.empty(kept, np.int64)  # kept event → its row in the sorted events
    new_row[order] = np.arange(kept)
    kind = rd.ag_kind
    is_corr = rd.ag_key == rd.code.get("correlation", -2)
    arg_row = row_of[rd.ag_event]
    args = np.flatnonzero((arg_row >= 0) & ~(is_corr & ((kind == _A_INT) | (kind == _A_BOOL))))
    arg_event = arg_row[args]  # non-decreasing: the reader gives args event by event
    has_corr = np.zeros(rd.n, bool)
    has_corr[rd.ag_event[is_corr]] = True
    on_gpu = np.array([p != HOST_PLANE for p in ev.planes], bool)[ev.plane]
    ordered = on_gpu | has_corr[ev.index]
    # each event's rows: its args, its trace_order (if any), its category
    n_args = np.bincount(arg_event, minlength=kept)
    count = n_args + ordered + 1
    start = (np.cumsum(count[order]) - count[order])[new_row]
    rank = np.arange(len(args)) - (np.cumsum(n_args) - n_args)[arg_event]
    places = (
        start[arg_event] + rank,
        start[ordered] + n_args[ordered],
        start + n_args + ordered,
    )
    total = int(count.sum())

    def column(dtype: Any, *parts: Any) -> np.ndarray:
        out = np.empty(total, dtype=dtype)
        for place, values in zip(places, parts, strict=True):
            out[place] = values
        return out

    a_kind, a_code = kind[args], rd.ag_code[args]
    n_str = len(rd.strings)
    is_int = (a_kind == _A_INT) | (a_kind == _A_BOOL)
    text = np.where(a_kind == _A_STR, a_code, np.where(a_kind == _A_JSON, n_str + a_code, -1))
    kind_code = np.array([1, 2, 1, 2, 0], dtype=np.int64)[a_kind]  # _KIND_LABELS
    table = {
        "event_row": column(np.int32, new_row[arg_event], new_row[ordered], new_row),
        "key": sorted_codes(
            column(np.int64, rd.ag_key[args], n_str, n_str + 1),
            [*rd.strings, TRACE_ORDER, "cat"],
        ),
        "kind": sorted_codes(column(np.int64, kind_code, 1, 2), _KIND_LABELS),
        "int_value": Masked(
            column(np.int64, np.where(is_int, rd.ag_int[args], 0), ev.index[ordered], 0),
            column(bool, ~is_int, False, True),
        ),
        "float_value": Masked(
            column(np.float64, np.where(a_kind == _A_DOUBLE, rd.ag_float[args], 0.0), 0, 0),
            column(bool, a_kind != _A_DOUBLE, True, True),
        ),
        "str_value": sorted_codes(
            column(np.int64, text, -1, rd.cat[ev.index]),
            [*rd.strings, *rd.raw],
            cut=MAX_STAT_TEXT,
        ),
    }
    return table, total


def _plane_stats(ev: _Events, doc: dict[str, Any], worker: str) -> tuple[Table, int]:
    """Each GPU's ``deviceProperties`` on its plane; the trace's header on the host's."""
    rows: list[tuple[str, str, Any]] = []
    for device in doc.get("deviceProperties") or []:
        if isinstance(device, dict):
            plane = f"/device:GPU:{_int(device.get('id'))}"
            if plane in ev.planes:
                rows += [(plane, str(k), _number(v)) for k, v in device.items() if k != "id"]
    info = doc.get("distributedInfo")
    if isinstance(info, dict):
        rows += [(HOST_PLANE, str(k), _number(v)) for k, v in info.items()]
    for key in ("schemaVersion", "baseTimeNanoseconds", "displayTimeUnit"):
        if key in doc:
            rows.append((HOST_PLANE, key, _number(doc[key])))
    rows.append((HOST_PLANE, KINETO_MARK, int(ev.fractional)))
    stats = [_stat(v) for _, _, v in rows]
    table = {
        "worker": _one(worker, len(rows)),
        "plane": sorted_labels([p for p, _, _ in rows]),
        "key": sorted_labels([k for _, k, _ in rows]),
        "kind": sorted_labels([s[0] for s in stats]),
        "int_value": masked([s[1] for s in stats], np.int64),
        "float_value": masked([s[2] for s in stats], np.float64),
        "str_value": sorted_labels([s[3] for s in stats]),
    }
    return table, len(rows)


def _workers(
    ev: _Events,
    doc: dict[str, Any],
    worker: str,
    source: str,
    base: int | None,
    first: int,
    last: int,
) -> Table:
    """The rank's one ``workers`` row."""
    lo, hi = ev.span if ev.span is not None else (first, last)
    host = doc.get("host_name")
    # an epoch time: relative to baseTimeNanoseconds, or µs since 1970 past 2001
    epoch = base is not None or first > 10**18
    return {
        "worker": _one(worker, 1),
        "host": [str(host) if isinstance(host, str) else worker],
        "port": masked([None], np.int64),
        "file": [source],
        "capture_start_ns": masked([lo], np.int64),
        "capture_stop_ns": masked([hi], np.int64),
        "time_base": ["epoch" if epoch else "relative"],
        "hostnames": [str(host) if isinstance(host, str) else ""],
        "errors": [""],
        "warnings": [""],
    }


__all__ = ["FORMAT", "Decoded", "build_frames", "decode", "looks_like_kineto", "parse_kineto"]
