"""XLA programs as a capture carries them: serialized ``xla.HloProto`` → modules of computations
of instructions, with their shapes, and what XLA's tools print of each (category, HLO text).

Only the fields read here are declared (a descriptor of that subset of ``xla/service/hlo.proto``
and ``xla/xla_data.proto``, same field numbers): the parser skips the rest of each message.

    >>> m = decode_module(hlo_proto_bytes, program_id=15)
    >>> [(i.name, category(i), i.shape.text()) for i in m.entry.instructions][:2]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: PrimitiveType number (xla_data.proto) → (name as HLO text prints it, bits per element).
PRIMITIVE: dict[int, tuple[str, int]] = {
    1: ("pred", 8), 2: ("s8", 8), 3: ("s16", 16), 4: ("s32", 32), 5: ("s64", 64),
    6: ("u8", 8), 7: ("u16", 16), 8: ("u32", 32), 9: ("u64", 64), 10: ("f16", 16),
    11: ("f32", 32), 12: ("f64", 64), 13: ("tuple", 0), 14: ("opaque", 0), 15: ("c64", 64),
    16: ("bf16", 16), 17: ("token", 0), 18: ("c128", 128), 19: ("f8e5m2", 8),
    20: ("f8e4m3fn", 8), 21: ("s4", 4), 22: ("u4", 4), 23: ("f8e4m3b11fnuz", 8),
    24: ("f8e5m2fnuz", 8), 25: ("f8e4m3fnuz", 8), 26: ("s2", 2), 27: ("u2", 2),
    28: ("f8e4m3", 8), 29: ("f8e3m4", 8), 30: ("s1", 1), 31: ("u1", 1), 32: ("f4e2m1fn", 4),
    33: ("f8e8m0fnu", 8),
}  # fmt: skip
TUPLE, OPAQUE, TOKEN = 13, 14, 17
FLOAT_TYPES = frozenset(n for n, _ in PRIMITIVE.values() if n[0] in "fb" or n.startswith("c"))
#: Pointer size XLA's default shape-size function charges for a tuple's index table.
POINTER_BYTES = 8

#: message → [(field, number, kind)]; kind: a scalar type, "enum", "[int64]" (repeated) or a
#: message name, "[Name]" for a repeated message.
_FIELDS: dict[str, list[tuple[str, int, str]]] = {
    "HloProto": [("hlo_module", 1, "HloModuleProto")],
    # The same message with its buffer assignment (``hlo_memory``): only the memory viewer
    # decodes it.
    "HloProtoWithBuffers": [
        ("hlo_module", 1, "HloModuleProto"),
        ("buffer_assignment", 3, "BufferAssignmentProto"),
    ],
    "HloModuleProto": [
        ("name", 1, "string"),
        ("entry_computation_name", 2, "string"),
        ("computations", 3, "[HloComputationProto]"),
        ("entry_computation_id", 6, "int64"),
        ("stack_frame_index", 17, "StackFrameIndexProto"),
    ],
    "HloComputationProto": [
        ("name", 1, "string"),
        ("instructions", 2, "[HloInstructionProto]"),
        ("id", 5, "int64"),
        ("root_id", 6, "int64"),
        ("is_fusion_computation", 7, "bool"),
    ],
    "HloInstructionProto": [
        ("name", 1, "string"),
        ("opcode", 2, "string"),
        ("shape", 3, "ShapeProto"),
        ("metadata", 7, "OpMetadata"),
        ("parameter_number", 9, "int64"),
        ("fusion_kind", 11, "string"),
        ("tuple_index", 13, "int64"),
        ("dimensions", 14, "[int64]"),
        ("window", 15, "Window"),
        ("convolution_dimension_numbers", 16, "ConvolutionDimensionNumbers"),
        ("channel_id", 26, "int64"),
        ("custom_call_target", 28, "string"),
        ("dot_dimension_numbers", 30, "DotDimensionNumbers"),
        ("id", 35, "int64"),
        ("operand_ids", 36, "[int64]"),
        ("called_computation_ids", 38, "[int64]"),
        ("backend_config", 43, "bytes"),
        ("replica_groups", 49, "[ReplicaGroup]"),
        ("feature_group_count", 50, "int64"),
        ("batch_group_count", 58, "int64"),
        ("use_global_device_ids", 71, "bool"),
    ],
    "ShapeProto": [
        ("element_type", 2, "enum"),
        ("dimensions", 3, "[int64]"),
        ("tuple_shapes", 4, "[ShapeProto]"),
        ("layout", 5, "LayoutProto"),
    ],
    "LayoutProto": [
        ("minor_to_major", 1, "[int64]"),
        ("tiles", 6, "[TileProto]"),
        ("element_size_in_bits", 7, "int64"),
        ("memory_space", 8, "int64"),
    ],
    "TileProto": [("dimensions", 1, "[int64]")],
    "OpMetadata": [
        ("op_type", 1, "string"),
        ("op_name", 2, "string"),
        ("source_file", 3, "string"),
        ("source_line", 4, "int32"),
        ("deduplicated_name", 12, "string"),
        ("stack_frame_id", 15, "int32"),
    ],
    "Window": [("dimensions", 1, "[WindowDimension]")],
    "WindowDimension": [
        ("size", 1, "int64"),
        ("stride", 2, "int64"),
        ("padding_low", 3, "int64"),
        ("padding_high", 4, "int64"),
        ("window_dilation", 5, "int64"),
        ("base_dilation", 6, "int64"),
    ],
    "ConvolutionDimensionNumbers": [
        ("input_batch_dimension", 7, "int64"),
        ("input_feature_dimension", 8, "int64"),
        ("input_spatial_dimensions", 11, "[int64]"),
        ("kernel_spatial_dimensions", 6, "[int64]"),
        ("output_feature_dimension", 10, "int64"),
        ("output_spatial_dimensions", 12, "[int64]"),
    ],
    "DotDimensionNumbers": [
        ("lhs_contracting_dimensions", 1, "[int64]"),
        ("rhs_contracting_dimensions", 2, "[int64]"),
        ("lhs_batch_dimensions", 3, "[int64]"),
        ("rhs_batch_dimensions", 4, "[int64]"),
    ],
    "ReplicaGroup": [("replica_ids", 1, "[int64]")],
    "StackFrameIndexProto": [
        ("file_names", 1, "[string]"),
        ("file_locations", 3, "[FileLocation]"),
        ("stack_frames", 4, "[StackFrame]"),
    ],
    "FileLocation": [("file_name_id", 1, "int32"), ("line", 3, "int32"), ("column", 4, "int32")],
    "StackFrame": [("file_location_id", 1, "int32"), ("parent_frame_id", 2, "int32")],
    "BufferAssignmentProto": [
        ("logical_buffers", 1, "[LogicalBufferProto]"),
        ("buffer_allocations", 3, "[BufferAllocationProto]"),
        ("heap_simulator_traces", 4, "[HeapSimulatorTrace]"),
    ],
    "LogicalBufferProto": [
        ("id", 1, "int64"),
        ("size", 2, "int64"),
        ("defined_at", 3, "BufferLocation"),
        ("color", 4, "int64"),
    ],
    "BufferLocation": [("instruction_id", 4, "int64"), ("shape_index", 3, "[int64]")],
    "BufferAllocationProto": [
        ("index", 1, "int64"),
        ("size", 2, "int64"),
        ("is_thread_local", 3, "bool"),
        ("is_entry_computation_parameter", 5, "bool"),
        ("maybe_live_out", 7, "bool"),
        ("color", 8, "int64"),
        ("assigned", 9, "[BufferAssigned]"),
        ("is_tuple", 11, "bool"),
        ("is_constant", 12, "bool"),
    ],
    "BufferAssigned": [("logical_buffer_id", 1, "int64"), ("offset", 2, "int64")],
    "HeapSimulatorTrace": [("events", 1, "[HeapEvent]")],
    "HeapEvent": [
        ("kind", 1, "enum"),
        ("buffer_id", 2, "int64"),
        ("instruction_name", 4, "string"),
        ("share_with_canonical_id", 5, "int64"),
    ],
}


@functools.cache
def hlo_proto_class(root: str = "HloProto") -> Any:
    """The message class of the HloProto subset (or another message of ``_FIELDS``), built
    once. protobuf is imported here: only captures of XLA programs pay its import."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    scalar = {
        "string": F.TYPE_STRING,
        "bytes": F.TYPE_BYTES,
        "int64": F.TYPE_INT64,
        "int32": F.TYPE_INT32,
        "bool": F.TYPE_BOOL,
        "enum": F.TYPE_INT32,  # an enum's wire form is a varint: read as its number
    }
    fdp = descriptor_pb2.FileDescriptorProto(
        name="podscope_hlo_subset.proto", package="podscope.hlo", syntax="proto3"
    )
    for message, fields in _FIELDS.items():
        mp = fdp.message_type.add(name=message)
        for name, number, kind in fields:
            repeated = kind.startswith("[")
            kind = kind.strip("[]")
            f = mp.field.add(name=name, number=number)
            f.label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            if kind in scalar:
                f.type = scalar[kind]
            else:
                f.type, f.type_name = F.TYPE_MESSAGE, f".podscope.hlo.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"podscope.hlo.{root}"))


