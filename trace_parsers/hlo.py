"""The HLO modules an XSpace carries: every executed XLA instruction with its framework op,
category, HLO text, source line, element type, and FLOPs and bytes by XLA's cost rules.

XLA runtimes (JAX, TF with ``jit_compile=True``) write every compiled program into the
``/host:metadata`` plane: one event metadata per program (its id is the ``program_id`` that
device kernels carry), with the serialized ``xla.HloProto`` as the ``Hlo Proto`` bytes stat. A
kernel's ``hlo_op`` stat names an instruction of that program; the instruction's
``OpMetadata`` (``op_name``, ``op_type``, source file and line) names the framework op and the
Python line it was lowered from, which is what XProf's HLO and framework-op tables show.

Only that plane is decoded (the XSpace's other planes are skipped on the wire). Instructions of
fusion computations are not rows (they run as their fusion); their FLOPs and bytes are in it
(``trace_parsers.hlo_cost``, XLA's GPU rules on a capture with GPU planes, the base rules
otherwise).

    >>> from podscope.trace_parsers.hlo import hlo_ops
    >>> hlo_ops(open("host.xplane.pb", "rb").read(), worker="host").head()
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pandas as pd

from podscope.trace_parsers.budget import Budget
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.hlo_cost import CostUnknown, module_costs
from podscope.trace_parsers.hlo_module import (
    Module,
    category,
    compute_dtype,
    copy_spaces,
    decode_module,
    expression,
)
from podscope.trace_parsers.schema import SCHEMA, empty_frame
from podscope.trace_parsers.xplane_wire import METADATA_PLANE

HLO_PROTO_STAT = "Hlo Proto"
_XPLANE_NAME = 2  # XPlane.name
_XSPACE_PLANES = 1  # XSpace.planes


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError(f"truncated varint at byte {pos}")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _fields(data: memoryview) -> Iterator[tuple[int, memoryview | None]]:
    """``(field number, bytes)`` of each length-delimited field of one message (other wire
    types are skipped and yielded with ``None``)."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError(f"field {number} runs past the end of its message")
            yield number, data[pos : pos + size]
            pos += size
            continue
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire} at byte {pos}")
        yield number, None


def _metadata_planes(data: bytes) -> Iterator[memoryview]:
    """The serialized ``/host:metadata`` planes of an XSpace, found without decoding the rest:
    one pass over the XSpace's fields, and over each plane's fields up to its name."""
    view = memoryview(data)
    for number, plane in _fields(view):
        if number != _XSPACE_PLANES or plane is None:
            continue
        for field, value in _fields(plane):
            if field == _XPLANE_NAME and value is not None:
                if bytes(value) == METADATA_PLANE.encode():
                    yield plane
                break


#: Fewest bytes an HLO instruction takes in a real module (name, opcode and shape): a module is
#: refused before it is decoded when its size could hold more instructions than rows are left.
MIN_INSTRUCTION_BYTES = 16


_NAMED_ID = re.compile(r"\((-?\d+)\)$")


def program_id_of(meta: Any, metadata_id: int) -> int:
    """A program's id: what its event metadata's display name ends with (``jit_step(20)``:
    XLA:CPU numbers its metadata apart from its programs), else the metadata's id (as GPU and
    TPU runtimes write it, and XProf reads it)."""
    found = _NAMED_ID.search(meta.display_name or "")
    return int(found.group(1)) if found else metadata_id


