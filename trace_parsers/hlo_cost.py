"""FLOPs and bytes of each HLO instruction, by XLA's cost-analysis rules, from the program the
capture carries.

XProf derives an XLA op's FLOPs and bytes on a GPU with XLA's ``GpuHloCostAnalysis`` (through its
``XProfGpuCostAnalysis`` wrapper) over the HLO module in the trace, and PodScope needs the same
numbers where the trace's events carry none (ROCm, XLA:CPU). jaxlib exposes only its CPU
client's cost analysis, which counts an elementwise op as 1 FLOP per element where the GPU
rules count 3, so it cannot reproduce XProf's GPU numbers; this module follows XLA's rules
instead, for the instructions XLA programs contain, and is checked against XProf on every op of
the public ROCm captures (``tests/trace_parsers/test_hlo_cost.py``). Two rule sets:

* ``gpu`` (``GpuHloCostAnalysis`` as XProf configures it: no per-device elementwise profile,
  so 3 FLOPs per element of every elementwise op; fusions charge each parameter's bytes by how
  much of it the fusion's outputs use; cuBLASLt GEMMs and cuDNN convolutions by their shapes;
  other custom calls unknown, 0) — and one step past XProf: the legacy cuBLAS GEMM
  (``__cublas$gemm``, what XLA emits on ROCm for hipBLAS too) costed as a GEMM by its operand
  shapes and its backend config's dimension numbers, 2·M·N·K with the batch, where XProf
  shows 0 (``BEYOND_XPROF``);
* ``cpu`` (the base ``HloCostAnalysis``: 1 FLOP per element, transcendental ops counted apart).

    >>> costs = module_costs(module, rules="gpu")
    >>> costs[instr.name].flops, costs[instr.name].bytes_accessed
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from podscope.trace_parsers.hlo_module import (
    PRIMITIVE,
    Computation,
    Instruction,
    Module,
    Shape,
    is_elementwise,
)
from podscope.trace_parsers.schema import COSTED_BEYOND_XPROF

RULES = ("gpu", "cpu")
#: Opcodes whose FLOPs the base rules count as transcendentals, not FLOPs.
TRANSCENDENTAL = frozenset(
    [
        "acosh",
        "erf",
        "exponential",
        "log",
        "logistic",
        "power",
        "sqrt",
        "cbrt",
        "rsqrt",
        "tanh",
        "sine",
        "cosine",
        "exponential-minus-one",
        "log-plus-one",
        "atan2",
        "tan",
    ]
)
_FMA_FLOPS = 2
#: GpuHloCostAnalysis's FLOPs per element of an elementwise op its profile does not list.
_GPU_ELEMENTWISE_FLOPS = 3
#: GpuHloCostAnalysis's FLOPs per element of the elementwise ops its default profile lists:
#: XLA's measured clock cycles per element on an sm_86 GPU (``HloOpProfiles``' default, which
#: XProf uses: it gives the cost analysis no device), by element type and opcode. Read from the
#: profile table XProf 2.24 carries; every other (opcode, type) costs 3.
_GPU_PROFILE: dict[str, dict[str, int]] = {
    "s8": {"divide": 370, "power": 392},
    "s16": {"divide": 367, "power": 396},
    "s32": {"divide": 306},
    "s64": {"divide": 918, "power": 601},
    "u8": {"divide": 306, "power": 388},
    "u16": {"divide": 302, "power": 399},
    "u32": {"divide": 115},
    "u64": {"divide": 838, "power": 604},
    "f16": {
        "cbrt": 925, "cosine": 691, "exponential": 108, "exponential-minus-one": 396,
        "log": 266, "log-plus-one": 284, "logistic": 226, "rsqrt": 97, "sqrt": 97,
        "tanh": 212, "atan2": 482, "power": 975,
    },
    "f32": {
        "cbrt": 867, "cosine": 662, "exponential": 86, "exponential-minus-one": 381,
        "log": 244, "log-plus-one": 262, "logistic": 176, "rsqrt": 75, "sine": 662,
        "sqrt": 75, "tanh": 190, "atan2": 486, "power": 925,
    },
    "f64": {
        "cbrt": 6339, "cosine": 1717, "exponential": 1652, "exponential-minus-one": 1900,
        "log": 608, "log-plus-one": 2073, "logistic": 2412, "rsqrt": 698, "sine": 1789,
        "sqrt": 986, "tanh": 1609, "add": 97, "atan2": 3747, "divide": 2016,
        "multiply": 97, "power": 5511, "subtract": 97,
    },
    "c64": {
        "exponential": 1360, "exponential-minus-one": 1400, "log": 950, "log-plus-one": 842,
        "rsqrt": 2383, "sqrt": 3193, "atan2": 5353, "divide": 687, "power": 3351,
    },
    "c128": {
        "cosine": 6613, "exponential": 4028, "exponential-minus-one": 4161, "log": 7599,
        "log-plus-one": 6962, "rsqrt": 11318, "sine": 5878, "sqrt": 15606, "tanh": 9939,
        "add": 97, "atan2": 39027, "divide": 7941, "multiply": 270, "power": 18205,
        "subtract": 97,
    },
}  # fmt: skip
#: Custom calls XProf shows no FLOPs for that PodScope costs by their shapes: a GEMM's
#: FLOPs are no secret of its library (the ROCm gemm sample's 91 % of op time had none).
BEYOND_XPROF = COSTED_BEYOND_XPROF
#: GEMM custom calls, costed as a dot by their backend config's dimension numbers.
_GEMM = frozenset({"__cublas$lt$matmul", "__cublas$lt$matmul$f8"}) | BEYOND_XPROF
_DNN_CONV = frozenset(
    {
        "__cudnn$convForward",
        "__cudnn$convBackwardInput",
        "__cudnn$convBackwardFilter",
        "__cudnn$convBiasActivationForward",
        "__cudnn$convForwardGraph",
    }
)
#: Constants with more elements than this are read from memory (``immediate_constant_max``).
_IMMEDIATE_CONSTANT_MAX = 1


@dataclass(frozen=True)
class Cost:
    """One instruction's cost per execution.

    Attributes:
        flops: model FLOPs (0 where XLA's rules say unknown, as XProf shows it).
        device_flops: FLOPs at the device's rate for the input width (8-bit inputs count
            half, 4-bit a quarter: XProf's device-FLOPs adjustment).
        bytes_accessed: bytes read and written.
        hbm_bytes: of those, bytes in device memory (memory space 0) as XLA splits them by
            memory space (a custom call's tuple result counts no written bytes there).
    """

    flops: int
    device_flops: int
    bytes_accessed: int
    hbm_bytes: int


class _Props(dict[object, float]):
    """An instruction's properties as XLA keeps them: keys ``flops``, ``bytes``, ``util``,
    ``("opb", operand, index)``, ``("opu", operand, index)``, ``("out", index)``; floats."""

    def __missing__(self, key: object) -> float:
        return 0.0


#: The deepest computations may call each other (XLA's modules nest a few levels: a fusion in
#: a while body in a call); deeper is a crafted module, refused before Python's stack is.
MAX_NESTING = 64


class CostUnknown(Exception):
    """A module's costs cannot be computed: malformed (an instruction without the operands
    its opcode needs), or more work than its budget (one built to be quadratic)."""


@dataclass
class _Shared:
    """What the nested analyses of one module share: properties, the called computations'
    sums (a reduce's computation is analysed once, however many reduces call it), and work."""

    props: dict[int, _Props]
    sums: dict[int, _Props]
    max_work: int
    work: int = 0
    #: the computations being analysed now, outermost first (a call nests one more)
    open: list[int] = field(default_factory=list)

    def charge(self, n: int) -> None:
        self.work += n
        if self.work > self.max_work:
            raise CostUnknown(f"more than {self.max_work} steps")


class _Analysis:
    """One visit of a computation (nested analyses for called computations share state)."""

    def __init__(self, rules: str, shared: _Shared) -> None:
        self.rules = rules
        self.shared = shared
        self.props = shared.props
        self.sum = _Props()

    # ---------------------------------------------------------------- helpers

    def prop(self, instr: Instruction, key: object) -> float:
        p = self.props.get(id(instr))
        return 0.00001 if p is None else p[key]  # XLA's value for an unvisited instruction

    @staticmethod
    def size(shape: Shape) -> int:
        return shape.byte_size()

    def elementwise_flops(self, opcode: str, shape: Shape) -> tuple[float, float]:
        """(flops, transcendentals) of an elementwise op over ``shape``."""
        if self.rules == "gpu":
            per = _GPU_PROFILE.get(shape.dtype, {}).get(opcode, _GPU_ELEMENTWISE_FLOPS)
            return float(per * shape.elements_recursive()), 0.0
        n = float(shape.elements)
        return (0.0, n) if opcode in TRANSCENDENTAL else (n, 0.0)

    def computation(self, comp: Computation) -> _Props:
        """Visits every instruction of ``comp`` (operands before users) and returns the sum of
        their properties; a called (non-fusion) computation is visited once."""
        hit = self.shared.sums.get(id(comp))
        if hit is not None and not comp.is_fusion:
            return hit
        if id(comp) in self.shared.open:  # XLA's modules call no computation from itself
            raise CostUnknown(f"computation {comp.name!r} calls itself")
        if len(self.shared.open) >= MAX_NESTING:
            raise CostUnknown(f"computations nested more than {MAX_NESTING} deep")
        self.shared.open.append(id(comp))
        try:
            nested = _Analysis(self.rules, self.shared)
            for instr in _post_order(comp):
                nested.visit(instr)
        finally:
            self.shared.open.pop()
        self.shared.sums[id(comp)] = nested.sum
        return nested.sum

    # ---------------------------------------------------------------- one instruction

    def visit(self, instr: Instruction) -> None:
        self.shared.charge(1 + len(instr.operands))
        p = _Props()
        size = self.size(instr.shape)
        p["bytes"] = float(size) + sum(self.size(o.shape) for o in instr.operands)
        p[("out", ())] = float(size)
        for i, o in enumerate(instr.operands):
            p[("opb", i, ())] = float(self.size(o.shape))
            p[("opu", i, ())] = 1.0
        handler = _HANDLERS.get(instr.opcode)
        if handler is not None:
            handler(self, instr, p)
        elif is_elementwise(instr):
            p["flops"], p["transcendentals"] = self.elementwise_flops(instr.opcode, instr.shape)
        if self.rules == "gpu":
            p["device_adjust"] = _device_flops_adjustment(instr, p["flops"])
        self.props[id(instr)] = p
        for key in ("flops", "transcendentals", "bytes"):
            self.sum[key] += p[key]

    # ---------------------------------------------------------------- fusions

    def fusion(self, fusion: Instruction, p: _Props) -> None:
        comp = fusion.fused_computation
        sub = self.computation(comp)
        p.clear()
        p.update({k: v for k, v in sub.items() if k in ("flops", "transcendentals")})
        p["bytes"] = 0.0
        self.fusion_output_bytes(fusion, p)
        if self.rules == "gpu":
            self.gpu_utilizations(comp, p)
        else:
            for instr in comp.instructions:
                self.props[id(instr)]["util"] = 1.0
        for instr in comp.instructions:  # large constants are read from memory
            if instr.opcode == "constant" and instr.shape.elements > _IMMEDIATE_CONSTANT_MAX:
                util = min(self.props[id(instr)]["util"], 1.0)
                p["bytes"] += self.size(instr.shape) * util
        params = sorted(
            (i for i in comp.instructions if i.opcode == "parameter"),
            key=lambda i: i.parameter_number,
        )
        for n, param in enumerate(params):
            read = float(self.parameter_read_bytes(param))
            p["bytes"] += read
            p[("opb", n, ())] = read
            p[("opu", n, ())] = self.props[id(param)]["util"]

    def fusion_output_bytes(self, fusion: Instruction, p: _Props) -> None:
        root = fusion.fused_computation.root
        for index, leaf in fusion.shape.leaves():
            if not leaf.is_array:
                continue
            r = root.operands[index[0]] if len(index) == 1 and root.opcode == "tuple" else root
            if r.opcode == "dynamic-update-slice":
                n = float(self.size(r.operands[1].shape))
                self.props[id(r)][("opu", 0, ())] = 0.0
            else:
                n = float(self.size(leaf))
            p["bytes"] += n
            p[("out", index)] = n

    def parameter_read_bytes(self, param: Instruction) -> int:
        """Bytes a fused parameter is read with (GPU: its size times its utilization, at most
        once; CPU: by its users, slices reading only what they slice)."""
        if self.rules == "gpu":
            util = min(self.props[id(param)]["util"], 1.0)
            return round(self.size(param.shape) * util)
        size, seen = 0, False
        for user in param.users:
            if user.opcode in ("slice", "dynamic-slice") and user.operands[0] is param:
                size += self.size(user.shape)
            elif user.opcode in ("broadcast", "reshape"):
                size += self.size(param.shape)
            elif not seen:
                seen = True
                size += self.size(param.shape)
        return size

    def gpu_utilizations(self, comp: Computation, p: _Props) -> None:
        """How much of each fused instruction the fusion's outputs use, from the root to the
        parameters (``GpuHloCostAnalysis::FusionCalculateUtilizations``); the fusion's FLOPs
        are each instruction's FLOPs times its utilization."""
        order = list(reversed(_post_order(comp)))
        roots: dict[int, set[int]] = {id(i): set() for i in order}
        root_util: dict[int, float] = {id(i): 0.0 for i in order}
        root_util[id(comp.root)] = 1.0
        roots[id(comp.root)].add(id(comp.root))
        p["flops"] = 0.0
        for instr in order:
            props = self.props[id(instr)]
            util = sum(root_util[r] for r in roots[id(instr)])
            props["util"] = util
            p["flops"] += util * props["flops"]
            passes = (
                is_elementwise(instr)
                or instr.opcode in ("tuple", "get-tuple-element")
                or (
                    instr.opcode == "bitcast"
                    and instr.operands[0].shape.dims == instr.shape.dims
                    and instr.operands[0].shape.minor_to_major == instr.shape.minor_to_major
                )
            )
            for n, operand in enumerate(instr.operands):
                if passes:
                    self.shared.charge(len(roots[id(instr)]))
                    roots[id(operand)] |= roots[id(instr)]
                    continue
                roots[id(operand)].add(id(operand))
                u = util * self.prop(instr, ("opu", n, ()))
                elements = operand.shape.elements_recursive()
                u = math.ceil(u * elements) / elements if elements else 0.0
                root_util[id(operand)] += u


def _post_order(comp: Computation) -> list[Instruction]:
    """Operands before users, every instruction once (unreachable ones too), as XLA's
    ``MakeInstructionPostOrder`` orders them."""
    seen: set[int] = set()
    out: list[Instruction] = []
    for start in [comp.root, *comp.instructions]:
        stack = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                out.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((o, False) for o in reversed(node.operands) if id(o) not in seen)
    return out


def _device_flops_adjustment(instr: Instruction, flops: float) -> float:
    """FLOPs that 8-bit (half) or 4-bit (three quarters) inputs do not cost at the device's
    16-bit rate (``XProfGpuCostAnalysis``)."""
    widths = [
        PRIMITIVE.get(o.shape.element_type, ("", 0))[1] for o in instr.operands if o.shape.is_array
    ]
    divisor = {8: 2, 4: 4}.get(max(widths), 1) if widths and flops else 1
    return flops - flops / divisor


# -------------------------------------------------------------------- opcode handlers


def _dot_flops(
    lhs: Shape, result: Shape, contracting: Sequence[int], charge: Callable[[int], None]
) -> float:
    charge(len(contracting))
    width = math.prod(lhs.dims[d] for d in contracting if 0 <= d < len(lhs.dims))
    return float(_FMA_FLOPS * result.elements * width)


def _conv_flops(conv: Instruction, result: Shape, charge: Callable[[int], None]) -> float:
    lhs, rhs = conv.operands[0].shape, conv.operands[1].shape
    d = conv.conv
    window = conv.window or ((1, 1, 0, 0, 1, 1),)
    spatial = (
        zip(d["kernel_spatial"], d["output_spatial"], d["input_spatial"], strict=False)
        if conv.window
        else [(None, None, None)]
    )
    valid = 1
    for (k_dim, o_dim, i_dim), (_, stride, pad_lo, pad_hi, wdil, bdil) in zip(
        spatial, window, strict=False
    ):
        k = rhs.dims[k_dim] if k_dim is not None else 1
        o = result.dims[o_dim] if o_dim is not None else 1
        n = lhs.dims[i_dim] if i_dim is not None else 1
        if n == o == k == bdil and wdil == 1 and max(1, n - 1) == stride and pad_lo == pad_hi == 0:
            valid *= n
            continue
        if n == 1 and k == o and wdil == bdil == stride == 1 and pad_lo == pad_hi == o - 1:
            valid *= o
            continue
        # XLA counts the valid (kernel, output) pairs one by one: the work is charged first,
        # since a crafted kernel of 10**12 or a window of 10**6 x 10**6 would never end
        charge(k if stride == 1 and bdil == 1 else k * o)
        count = 0
        for kernel_idx in range(k):
            if stride == 1 and bdil == 1:
                base = pad_lo - kernel_idx * wdil
                count += max(min(n + base, o) - max(base, 0), 0)
                continue
            for out_idx in range(o):
                undilated = out_idx * stride - pad_lo + kernel_idx * wdil
                idx = undilated // bdil if bdil > 1 else undilated
                if undilated == idx * bdil and 0 <= idx < n:
                    count += 1
        valid *= count
    in_feature = lhs.dims[d["input_feature"]]
    out_feature = result.dims[d["output_feature"]]
    batch = lhs.dims[d["input_batch"]]
    fma = (
        (in_feature // conv.feature_group_count)
        * out_feature
        * (batch // conv.batch_group_count)
        * valid
    )
    return float(fma * _FMA_FLOPS)


def _dot(a: _Analysis, instr: Instruction, p: _Props) -> None:
    p["flops"] = _dot_flops(
        instr.operands[0].shape, instr.shape, instr.dot["lhs_contracting"], a.shared.charge
    )


def _convolution(a: _Analysis, instr: Instruction, p: _Props) -> None:
    p["flops"] = _conv_flops(instr, instr.shape, a.shared.charge)


def _reduce(a: _Analysis, instr: Instruction, p: _Props) -> None:
    sub = a.computation(instr.called[0])
    out = instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape
    count = instr.operands[0].shape.elements - out.elements
    p["flops"] = sub["flops"] * count
    p["transcendentals"] = sub["transcendentals"] * count
    if a.rules != "gpu":
        return
    out_bytes = float(sum(a.size(s) for _, s in instr.shape.leaves()))
    p[("out", ())] = out_bytes
    inputs = len(instr.operands) // 2
    total = out_bytes + sum(p[("opb", i, ())] for i in range(inputs))
    for i in range(inputs, len(instr.operands)):
        init = float(out.elements * a.size(instr.operands[i].shape))
        p[("opb", i, ())] = init
        p[("opu", i, ())] = float(out.elements)
        total += init
    p["bytes"] = total


def _reduce_window(a: _Analysis, instr: Instruction, p: _Props) -> None:
    sub = a.computation(instr.called[0])
    window = math.prod(w[0] for w in instr.window) if instr.window else 1
    out = instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape
    count = (window - 1) * out.elements
    p["flops"] = sub["flops"] * count
    p["transcendentals"] = sub["transcendentals"] * count


def _slice(a: _Analysis, instr: Instruction, p: _Props) -> None:
    out = float(a.size(instr.shape))
    p["bytes"], p[("out", ())], p[("opb", 0, ())] = out * 2, out, out
    p[("opu", 0, ())] = instr.shape.elements / max(1, instr.operands[0].shape.elements)


def _dynamic_slice(a: _Analysis, instr: Instruction, p: _Props) -> None:
    out = float(a.size(instr.shape))
    index = float(a.size(instr.operands[1].shape)) if len(instr.operands) > 1 else 0.0
    p["bytes"], p[("out", ())], p[("opb", 0, ())] = out * 2 + index, out, out
    p[("opu", 0, ())] = instr.shape.elements / max(1, instr.operands[0].shape.elements)


def _dynamic_update_slice(a: _Analysis, instr: Instruction, p: _Props) -> None:
    update = float(a.size(instr.operands[1].shape))
    index = float(a.size(instr.operands[2].shape)) if len(instr.operands) > 2 else 0.0
    p["bytes"], p[("out", ())] = update * 2 + index, update
    p[("opb", 0, ())], p[("opb", 1, ())] = 0.0, update
    n_out, n_up = instr.shape.elements, instr.operands[1].shape.elements
    p[("opu", 0, ())] = (n_out - n_up) / max(1, n_out)


def _no_bytes(a: _Analysis, instr: Instruction, p: _Props) -> None:
    """Parameters, constants, bitcasts, tuple reads: no computation, no memory touched."""
    p["bytes"], p[("out", ())] = 0.0, 0.0
    if instr.opcode in ("get-tuple-element", "bitcast"):
        p[("opb", 0, ())] = 0.0


def _tuple(a: _Analysis, instr: Instruction, p: _Props) -> None:
    size = float(a.size(instr.shape))
    p["bytes"], p[("out", ())] = size, size
    for i in range(len(instr.operands)):
        p[("opb", i, ())] = 0.0


def _concatenate(a: _Analysis, instr: Instruction, p: _Props) -> None:
    if a.rules != "gpu":
        return
    dim = instr.dimensions[0] if instr.dimensions else 0
    per = 6
    if dim > 0 and instr.operands and instr.operands[0].shape.dims[dim] & 31:
        per = 400
    p["flops"] = float(per * instr.shape.elements_recursive())


def _all_reduce(a: _Analysis, instr: Instruction, p: _Props) -> None:
    out = float(sum(a.size(s) for _, s in instr.shape.leaves() if s.is_array))
    p[("out", ())] = out
    p["bytes"] = out + sum(a.size(o.shape) for o in instr.operands)
    if a.rules == "gpu":
        root = instr.called[0].root.opcode if instr.called else "add"
        p["flops"] = a.elementwise_flops(root, instr.shape)[0]
    else:
        p["flops"] = float(sum(s.elements for _, s in instr.shape.leaves() if s.is_array))


def _custom_call(a: _Analysis, instr: Instruction, p: _Props) -> None:
    result = instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape
    known = a.rules == "gpu" and (
        instr.custom_call_target in _GEMM or instr.custom_call_target in _DNN_CONV
    )
    if not known:  # XLA: unknown (-1), which XProf shows as 0
        p.clear()
        p["flops"], p["bytes"], p[("out", ())] = -1.0, -1.0, -1.0
        return
    if instr.custom_call_target in _GEMM:
        contracting = _backend_dims(instr.backend_config, "lhs_contracting_dimensions")
        p["flops"] = _dot_flops(instr.operands[0].shape, result, contracting, a.shared.charge)
    else:
        p["flops"] = _conv_flops(instr, result, a.shared.charge)
    if instr.shape.is_tuple:  # the real output, not the scratch buffer
        p["bytes"] = p["bytes"] - p[("out", ())] + a.size(result)
        p[("out", ())] = float(a.size(result))


def _backend_dims(config: str, key: str) -> tuple[int, ...]:
    """A repeated dimension list from a GEMM's JSON backend config (``"key":["1"]``)."""
    import json

    try:
        data = json.loads(config)
    except ValueError:
        return ()
    found = data.get("gemm_backend_config", {}).get("dot_dimension_numbers", {}).get(key, [])
    return tuple(int(x) for x in found)


def _call(a: _Analysis, instr: Instruction, p: _Props) -> None:
    sub = a.computation(instr.called[0])
    p.clear()
    p.update({k: sub[k] for k in ("flops", "transcendentals", "bytes")})


def _while(a: _Analysis, instr: Instruction, p: _Props) -> None:
    p.clear()
    for comp in instr.called:
        sub = a.computation(comp)
        for k in ("flops", "transcendentals", "bytes"):
            p[k] += sub[k]


def _no_flops(a: _Analysis, instr: Instruction, p: _Props) -> None:
    """Copies, broadcasts (whose operand counts once: XProf does not count repeated input
    accesses), iota, pad, reverse: bytes in and out, no FLOPs."""


def _fusion(a: _Analysis, instr: Instruction, p: _Props) -> None:
    if instr.called:  # a module without its fused computation: bytes in and out only
        a.fusion(instr, p)


_HANDLERS = {
    "fusion": _fusion,
    "dot": _dot,
    "convolution": _convolution,
    "reduce": _reduce,
    "reduce-window": _reduce_window,
    "slice": _slice,
    "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
    "parameter": _no_bytes,
    "constant": _no_bytes,
    "get-tuple-element": _no_bytes,
    "bitcast": _no_bytes,
    "tuple": _tuple,
    "concatenate": _concatenate,
    "all-reduce": _all_reduce,
    "all-reduce-start": _all_reduce,
    "custom-call": _custom_call,
    "call": _call,
    "while": _while,
    "conditional": _while,
    "broadcast": _no_flops,
    "copy": _no_flops,
    "iota": _no_flops,
    "pad": _no_flops,
    "reverse": _no_flops,
}


def _hbm_bytes(instr: Instruction, p: _Props) -> float:
    """Bytes read and written in memory space 0 (``GetBytesRead/Written(hlo, 0)``)."""
    total = 0.0
    for n, operand in enumerate(instr.operands):
        for index, leaf in operand.shape.leaves():
            if leaf.memory_space == 0:
                total += p[("opb", n, index)]
    for index, leaf in instr.shape.leaves():
        if leaf.memory_space == 0:
            total += p[("out", index)]
    return total


def module_costs(module: Module, rules: str = "gpu", max_work: int = 50_000_000) -> dict[str, Cost]:
    """The cost of every instruction of the module's non-fused computations, by instruction
    name (unique in a module; a fusion's inner instructions are part of the fusion's cost).

    Args:
        module: a decoded module.
        rules: ``gpu`` or ``cpu`` (see the module's docstring).
        max_work: the most steps (instructions and operands visited, sets merged) the
            analysis may take: XLA's fusion analysis can be made quadratic by a crafted module.

    Raises:
        ValueError: ``rules`` is not one of ``RULES``.
        CostUnknown: the module needs more than ``max_work`` steps, or is malformed.
    """
    if rules not in RULES:
        raise ValueError(f"rules must be one of {RULES}, not {rules!r}")
    try:
        return _costs(module, rules, max_work)
    except (IndexError, KeyError, ZeroDivisionError) as e:
        raise CostUnknown(f"malformed module {module.name!r}: {type(e).__name__} {e}") from e
    except OverflowError as e:  # a shape of more than 2**1024 elements: no device has one
        raise CostUnknown(f"module {module.name!r}: a size past any device's ({e})") from e


def _costs(module: Module, rules: str, max_work: int) -> dict[str, Cost]:
    props: dict[int, _Props] = {}
    analysis = _Analysis(rules, _Shared(props, {}, max_work))
    out: dict[str, Cost] = {}
    for comp in module.computations:
        if comp.is_fusion:
            continue
        for instr in _post_order(comp):
            if id(instr) not in props:
                analysis.visit(instr)
            p = props[id(instr)]
            flops = max(0.0, p["flops"])
            out[instr.name] = Cost(
                flops=int(flops),
                device_flops=int(max(0.0, flops - p["device_adjust"])),
                bytes_accessed=int(max(0.0, p["bytes"])),
                hbm_bytes=int(max(0.0, _hbm_bytes(instr, p))),
            )
    return out