@dataclass(frozen=True, slots=True)
class Shape:
    """An XLA shape: an array (element type, dimensions, layout) or a tuple of shapes."""

    element_type: int
    dims: tuple[int, ...] = ()
    tuple_shapes: tuple[Shape, ...] = ()
    #: None: the shape has no layout (XLA's cost analysis then charges it no bytes)
    minor_to_major: tuple[int, ...] | None = None
    tiles: tuple[tuple[int, ...], ...] = ()
    element_size_in_bits: int = 0
    memory_space: int = 0

    @property
    def is_tuple(self) -> bool:
        return self.element_type == TUPLE

    @property
    def is_array(self) -> bool:
        return self.element_type not in (TUPLE, OPAQUE, TOKEN, 0)

    @property
    def dtype(self) -> str:
        return PRIMITIVE.get(self.element_type, ("invalid", 0))[0]

    @property
    def elements(self) -> int:
        return math.prod(self.dims) if self.is_array else 0

    def elements_recursive(self) -> int:
        """Array elements of every leaf (``ShapeUtil::ElementsInRecursive``)."""
        return sum(s.elements for _, s in self.leaves())

    def byte_size(self) -> int:
        """Bytes of the top level as XLA's default shape-size function counts them: an array's
        elements, a tuple's pointer table; 0 for a shape without a layout."""
        if self.minor_to_major is None and self.is_array:
            return 0
        if self.is_tuple:
            return POINTER_BYTES * len(self.tuple_shapes)
        if self.element_type == OPAQUE:
            return POINTER_BYTES
        if not self.is_array:
            return 0
        bits = self.element_size_in_bits or max(8, PRIMITIVE.get(self.element_type, ("", 8))[1])
        return (self.elements * bits + 7) // 8

    def leaves(self, index: tuple[int, ...] = ()) -> Iterator[tuple[tuple[int, ...], Shape]]:
        """``(shape index, shape)`` of every non-tuple subshape, depth first."""
        if not self.is_tuple:
            yield index, self
            return
        for i, s in enumerate(self.tuple_shapes):
            yield from s.leaves((*index, i))

    def text(self) -> str:
        """As HLO text prints it: ``f32[5,1024]{1,0:T(8,128)S(5)}``, ``(s32[], u8[16]{0})``;
        a tuple's first ``SHOWN`` elements (a crafted module's text must not grow past its
        size: ``expression``)."""
        if self.is_tuple:
            shown = [s.text() for s in self.tuple_shapes[:SHOWN]]
            if len(self.tuple_shapes) > SHOWN:
                shown.append(f"… {len(self.tuple_shapes) - SHOWN} more")
            return "(" + ", ".join(shown) + ")"
        out = f"{self.dtype}[{','.join(map(str, self.dims))}]"
        if self.minor_to_major is None or not self.is_array or not self.dims:
            return out
        layout = ",".join(map(str, self.minor_to_major))
        extra = "".join("T(" + ",".join(map(str, t)) + ")" for t in self.tiles)
        if self.memory_space:
            extra += f"S({self.memory_space})"
        return out + "{" + layout + (":" + extra if extra else "") + "}"


