"""XProf's memory viewer for the XLA programs a capture carries: the heap XLA's buffer
assignment simulated over each program's order, its peak, and the buffers alive at the peak.

Read from each program's ``HloProto`` (its ``buffer_assignment``: logical buffers, buffer
allocations and heap-simulator traces) as XProf's ``memory_viewer`` reads it
(``hlo_proto_to_memory_visualization_utils.cc``):

* the heap of a memory space (``memory_space``, XLA's buffer color; 0 is the device's main
  memory) is replayed from the simulator trace of its temporary allocation: ``ALLOC`` adds a
  buffer, ``FREE`` removes it once nothing shares it, ``SHARE_WITH`` reuses a freed buffer's
  region (counted again when it was free);
* buffers of indefinite lifetime (parameters, outputs, constants, thread-local) are alive
  throughout: each allocation's largest logical buffer is listed, its allocation's size added
  to every point of the heap;
* buffers under ``SMALL_BUFFER_BYTES`` are summed into one "small" row.

    >>> views = memory_views(open("host.xplane.pb", "rb").read(), worker="host")
    >>> views.programs[["program", "peak_heap_mib"]]

Equal to XProf's ``memory_viewer`` on every program of the shared XLA samples
(``tests/trace_parsers/test_hlo_memory.py``). Where XProf walks a hash map (the indefinite
allocations), buffers are in allocation order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from podscope.trace_parsers.budget import Budget
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.hlo import hlo_protos
from podscope.trace_parsers.hlo_module import (
    OPAQUE,
    POINTER_BYTES,
    PRIMITIVE,
    Instruction,
    Module,
    Shape,
    hlo_proto_class,
    module_of,
)
from podscope.trace_parsers.loader import format_of, resolve, worker_label

FORMAT = "xplane"
#: Buffers below this size are one "small" row (XProf's default ``small_buffer_size``).
SMALL_BUFFER_BYTES = 16 * 1024
ALLOC, FREE, SHARE_WITH = 0, 1, 2
MIB = float(1 << 20)

PROGRAM_COLUMNS = [
    "worker",
    "program_id",
    "program",
    "entry_computation",
    "memory_space",
    "peak_heap_mib",
    "peak_unpadded_heap_mib",
    "peak_position",
    "indefinite_mib",
    "total_allocation_mib",
    "entry_parameters_mib",
    "non_reusable_mib",
    "maybe_live_out_mib",
    "buffers_at_peak",
    "error",
]
BUFFER_COLUMNS = [
    "worker",
    "program_id",
    "program",
    "peak_heap_mib",
    "order",
    "instruction",
    "size_mib",
    "unpadded_mib",
    "shape",
    "opcode",
    "kind",
    "op_name",
    "source",
    "logical_buffer_id",
]
HEAP_COLUMNS = [
    "worker",
    "program_id",
    "program",
    "position",
    "instruction",
    "heap_mib",
    "unpadded_heap_mib",
]


class MemoryViews(NamedTuple):
    """A capture's memory views: one row per program (``PROGRAM_COLUMNS``); per buffer alive
    at a program's peak (``BUFFER_COLUMNS``, in XProf's ``order``: those of indefinite
    lifetime, then the heap's in the order they were allocated, then the small ones' sum); per
    event of a program's heap simulation, the heap after it (``HEAP_COLUMNS``: ``position``
    ``peak_position`` is the event that reached the peak)."""

    programs: pd.DataFrame
    buffers: pd.DataFrame
    heap: pd.DataFrame


class HeapReplayError(ValueError):
    """A buffer assignment the simulation cannot replay (XProf refuses the program too)."""


@dataclass(eq=False)
class _Buffer:
    """A logical buffer assigned to an allocation, with the simulation's reference count."""

    id: int
    size: int
    color: int
    allocation: Any
    instr: Instruction
    shape_index: tuple[int, ...]
    refs: int = 0
    canonical: _Buffer | None = None

    def root(self) -> _Buffer:
        b = self
        while b.canonical is not None:
            b = b.canonical
        return b

    @property
    def shape(self) -> Shape:
        """The instruction's shape at the buffer's index, as XProf resolves it: the last index
        into the top-level tuple."""
        s = self.instr.shape
        if self.shape_index and self.shape_index[-1] < len(s.tuple_shapes):
            return s.tuple_shapes[self.shape_index[-1]]
        return s

    def unpadded(self) -> int:
        """Bytes of its shape in the default layout (no tiling or padding)."""
        s = self.shape
        if s.is_tuple:
            return POINTER_BYTES * len(s.tuple_shapes)
        if not s.is_array:
            return POINTER_BYTES if s.element_type == OPAQUE else 0
        return s.elements * max(8, PRIMITIVE.get(s.element_type, ("", 8))[1]) // 8

    def name(self) -> str:
        if not self.shape_index:
            return self.instr.name
        return f"{self.instr.name}{{{','.join(map(str, self.shape_index))}}}"


