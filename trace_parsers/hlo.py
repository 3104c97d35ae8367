"""The HLO modules an XSpace carries: which framework op each XLA instruction came from.

XLA runtimes (JAX, TF with ``jit_compile=True``) write every compiled program into the
``/host:metadata`` plane: one event metadata per program (its id is the ``program_id`` that
device kernels carry), with the serialized ``xla.HloProto`` as the ``Hlo Proto`` bytes stat. A
kernel's ``hlo_op`` stat names an instruction of that program; the instruction's
``OpMetadata`` (``op_name``, ``op_type``) names the framework op it was lowered from, which is
what XProf's framework_op_stats attributes the kernel to.

Only that plane is decoded (the XSpace's other planes are skipped on the wire), and of each
HloProto only the fields below: instruction name, opcode and metadata. Field numbers are those
of ``xla/service/hlo.proto`` and ``xla/xla_data.proto``.

    >>> from trace_parsers.hlo import hlo_ops
    >>> hlo_ops(open("host.xplane.pb", "rb").read(), worker="host").head()
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pandas as pd

from trace_parsers.budget import Budget
from trace_parsers.errors import TraceParseError
from trace_parsers.schema import SCHEMA, empty_frame

METADATA_PLANE = "/host:metadata"
HLO_PROTO_STAT = "Hlo Proto"
#: The subset of xla.HloProto read here: message → [(field, number, type, message type)].
_HLO_FIELDS: dict[str, list[tuple[str, int, str, str]]] = {
    "HloProto": [("hlo_module", 1, "message", "HloModuleProto")],
    "HloModuleProto": [
        ("name", 1, "string", ""),
        ("computations", 3, "repeated", "HloComputationProto"),
    ],
    "HloComputationProto": [("instructions", 2, "repeated", "HloInstructionProto")],
    "HloInstructionProto": [
        ("name", 1, "string", ""),
        ("opcode", 2, "string", ""),
        ("metadata", 7, "message", "OpMetadata"),
    ],
    "OpMetadata": [("op_type", 1, "string", ""), ("op_name", 2, "string", "")],
}
_XPLANE_NAME = 2  # XPlane.name
_XSPACE_PLANES = 1  # XSpace.planes


@functools.cache
def _hlo_proto_class() -> Any:
    """The message class of the HloProto subset, built once from a descriptor (unknown fields
    are skipped by the parser, so the full proto's other fields cost nothing here).
    protobuf is imported here: only captures of XLA programs pay its 0.06 s import."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(
        name="podscope_hlo_subset.proto", package="podscope.hlo", syntax="proto3"
    )
    F = descriptor_pb2.FieldDescriptorProto
    for message, fields in _HLO_FIELDS.items():
        mp = fdp.message_type.add(name=message)
        for name, number, kind, type_name in fields:
            f = mp.field.add(name=name, number=number)
            if kind == "string":
                f.type, f.label = F.TYPE_STRING, F.LABEL_OPTIONAL
            else:
                f.type, f.type_name = F.TYPE_MESSAGE, f".podscope.hlo.{type_name}"
                f.label = F.LABEL_REPEATED if kind == "repeated" else F.LABEL_OPTIONAL
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("podscope.hlo.HloProto"))


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
    """The serialized ``/host:metadata`` planes of an XSpace, found without decoding the rest."""
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


def hlo_ops(
    data: bytes, *, worker: str, source: str = "<bytes>", budget: Budget | None = None
) -> pd.DataFrame:
    """Every instruction of every HLO module in the capture, with its framework op.

    Args:
        data: the XSpace's serialized bytes (decompressed).
        worker: the worker label written to every row.
        source: file name for error messages.
        budget: the file's budget; each module's rows are charged to it.

    Returns:
        The ``hlo_ops`` frame: ``worker, program_id, module, hlo_op, opcode, op_name,
        op_type`` (op name and type from the instruction's metadata, empty when it has none).
        Empty when the capture has no metadata plane.

    Raises:
        TraceParseError: the metadata plane or one of its HLO modules is corrupt.
    """
    from trace_parsers.proto import xplane_pb2

    rows: list[tuple[int, str, str, str, str, str]] = []
    from google.protobuf.message import DecodeError

    hlo_proto = _hlo_proto_class()
    budget = budget or Budget.for_input(len(data), source, "xplane")
    try:
        for raw in _metadata_planes(data):
            plane = xplane_pb2.XPlane.FromString(bytes(raw))
            key = {i for i, m in plane.stat_metadata.items() if m.name == HLO_PROTO_STAT}
            for program_id, meta in plane.event_metadata.items():
                for stat in meta.stats:
                    if stat.metadata_id in key and stat.WhichOneof("value") == "bytes_value":
                        budget.charge_rows(len(stat.bytes_value) // MIN_INSTRUCTION_BYTES)
                        module = hlo_proto.FromString(stat.bytes_value).hlo_module
                        rows += [
                            (
                                program_id,
                                module.name,
                                i.name,
                                i.opcode,
                                i.metadata.op_name,
                                i.metadata.op_type,
                            )
                            for c in module.computations
                            for i in c.instructions
                        ]
    except (ValueError, DecodeError) as e:
        raise TraceParseError(source, "xplane", f"HLO module metadata: {e}") from e
    if not rows:
        return empty_frame("hlo_ops")
    columns = list(SCHEMA["hlo_ops"])
    frame = pd.DataFrame(rows, columns=columns[1:]).drop_duplicates(["program_id", "hlo_op"])
    frame.insert(0, "worker", worker)
    return frame.astype(dict(SCHEMA["hlo_ops"])).reset_index(drop=True)