@dataclass(eq=False, slots=True)
class Instruction:
    """One HLO instruction; ``operands``, ``users``, ``called`` and ``parent`` are linked by
    ``decode_module``."""

    id: int
    name: str
    opcode: str
    shape: Shape
    operand_ids: tuple[int, ...] = ()
    called_ids: tuple[int, ...] = ()
    parameter_number: int = 0
    fusion_kind: str = ""
    custom_call_target: str = ""
    backend_config: str = ""
    dimensions: tuple[int, ...] = ()
    #: per spatial dimension: (size, stride, padding_low, padding_high, window_dilation,
    #: base_dilation), XLA's defaults (1) where the proto leaves 0
    window: tuple[tuple[int, int, int, int, int, int], ...] = ()
    conv: dict[str, Any] = field(default_factory=dict)
    feature_group_count: int = 1
    batch_group_count: int = 1
    dot: dict[str, tuple[int, ...]] = field(default_factory=dict)
    replica_groups: tuple[tuple[int, ...], ...] = ()
    channel_id: int = 0
    use_global_device_ids: bool = False
    op_type: str = ""
    op_name: str = ""
    source_file: str = ""
    source_line: int = 0
    stack_frame_id: int = 0
    deduplicated_name: str = ""
    operands: list[Instruction] = field(default_factory=list)
    users: list[Instruction] = field(default_factory=list)
    called: list[Computation] = field(default_factory=list)
    parent: Computation | None = None

    @property
    def is_fused(self) -> bool:
        return self.parent is not None and self.parent.is_fusion

    @property
    def fused_computation(self) -> Computation:
        return self.called[0]