def _indefinite(a: Any) -> bool:
    """Alive for the whole program. A thread-local allocation (a loop counter's 4 bytes) is
    not in the heap at all: XProf leaves it out of the peak and the totals."""
    return bool(a.is_entry_computation_parameter or a.is_constant or a.maybe_live_out)


def _kind(a: Any) -> str:
    if a.is_entry_computation_parameter:
        return "Parameter"
    if a.maybe_live_out:
        return "Output"
    if a.is_thread_local:
        return "Thread-local"
    if a.is_constant:
        return "Constant"
    return "Temporary"


@dataclass
class _Heap:
    """The replay of one heap-simulator trace (``HeapSimulatorStats``)."""

    sizes: list[int] = field(default_factory=list)
    unpadded: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    peak: int = 0
    peak_unpadded: int = 0
    peak_position: int = 0
    #: buffer ids alive at the peak, in the order they were allocated
    at_peak: list[int] = field(default_factory=list)


def _replay(events: Any, buffers: dict[int, _Buffer], stop: int | None = None) -> _Heap:
    """Runs the trace's events (up to and including ``stop``), keeping the heap before each
    event; without ``stop``, the heap after the last event too.

    Raises:
        HeapReplayError: a buffer freed twice, a heap below zero, a sharing cycle or an unknown
            event kind.
    """
    heap = _Heap()
    size = unpadded = 0
    live: dict[int, None] = {}  # program order; removal in O(1)
    allocations = set()
    for n, e in enumerate(events):
        if stop is not None and n > stop:
            break
        heap.sizes.append(size)
        heap.unpadded.append(unpadded)
        heap.names.append(e.instruction_name)
        b = buffers.get(e.buffer_id)
        if b is None:
            continue
        allocations.add(id(b.allocation))
        grow: _Buffer | None = None
        if e.kind == ALLOC:
            b.root().refs += 1
            grow = b
        elif e.kind == FREE:
            root = b.root()
            root.refs -= 1
            if root.refs < 0:
                raise HeapReplayError(f"buffer {b.id} is freed more often than allocated")
            if root.refs == 0:
                live.pop(root.id, None)
                size -= root.size
                unpadded -= root.unpadded()
                if size < 0:
                    raise HeapReplayError(f"the heap falls below zero at event {n}")
        elif e.kind == SHARE_WITH:
            target = buffers.get(e.share_with_canonical_id)
            if target is None:
                continue
            if target.root() is b:
                raise HeapReplayError(f"buffer {b.id} shares with itself through {target.id}")
            b.canonical = target
            root = target.root()
            root.refs += 1
            if root.refs == 1:
                grow = target
        else:
            raise HeapReplayError(f"unknown heap event kind {e.kind}")
        if grow is not None:
            live[grow.id] = None
            size += grow.size
            unpadded += grow.unpadded()
            if size > heap.peak:
                heap.peak, heap.peak_unpadded, heap.peak_position = size, unpadded, n
    if stop is not None:  # the peak's event was the last run: what it left alive
        heap.at_peak = list(live)
    else:
        heap.sizes.append(size)
        heap.unpadded.append(unpadded)
        heap.names.append("")
        if len(allocations) > 1:
            raise HeapReplayError(
                f"the heap simulation spans {len(allocations)} buffer allocations, not one"
            )
    return heap