def hlo_protos(data: bytes, budget: Budget) -> Iterator[tuple[int, bytes]]:
    """``(program id, serialized HloProto)`` of every XLA program the capture's metadata
    planes carry, each charged to ``budget`` by the instructions it could hold.

    Raises:
        ValueError: a metadata plane is corrupt.
        TraceParseError: over the file's row budget.
    """
    from google.protobuf.message import DecodeError

    from podscope.trace_parsers.proto import xplane_pb2

    for raw in _metadata_planes(data):
        try:
            plane = xplane_pb2.XPlane.FromString(bytes(raw))
        except DecodeError as e:
            raise ValueError(str(e)) from e
        key = {i for i, m in plane.stat_metadata.items() if m.name == HLO_PROTO_STAT}
        for metadata_id, meta in plane.event_metadata.items():
            for stat in meta.stats:
                if stat.metadata_id in key and stat.WhichOneof("value") == "bytes_value":
                    budget.charge_rows(len(stat.bytes_value) // MIN_INSTRUCTION_BYTES)
                    yield program_id_of(meta, metadata_id), stat.bytes_value


def modules(data: bytes, budget: Budget) -> Iterator[Module]:
    """Every HLO module of the capture's metadata planes.

    Raises:
        ValueError: a metadata plane or module is corrupt.
        TraceParseError: over the file's row budget.
    """
    for program_id, proto in hlo_protos(data, budget):
        yield decode_module(proto, program_id)


#: Cost analysis steps allowed per byte of a module, and to every module: the real GPU, ROCm and
#: TPU samples' modules take 0.02-0.06 steps a byte, so the work stays linear in the input
#: whatever a module is built to make the analysis do (a 58 KB module: ~70 k steps, ~0.1 s).
WORK_PER_BYTE, WORK_PER_MODULE = 1, 10_000


def _rows(module: Module, rules: str, budget: Budget) -> list[tuple[object, ...]]:
    """One row per instruction of the module's non-fusion computations (``hlo_ops``)."""
    bound = module.size * WORK_PER_BYTE + WORK_PER_MODULE
    try:
        costs = module_costs(module, rules, max_work=min(budget.rows_left(), bound))
    except CostUnknown:
        costs = {}  # malformed, or built to make the analysis quadratic: costs unknown
    rows: list[tuple[object, ...]] = []
    for comp in module.computations:
        if comp.is_fusion:
            continue
        for i in comp.instructions:
            cost = costs.get(i.name)
            spaces = copy_spaces(i)
            stack = module.source_stack(i)
            rows.append(
                (
                    module.program_id,
                    module.name,
                    i.name,
                    i.opcode,
                    i.op_name,
                    i.op_type,
                    category(i),
                    expression(i),
                    compute_dtype(i),
                    module.source_line(i, stack),
                    "\n".join(stack),
                    i.deduplicated_name,
                    None if cost is None else cost.flops,
                    None if cost is None else cost.device_flops,
                    None if cost is None else cost.bytes_accessed,
                    None if cost is None else cost.hbm_bytes,
                    None if spaces is None else spaces[0],
                    None if spaces is None else spaces[1],
                )
            )
    return rows


def hlo_ops(
    data: bytes,
    *,
    worker: str,
    source: str = "<bytes>",
    budget: Budget | None = None,
    rules: str = "cpu",
) -> pd.DataFrame:
    """Every executed instruction of every HLO module in the capture.

    Args:
        data: the XSpace's serialized bytes (decompressed).
        worker: the worker label written to every row.
        source: file name for error messages.
        budget: the file's budget; each module's rows are charged to it.
        rules: XLA's cost rules for the FLOPs and bytes (``trace_parsers.hlo_cost.RULES``):
            ``gpu`` for a capture of GPUs, as XProf computes them there.

    Returns:
        The ``hlo_ops`` frame (``trace_parsers.schema``), empty when the capture has no
        metadata plane.

    Raises:
        TraceParseError: the metadata plane or one of its HLO modules is corrupt.
    """
    budget = budget or Budget.for_input(len(data), source, "xplane")
    rows: list[tuple[object, ...]] = []
    try:
        for module in modules(data, budget):
            rows += _rows(module, rules, budget)
    except ValueError as e:
        raise TraceParseError(source, "xplane", f"HLO module metadata: {e}") from e
    if not rows:
        return empty_frame("hlo_ops")
    columns = list(SCHEMA["hlo_ops"])
    frame = pd.DataFrame(rows, columns=columns[1:]).drop_duplicates(["program_id", "hlo_op"])
    frame.insert(0, "worker", worker)
    return frame.astype(dict(SCHEMA["hlo_ops"])).reset_index(drop=True)


#: XPlane's event_metadata and stat_metadata map fields.
_PLANE_EVENT_METADATA, _PLANE_STAT_METADATA = 4, 5
MEMORY_ACCESS_BREAKDOWN = "memory_access_breakdown"
#: OpMetrics.MemoryAccessed memory spaces (XProf's op_metrics.proto) and operation types.
_MEMORY_SPACES = {1: "hbm", 2: "cmem", 3: "vmem"}
_READ, _WRITE = 1, 2


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _breakdown(data: bytes) -> dict[str, int]:
    """A serialized ``MemoryAccessBreakdown`` as bytes per memory space and direction
    (``hbm_bytes`` read and written together, ``vmem_read_bytes``, …); empty for an empty
    breakdown (XProf then counts all bytes as HBM's)."""
    out: dict[str, int] = {}
    for number, entry in _fields(memoryview(data)):
        out.setdefault("hbm_bytes", 0)  # a breakdown states HBM bytes, zero or not
        if number != 1 or entry is None:
            continue
        values: dict[int, int] = {}
        pos = 0
        while pos < len(entry):
            tag, pos = _varint(entry, pos)
            if tag & 7 != 0:
                raise ValueError("memory access breakdown: unexpected wire type")
            values[tag >> 3], pos = _varint(entry, pos)
        space = _MEMORY_SPACES.get(values.get(2, 0))
        if space is None:
            continue
        name = (
            f"{space}_bytes"
            if space == "hbm"
            else (f"{space}_{'read' if values.get(1) == _READ else 'write'}_bytes")
        )
        out[name] = out.get(name, 0) + values.get(3, 0)
    return out


def breakdown_stats(data: bytes, *, worker: str) -> pd.DataFrame:
    """The bytes by memory space that TPU event metadata state in their
    ``memory_access_breakdown`` stat (which the ``metadata_stats`` frame keeps as a length),
    as rows for that frame: keys ``hbm_bytes``, ``vmem_read_bytes``, ``vmem_write_bytes``,
    ``cmem_read_bytes``, ``cmem_write_bytes``. Only the device planes' metadata maps are
    decoded, never their lines.

    Raises:
        ValueError: a plane's metadata is corrupt.
    """
    from google.protobuf.message import DecodeError

    from podscope.trace_parsers.proto import xplane_pb2

    rows = []
    for number, plane in _fields(memoryview(data)):
        if number != _XSPACE_PLANES or plane is None:
            continue
        name, kept = "", bytearray()
        for field, value in _fields(plane):
            if value is None:
                continue
            if field == _XPLANE_NAME:
                name = bytes(value).decode("utf-8", "replace")
            elif field in (_PLANE_EVENT_METADATA, _PLANE_STAT_METADATA):
                kept += _varint_bytes(field << 3 | 2) + _varint_bytes(len(value)) + value
        if not name.startswith("/device:TPU") or not kept:
            continue
        try:
            meta = xplane_pb2.XPlane.FromString(bytes(kept))
        except DecodeError as e:
            raise ValueError(f"{name}: {e}") from e
        ids = {i for i, m in meta.stat_metadata.items() if m.name == MEMORY_ACCESS_BREAKDOWN}
        for metadata_id, em in meta.event_metadata.items():
            for stat in em.stats:
                if stat.metadata_id in ids and stat.WhichOneof("value") == "bytes_value":
                    for key, n in _breakdown(stat.bytes_value).items():
                        rows.append((name, metadata_id, key, n))
    frame = pd.DataFrame(rows, columns=["plane", "metadata_id", "key", "int_value"])
    frame.insert(0, "worker", worker)
    frame.insert(4, "kind", "int")
    frame["float_value"] = pd.NA
    frame["str_value"] = None
    return frame.astype(dict(SCHEMA["metadata_stats"]))