@dataclass(eq=False, slots=True)
class Computation:
    id: int
    name: str
    instructions: list[Instruction]
    root: Instruction
    is_fusion: bool


@dataclass(eq=False, slots=True)
class Module:
    """One compiled program: its computations, entry first, and source frames."""

    name: str
    program_id: int
    computations: list[Computation]
    entry: Computation
    #: stack frame id (1-based) → (file, line, column, parent frame id)
    frames: dict[int, tuple[str, int, int, int]] = field(default_factory=dict)
    #: bytes of the serialized module (what bounds the work spent on it)
    size: int = 0
    #: the entry computation's name (``main.22_spmd``)
    entry_name: str = ""

    def instructions(self) -> Iterator[Instruction]:
        for c in self.computations:
            yield from c.instructions

    def source_stack(self, instr: Instruction) -> list[str]:
        """``file:line:column`` of the instruction's frames, innermost first (bounded)."""
        out: list[str] = []
        frame = instr.stack_frame_id
        while frame in self.frames and len(out) < 64:
            file, line, column, parent = self.frames[frame]
            out.append(f"{file}:{line}:{column}")
            frame = parent
        return out

    def source_line(self, instr: Instruction, stack: list[str] | None = None) -> str:
        """``file:line`` of the instruction as XProf's tools give it: its metadata's source
        file and line, else its innermost stack frame's (``stack``: ``source_stack`` when the
        caller has it)."""
        if instr.source_file:
            return f"{instr.source_file}:{instr.source_line}"
        stack = self.source_stack(instr) if stack is None else stack
        return stack[0].rsplit(":", 1)[0] if stack else ""


def _shape(p: Any) -> Shape:
    layout = p.layout if p.HasField("layout") else None
    return Shape(
        element_type=p.element_type,
        dims=tuple(p.dimensions),
        tuple_shapes=tuple(_shape(s) for s in p.tuple_shapes),
        minor_to_major=tuple(layout.minor_to_major) if layout is not None else None,
        tiles=tuple(tuple(t.dimensions) for t in layout.tiles) if layout is not None else (),
        element_size_in_bits=layout.element_size_in_bits if layout is not None else 0,
        memory_space=layout.memory_space if layout is not None else 0,
    )


def _instruction(p: Any) -> Instruction:
    m, c, d = p.metadata, p.convolution_dimension_numbers, p.dot_dimension_numbers
    return Instruction(
        id=p.id,
        name=p.name,
        opcode=p.opcode,
        shape=_shape(p.shape),
        operand_ids=tuple(p.operand_ids),
        called_ids=tuple(p.called_computation_ids),
        parameter_number=p.parameter_number,
        fusion_kind=p.fusion_kind,
        custom_call_target=p.custom_call_target,
        backend_config=p.backend_config.decode("utf-8", "replace"),
        dimensions=tuple(p.dimensions),
        window=tuple(
            (
                w.size,
                w.stride or 1,
                w.padding_low,
                w.padding_high,
                w.window_dilation or 1,
                w.base_dilation or 1,
            )
            for w in p.window.dimensions
        ),
        conv={
            "input_batch": c.input_batch_dimension,
            "input_feature": c.input_feature_dimension,
            "input_spatial": tuple(c.input_spatial_dimensions),
            "kernel_spatial": tuple(c.kernel_spatial_dimensions),
            "output_feature": c.output_feature_dimension,
            "output_spatial": tuple(c.output_spatial_dimensions),
        },
        feature_group_count=p.feature_group_count or 1,
        batch_group_count=p.batch_group_count or 1,
        dot={
            "lhs_contracting": tuple(d.lhs_contracting_dimensions),
            "rhs_contracting": tuple(d.rhs_contracting_dimensions),
            "lhs_batch": tuple(d.lhs_batch_dimensions),
            "rhs_batch": tuple(d.rhs_batch_dimensions),
        },
        replica_groups=tuple(tuple(g.replica_ids) for g in p.replica_groups),
        channel_id=p.channel_id,
        use_global_device_ids=p.use_global_device_ids,
        op_type=m.op_type,
        op_name=m.op_name,
        source_file=m.source_file,
        source_line=m.source_line,
        stack_frame_id=m.stack_frame_id,
        deduplicated_name=m.deduplicated_name,
    )