def _trace_of(ba: Any, buffers: dict[int, _Buffer], color: int) -> Any | None:
    """The heap-simulator trace of a memory space: the one whose first event's buffer is in
    the space's (lowest-index) temporary allocation, else the trace with the most events of
    the space's buffers."""
    owner: dict[int, int] = {}  # allocation index -> its (last) trace
    for n, trace in enumerate(ba.heap_simulator_traces):
        if trace.events and (b := buffers.get(trace.events[0].buffer_id)) is not None:
            owner[b.allocation.index] = n
    for a in sorted(ba.buffer_allocations, key=lambda a: a.index):
        if a.color == color and not _indefinite(a) and a.index in owner:
            return ba.heap_simulator_traces[owner[a.index]]
    best, most = None, 0
    for trace in ba.heap_simulator_traces:
        count = sum(1 for e in trace.events if (b := buffers.get(e.buffer_id)) and b.color == color)
        if count > most:
            best, most = trace, count
    return best


def _buffers(module: Module, ba: Any) -> dict[int, _Buffer]:
    """Logical buffers assigned to an allocation and defined at a known instruction."""
    by_id = {i.id: i for i in module.instructions()}
    protos = {lb.id: lb for lb in ba.logical_buffers}
    out: dict[int, _Buffer] = {}
    for a in ba.buffer_allocations:
        for assigned in a.assigned:
            lb = protos.get(assigned.logical_buffer_id)
            instr = by_id.get(lb.defined_at.instruction_id) if lb is not None else None
            if lb is None or instr is None:
                continue
            out[lb.id] = _Buffer(
                lb.id, lb.size, lb.color, a, instr, tuple(lb.defined_at.shape_index)
            )
    return out


def _row(module: Module, b: _Buffer, order: int) -> dict[str, Any]:
    return {
        "order": order,
        "instruction": b.name(),
        "size_mib": b.size / MIB,
        "unpadded_mib": b.unpadded() / MIB,
        "shape": b.shape.text(),
        "opcode": b.instr.opcode,
        "kind": _kind(b.allocation),
        "op_name": b.instr.op_name,
        "source": module.source_line(b.instr),
        "logical_buffer_id": b.id,
    }