def decode_module(data: bytes, program_id: int) -> Module:
    """A serialized ``xla.HloProto`` as a ``Module`` with its instructions linked.

    Raises:
        ValueError: not an HloProto, or one whose ids do not resolve (a corrupt module).
    """
    from google.protobuf.message import DecodeError

    try:
        proto = hlo_proto_class().FromString(data).hlo_module
    except DecodeError as e:
        raise ValueError(f"program {program_id}: {e}") from e
    return module_of(proto, program_id, len(data))


def module_of(proto: Any, program_id: int, size: int) -> Module:
    """A decoded ``HloModuleProto`` as a ``Module`` (``decode_module``; ``size``: the bytes
    it came from).

    Raises:
        ValueError: its ids do not resolve (a corrupt module).
    """
    comps: dict[int, Computation] = {}
    by_id: dict[int, Instruction] = {}
    for cp in proto.computations:
        instrs = [_instruction(i) for i in cp.instructions]
        if not instrs:
            continue
        local = {i.id: i for i in instrs}
        root = local.get(cp.root_id, instrs[-1])
        comp = Computation(cp.id, cp.name, instrs, root, cp.is_fusion_computation)
        for i in instrs:
            i.parent = comp
        comps[cp.id] = comp
        by_id.update(local)
    for i in by_id.values():
        try:
            i.operands = [by_id[o] for o in i.operand_ids]
            i.called = [comps[c] for c in i.called_ids]
        except KeyError as e:
            raise ValueError(f"program {program_id}: {i.name} names unknown id {e}") from None
        for o in i.operands:
            o.users.append(i)
        if i.opcode == "fusion" and i.called:
            i.called[0].is_fusion = True  # older protos do not set the flag
    if not comps:
        raise ValueError(f"program {program_id}: no computation")
    entry = comps.get(proto.entry_computation_id) or list(comps.values())[-1]
    ordered = [entry, *(c for c in comps.values() if c is not entry)]
    index = proto.stack_frame_index
    files = list(index.file_names)
    locations = [
        (files[loc.file_name_id - 1] if 0 < loc.file_name_id <= len(files) else "", loc)
        for loc in index.file_locations
    ]
    frames = {}
    for n, f in enumerate(index.stack_frames, start=1):
        if 0 < f.file_location_id <= len(locations):
            file, loc = locations[f.file_location_id - 1]
            frames[n] = (file, loc.line, loc.column, f.parent_frame_id)
    return Module(
        proto.name,
        program_id,
        ordered,
        entry,
        frames,
        size=size,
        entry_name=proto.entry_computation_name or entry.name,
    )


#: Opcodes XLA counts as elementwise (``HloInstruction::IsElementwise``; a fusion is not).
ELEMENTWISE = frozenset(
    [
        "abs",
        "add",
        "and",
        "atan2",
        "bitcast-convert",
        "cbrt",
        "ceil",
        "clamp",
        "clz",
        "compare",
        "complex",
        "convert",
        "copy",
        "cosine",
        "divide",
        "erf",
        "exponential",
        "exponential-minus-one",
        "floor",
        "imag",
        "is-finite",
        "log",
        "log-plus-one",
        "logistic",
        "map",
        "maximum",
        "minimum",
        "multiply",
        "negate",
        "not",
        "or",
        "popcnt",
        "power",
        "real",
        "reduce-precision",
        "remainder",
        "round-nearest-afz",
        "round-nearest-even",
        "rsqrt",
        "select",
        "shift-left",
        "shift-right-arithmetic",
        "shift-right-logical",
        "sign",
        "sine",
        "sqrt",
        "stochastic-convert",
        "subtract",
        "tan",
        "tanh",
        "xor",
    ]
)
_DATA_FORMATTING = frozenset({"transpose", "copy", "reshape", "dynamic-update-slice"})
_FUSION_CATEGORY = {
    "kLoop": "loop fusion",
    "kInput": "input fusion",
    "kOutput": "output fusion",
    "kCustom": "custom fusion",
}