def program_memory(
    module: Module, ba: Any, color: int = 0
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """One program's memory view: its summary, its buffers at the peak and its heap.

    Raises:
        HeapReplayError: the simulator trace cannot be replayed.
    """
    buffers = _buffers(module, ba)
    trace = _trace_of(ba, buffers, color)
    heap = _Heap()
    if trace is not None:
        heap = _replay(trace.events, buffers)
        if heap.peak > 0:  # again to the peak, for what was alive there (no copy per peak)
            for b in buffers.values():
                b.refs, b.canonical = 0, None
            heap.at_peak = _replay(trace.events, buffers, stop=heap.peak_position).at_peak
    ours = sorted((a for a in ba.buffer_allocations if a.color == color), key=lambda a: a.index)
    indefinite_bytes, shown, small = 0, [], 0
    for a in ours:
        if not _indefinite(a):
            continue
        best: _Buffer | None = None  # its largest logical buffer stands for it
        for assigned in a.assigned:
            found = buffers.get(assigned.logical_buffer_id)
            if found is not None and found.size > (best.size if best else 0):
                best = found
        if best is not None:
            indefinite_bytes += a.size
            shown.append(best)
    shown += [buffers[i] for i in heap.at_peak]
    rows: list[dict[str, Any]] = []
    for b in shown:
        if b.size < SMALL_BUFFER_BYTES:
            small += b.size
        else:
            rows.append(_row(module, b, len(rows)))
    if small:
        rows.append(
            {
                "order": len(rows),
                "instruction": f"small (<{SMALL_BUFFER_BYTES} bytes)",
                "size_mib": small / MIB,
                "unpadded_mib": 0.0,
                "logical_buffer_id": -1,
            }
        )
    add = indefinite_bytes / MIB
    summary = {
        "program_id": module.program_id,
        "program": module.name,
        "entry_computation": module.entry_name,
        "memory_space": color,
        "peak_heap_mib": heap.peak / MIB + add,
        "peak_unpadded_heap_mib": heap.peak_unpadded / MIB + add,
        "peak_position": heap.peak_position,
        "indefinite_mib": add,
        "total_allocation_mib": sum(a.size for a in ours if not a.is_thread_local) / MIB,
        "entry_parameters_mib": sum(a.size for a in ours if a.is_entry_computation_parameter) / MIB,
        "non_reusable_mib": sum(a.size for a in ours if a.is_thread_local or a.is_tuple) / MIB,
        "maybe_live_out_mib": sum(a.size for a in ours if a.maybe_live_out) / MIB,
        "buffers_at_peak": len(rows),
        "error": "",
    }
    # The heap after each event (XProf keeps it before each, and once more after the last):
    # the peak's position is then the event that reached it, beside its instruction.
    points = [
        {
            "position": n,
            "instruction": name,
            "heap_mib": size / MIB + add,
            "unpadded_heap_mib": unpadded / MIB + add,
        }
        for n, (size, unpadded, name) in enumerate(
            zip(heap.sizes[1:], heap.unpadded[1:], heap.names, strict=False)
        )
    ]
    return summary, rows, points


def memory_views(
    data: bytes, *, worker: str, source: str = "<bytes>", memory_space: int = 0
) -> MemoryViews:
    """The memory view of every XLA program of one capture (an XSpace's bytes, plain or
    gzip-compressed).

    Args:
        data: the file's bytes.
        worker: written to every row.
        source: file name for error messages.
        memory_space: XLA's buffer color (0: the device's main memory, HBM).

    Returns:
        ``MemoryViews``; empty frames for a capture without XLA programs. A program whose
        simulator trace cannot be replayed has its reason in ``error`` and no buffers.

    Raises:
        TraceParseError: the file or a program's metadata is corrupt, or over its budget.
    """
    from google.protobuf.message import DecodeError

    budget = Budget.for_input(len(data), source, FORMAT)
    data = budget.inflate(data)
    cls = hlo_proto_class("HloProtoWithBuffers")
    programs, buffers, heap = [], [], []
    try:
        for program_id, raw in hlo_protos(data, budget):
            try:
                proto = cls.FromString(raw)
            except DecodeError as e:
                raise ValueError(f"program {program_id}: {e}") from e
            module = module_of(proto.hlo_module, program_id, len(raw))
            try:
                summary, rows, points = program_memory(
                    module, proto.buffer_assignment, memory_space
                )
            except HeapReplayError as e:
                summary, rows, points = _refused(module, memory_space, str(e)), [], []
            budget.charge_rows(len(rows) + len(points))
            # TPU program ids are unsigned 64-bit, stored signed: as XLA and XProf print them
            program_id %= 1 << 64
            summary["program_id"] = program_id
            head = {"worker": worker, "program_id": program_id, "program": module.name}
            programs.append({"worker": worker, **summary})
            peak = {"peak_heap_mib": summary["peak_heap_mib"]}
            buffers += [{**head, **peak, **r} for r in rows]
            heap += [{**head, **p} for p in points]
    except ValueError as e:
        raise TraceParseError(source, FORMAT, f"HLO module metadata: {e}") from e
    return MemoryViews(
        pd.DataFrame(programs, columns=PROGRAM_COLUMNS),
        pd.DataFrame(buffers, columns=BUFFER_COLUMNS).fillna({"shape": "", "opcode": ""}),
        pd.DataFrame(heap, columns=HEAP_COLUMNS),
    )


def _refused(module: Module, color: int, why: str) -> dict[str, Any]:
    nan = float("nan")
    return {
        "program_id": module.program_id,
        "program": module.name,
        "entry_computation": module.entry_name,
        "memory_space": color,
        **dict.fromkeys(PROGRAM_COLUMNS[5:-2], nan),
        "buffers_at_peak": 0,
        "error": why,
    }


def memory_views_of(
    path: str | Path, session: str | None = None, memory_space: int = 0
) -> MemoryViews:
    """``memory_views`` of every XPlane file ``path`` designates (a file, a run folder or a
    logdir's ``session``), each worker's rows labelled by it; other formats are skipped.

    Raises:
        TraceParseError: no capture there, or a file unreadable or corrupt (named).
    """
    parts = []
    for file in resolve(path, session):
        try:
            with file.open("rb") as f:
                head = f.read(65536)
                if format_of(file, head).name != FORMAT:
                    continue
                data = head + f.read()
        except OSError as e:
            raise TraceParseError(file, FORMAT, f"cannot read: {e.strerror or e}") from e
        parts.append(
            memory_views(
                data, worker=worker_label(file), source=str(file), memory_space=memory_space
            )
        )
    if not parts:
        return MemoryViews(
            pd.DataFrame(columns=PROGRAM_COLUMNS),
            pd.DataFrame(columns=BUFFER_COLUMNS),
            pd.DataFrame(columns=HEAP_COLUMNS),
        )
    return MemoryViews(
        *(pd.concat([getattr(p, n) for p in parts], ignore_index=True) for n in MemoryViews._fields)
    )