def is_elementwise(instr: Instruction) -> bool:
    return instr.opcode in ELEMENTWISE


def category(instr: Instruction) -> str:
    """The instruction's category as XLA names it (``HloInstruction::ToCategory``), which
    XProf's HLO tables show: ``loop fusion``, ``data formatting``, ``custom-call``, …"""
    if instr.opcode == "fusion":
        return _FUSION_CATEGORY.get(instr.fusion_kind, "fusion")
    if instr.opcode in _DATA_FORMATTING:
        return "data formatting"
    if is_elementwise(instr):
        return "non-fusion elementwise"
    return instr.opcode


#: Tuple elements and operands an instruction's text shows (then "… N more").
SHOWN = 32


def expression(instr: Instruction) -> str:
    """The instruction as one line of HLO text (``%name = shape opcode(operands), attrs``):
    the operands with their shapes, and the attributes that say what it runs."""
    args = ", ".join(f"{o.shape.text()} %{o.name}" for o in instr.operands[:SHOWN])
    if len(instr.operands) > SHOWN:  # an operand's text per operand: quadratic if unbounded
        args += f", … {len(instr.operands) - SHOWN} more"
    attrs = []
    if instr.opcode == "fusion":
        attrs.append(f"kind={instr.fusion_kind}")
    if instr.opcode in ("reduce", "broadcast", "transpose", "concatenate") and instr.dimensions:
        attrs.append("dimensions={" + ",".join(map(str, instr.dimensions)) + "}")
    if instr.custom_call_target:
        attrs.append(f'custom_call_target="{instr.custom_call_target}"')
    if instr.called:
        key = "calls" if instr.opcode in ("fusion", "call", "async-start") else "to_apply"
        attrs.append(f"{key}=" + ", ".join(f"%{c.name}" for c in instr.called))
    tail = (", " + ", ".join(attrs)) if attrs else ""
    return f"%{instr.name} = {instr.shape.text()} {instr.opcode}({args}){tail}"


def compute_dtype(instr: Instruction) -> str:
    """The narrowest floating-point type the instruction reads or writes (its operands' and
    result's leaves, a fusion's inner instructions included): ``bf16`` for a bf16 matmul that
    accumulates in f32, ``f32`` for an f32 program; the result's type when nothing is floating
    point."""
    shapes = [s for o in instr.operands for _, s in o.shape.leaves()]
    shapes += [s for _, s in instr.shape.leaves()]
    if instr.opcode == "fusion" and instr.called:
        shapes += [s for i in instr.called[0].instructions for _, s in i.shape.leaves()]
    floats = [s for s in shapes if s.dtype in FLOAT_TYPES and s.is_array]
    if not floats:
        leaves = [s for _, s in instr.shape.leaves() if s.is_array]
        return leaves[0].dtype if leaves else ""
    return min(floats, key=lambda s: PRIMITIVE[s.element_type][1]).dtype


def copy_spaces(instr: Instruction) -> tuple[int, int] | None:
    """(memory space copied from, to) of a copy between memory spaces: ``copy-start`` (its
    result is ``(destination, source, context)``), ``copy-done`` (of a copy-start's tuple) and
    ``copy``; None for other instructions."""
    if instr.opcode == "copy-start" and len(instr.shape.tuple_shapes) >= 2:
        return instr.shape.tuple_shapes[1].memory_space, instr.shape.tuple_shapes[0].memory_space
    if instr.opcode == "copy-done" and instr.operands:
        start = instr.operands[0].shape
        if len(start.tuple_shapes) >= 2:
            return start.tuple_shapes[1].memory_space, instr.shape.memory_space
    if instr.opcode == "copy" and instr.operands:
        return instr.operands[0].shape.memory_space, instr.shape.memory_space
    return None
