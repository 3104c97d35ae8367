"""XLA's cost rules on small modules built here, each number worked out by hand from the rule
it checks (the public ROCm captures check them against XProf in
``tests/analyzers/test_xla_ops.py``): elementwise FLOPs by the GPU profile, a fusion's
parameters read once however often they are broadcast, dots, reductions, custom calls XLA
cannot cost, the base (CPU) rules, a malformed module and one built to be quadratic."""

from __future__ import annotations

from typing import Any

import pytest

from podscope.trace_parsers.hlo import hlo_ops
from podscope.trace_parsers.hlo_cost import BEYOND_XPROF, CostUnknown, module_costs
from podscope.trace_parsers.hlo_module import copy_spaces, decode_module, hlo_proto_class
from tests.xspace_builder import SpaceBuilder

F32, BF16, S32 = 11, 16, 4


class Module:
    """An HloProto written instruction by instruction (ids in order, layouts row-major)."""

    def __init__(self, name: str = "jit_step") -> None:
        self.proto = hlo_proto_class()()
        self.module = self.proto.hlo_module
        self.module.name = name
        self.next_id = 1
        self.ids: dict[str, int] = {}
        self.comps: dict[str, Any] = {}

    def computation(self, name: str, fusion: bool = False) -> Any:
        comp = self.module.computations.add(name=name, id=len(self.comps) + 1)
        comp.is_fusion_computation = fusion
        self.comps[name] = comp
        return comp

    def add(
        self,
        comp: Any,
        name: str,
        opcode: str,
        shape: tuple[int, tuple[int, ...]],
        *operands: str,
        **kw: Any,
    ) -> None:
        i = comp.instructions.add(name=name, opcode=opcode, id=self.next_id)
        self.ids[name] = self.next_id
        self.next_id += 1
        element, dims = shape
        if element == 13:  # a tuple: kw["tuple"] holds its element shapes
            i.shape.element_type = 13
            for et, d, space in kw.pop("tuple"):
                s = i.shape.tuple_shapes.add(element_type=et, dimensions=d)
                s.layout.minor_to_major.extend(reversed(range(len(d))))
                s.layout.memory_space = space
        else:
            i.shape.element_type, i.shape.dimensions[:] = element, dims
            i.shape.layout.minor_to_major.extend(reversed(range(len(dims))))
            i.shape.layout.memory_space = kw.pop("space", 0)
        i.operand_ids.extend(self.ids[o] for o in operands)
        for c in kw.pop("calls", []):
            i.called_computation_ids.append(self.comps[c].id)
        for key, value in kw.items():
            if key == "contracting":
                i.dot_dimension_numbers.lhs_contracting_dimensions.append(value[0])
                i.dot_dimension_numbers.rhs_contracting_dimensions.append(value[1])
            elif key == "dims":
                i.dimensions.extend(value)
            else:
                setattr(i, key, value)
        comp.root_id = i.id

    def entry(self) -> Any:
        comp = self.computation("main")
        self.module.entry_computation_id = comp.id
        return comp

    def decoded(self) -> Any:
        return decode_module(self.proto.SerializeToString(), program_id=7)


def exp_add_fusion(elements: int = 1024) -> Module:
    m = Module()
    f = m.computation("fused", fusion=True)
    m.add(f, "p0", "parameter", (F32, (elements,)), parameter_number=0)
    m.add(f, "p1", "parameter", (F32, (elements,)), parameter_number=1)
    m.add(f, "add.1", "add", (F32, (elements,)), "p0", "p1")
    m.add(f, "exp.1", "exponential", (F32, (elements,)), "add.1")
    e = m.entry()
    m.add(e, "a", "parameter", (F32, (elements,)), parameter_number=0)
    m.add(e, "b", "parameter", (F32, (elements,)), parameter_number=1)
    m.add(e, "fusion", "fusion", (F32, (elements,)), "a", "b", calls=["fused"], fusion_kind="kLoop")
    return m


def test_gpu_rules_cost_elementwise_ops_by_the_profile_and_read_each_operand_once() -> None:
    costs = module_costs(exp_add_fusion().decoded(), "gpu")
    # add costs 3 FLOPs per element (no profile entry), f32 exp 86 (sm_86's profile)
    assert costs["fusion"].flops == 1024 * (3 + 86)
    assert costs["fusion"].bytes_accessed == 3 * 1024 * 4
    assert costs["fusion"].hbm_bytes == 3 * 1024 * 4


def test_cpu_rules_count_one_flop_per_element_and_transcendentals_apart() -> None:
    costs = module_costs(exp_add_fusion().decoded(), "cpu")
    assert costs["fusion"].flops == 1024  # the add; exp is a transcendental
    assert costs["fusion"].bytes_accessed == 3 * 1024 * 4


def test_a_broadcast_operand_is_read_once_and_the_output_written_once() -> None:
    m = Module()
    f = m.computation("fused", fusion=True)
    m.add(f, "s", "parameter", (F32, ()), parameter_number=0)
    m.add(f, "x", "parameter", (F32, (512, 8)), parameter_number=1)
    m.add(f, "b", "broadcast", (F32, (512, 8)), "s", dims=[])
    m.add(f, "mul", "multiply", (F32, (512, 8)), "b", "x")
    e = m.entry()
    m.add(e, "scale", "parameter", (F32, ()), parameter_number=0)
    m.add(e, "data", "parameter", (F32, (512, 8)), parameter_number=1)
    m.add(
        e,
        "scaled",
        "fusion",
        (F32, (512, 8)),
        "scale",
        "data",
        calls=["fused"],
        fusion_kind="kLoop",
    )
    cost = module_costs(m.decoded(), "gpu")["scaled"]
    assert cost.bytes_accessed == 4 + 2 * 4096 * 4
    assert cost.flops == 3 * 4096


def test_dot_flops_and_a_bf16_reduction_on_a_gpu() -> None:
    m = Module()
    add = m.computation("add")
    m.add(add, "x", "parameter", (F32, ()), parameter_number=0)
    m.add(add, "y", "parameter", (F32, ()), parameter_number=1)
    m.add(add, "sum", "add", (F32, ()), "x", "y")
    e = m.entry()
    m.add(e, "lhs", "parameter", (BF16, (64, 128)), parameter_number=0)
    m.add(e, "rhs", "parameter", (BF16, (128, 32)), parameter_number=1)
    m.add(e, "dot.1", "dot", (F32, (64, 32)), "lhs", "rhs", contracting=(1, 0))
    m.add(e, "zero", "constant", (F32, ()))
    m.add(e, "reduce.2", "reduce", (F32, (64,)), "dot.1", "zero", calls=["add"], dims=[1])
    module = m.decoded()
    costs = module_costs(module, "gpu")
    assert costs["dot.1"].flops == 2 * 64 * 32 * 128
    assert costs["dot.1"].bytes_accessed == 64 * 128 * 2 + 128 * 32 * 2 + 64 * 32 * 4
    # (inputs - outputs) applications of the 3-FLOP scalar add; GPU bytes: output, input and
    # the init value once per output element
    assert costs["reduce.2"].flops == 3 * (64 * 32 - 64)
    assert costs["reduce.2"].bytes_accessed == 64 * 4 + 64 * 32 * 4 + 64 * 4
    rows = {i.name: i for i in module.instructions()}
    from podscope.trace_parsers.hlo_module import compute_dtype

    assert compute_dtype(rows["dot.1"]) == "bf16"  # reads bf16, accumulates in f32


def test_a_legacy_cublas_gemm_is_costed_by_its_shapes_and_other_custom_calls_are_zero() -> None:
    """XProf shows no FLOPs for ``__cublas$gemm`` (the ROCm samples' GEMMs); PodScope reads
    its dimension numbers as XLA's GPU cost analysis does for a GEMM: 2·M·N·K, the scratch
    buffer not counted in the bytes. A custom call nobody can cost stays unknown (0)."""
    m = Module()
    e = m.entry()
    m.add(e, "a", "parameter", (BF16, (256, 128)), parameter_number=0)
    m.add(e, "b", "parameter", (BF16, (128, 64)), parameter_number=1)
    config = (
        '{"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],'
        '"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],'
        '"rhs_batch_dimensions":[]}}}'
    )
    m.add(
        e,
        "gemm",
        "custom-call",
        (13, ()),
        "a",
        "b",
        custom_call_target="__cublas$gemm",
        backend_config=config.encode(),
        tuple=[(BF16, (256, 64), 0), (6, (1024,), 0)],
    )
    m.add(
        e,
        "other",
        "custom-call",
        (BF16, (256, 64)),
        "a",
        custom_call_target="__my$kernel",
    )
    costs = module_costs(m.decoded(), "gpu")
    assert costs["gemm"].flops == 2 * 256 * 64 * 128
    assert costs["gemm"].bytes_accessed == (256 * 128 + 128 * 64 + 256 * 64) * 2
    assert costs["other"] == costs["other"].__class__(0, 0, 0, 0)
    assert "__cublas$gemm" in BEYOND_XPROF


def test_copies_between_memory_spaces_say_from_where_to_where() -> None:
    m = Module()
    e = m.entry()
    m.add(e, "x", "parameter", (F32, (1024,)), parameter_number=0, space=5)
    m.add(
        e,
        "cs",
        "copy-start",
        (13, ()),
        "x",
        tuple=[(F32, (1024,), 0), (F32, (1024,), 5), (8, (), 0)],
    )
    m.add(e, "cd", "copy-done", (F32, (1024,)), "cs")
    rows = {i.name: i for i in m.decoded().instructions()}
    assert copy_spaces(rows["cs"]) == (5, 0)  # prefetch: host memory → HBM
    assert copy_spaces(rows["cd"]) == (5, 0)


def test_a_malformed_module_has_unknown_costs_and_still_parses() -> None:
    m = Module()
    e = m.entry()
    m.add(e, "dot.1", "dot", (F32, (4, 4)))  # a dot without operands
    with pytest.raises(CostUnknown, match="malformed"):
        module_costs(m.decoded(), "gpu")
    rows = hlo_ops(_space_with(m), worker="w")
    assert rows["hlo_op"].tolist() == ["dot.1"] and rows["flops"].isna().all()


def test_a_module_built_to_be_quadratic_stops_at_its_budget() -> None:
    """A chain of elementwise ops, each also read by a slice: every op passes all its use
    roots to its operand, so the roots grow with the chain (XLA's own analysis is quadratic
    here too)."""
    n = 400
    m = Module()
    f = m.computation("fused", fusion=True)
    m.add(f, "p", "parameter", (F32, (8,)), parameter_number=0)
    prev = "p"
    for k in range(n):
        m.add(f, f"neg.{k}", "negate", (F32, (8,)), prev)
        m.add(f, f"slice.{k}", "slice", (F32, (8,)), f"neg.{k}")
        prev = f"neg.{k}"
    m.add(
        f, "out", "tuple", (13, ()), *[f"slice.{k}" for k in range(n)], tuple=[(F32, (8,), 0)] * n
    )
    e = m.entry()
    m.add(e, "x", "parameter", (F32, (8,)), parameter_number=0)
    m.add(
        e,
        "fusion",
        "fusion",
        (13, ()),
        "x",
        calls=["fused"],
        fusion_kind="kLoop",
        tuple=[(F32, (8,), 0)] * n,
    )
    module = m.decoded()
    assert module_costs(module, "gpu")["fusion"].flops > 0  # within the default budget
    with pytest.raises(CostUnknown, match="steps"):
        module_costs(module, "gpu", max_work=20 * n)


def _space_with(m: Module) -> bytes:
    b = SpaceBuilder()
    b.plane("/host:metadata", 0).event_meta(
        m.module.name, stats={"Hlo Proto": m.proto.SerializeToString()}
    )
    return b.bytes()


def test_the_work_on_a_module_is_bounded_by_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The quadratic module, 2,000 long (3 M steps of XLA's analysis, ~5 s of Python): parsed
    within WORK_PER_BYTE steps a byte, its costs unknown and its instructions still listed."""
    import podscope.trace_parsers.hlo_cost as hc
    from podscope.trace_parsers.hlo import WORK_PER_BYTE, WORK_PER_MODULE

    n = 2000
    m = Module()
    f = m.computation("fused", fusion=True)
    m.add(f, "p", "parameter", (F32, (8,)), parameter_number=0)
    prev = "p"
    for k in range(n):
        m.add(f, f"neg.{k}", "negate", (F32, (8,)), prev)
        m.add(f, f"slice.{k}", "slice", (F32, (8,)), f"neg.{k}")
        prev = f"neg.{k}"
    m.add(
        f, "out", "tuple", (13, ()), *[f"slice.{k}" for k in range(n)], tuple=[(F32, (8,), 0)] * n
    )
    e = m.entry()
    m.add(e, "x", "parameter", (F32, (8,)), parameter_number=0)
    m.add(e, "fusion", "fusion", (13, ()), "x", calls=["fused"], tuple=[(F32, (8,), 0)] * n)
    size = len(m.proto.SerializeToString())
    steps: list[int] = []
    real = hc._Shared

    class Counted(real):  # type: ignore[misc,valid-type]
        def charge(self, n: int) -> None:
            try:
                super().charge(n)
            finally:
                steps.append(self.work)

    monkeypatch.setattr(hc, "_Shared", Counted)
    rows = hlo_ops(_space_with(m), worker="w", rules="gpu")
    assert steps and max(steps) <= size * WORK_PER_BYTE + WORK_PER_MODULE + n
    assert set(rows["hlo_op"].astype(str)) == {"x", "fusion"} and rows["flops"].isna().all()


def _conv(kernel: int, out: int, stride: int) -> Module:
    """A 1-D convolution (batch, feature, width) of a ``kernel``-wide window and ``out`` outputs."""
    m = Module()
    e = m.entry()
    m.add(e, "x", "parameter", (F32, (1, 1, 4)), parameter_number=0)
    m.add(e, "k", "parameter", (F32, (1, 1, kernel)), parameter_number=1)
    m.add(e, "conv", "convolution", (F32, (1, 1, out)), "x", "k")
    i = e.instructions[-1]
    c = i.convolution_dimension_numbers
    c.input_batch_dimension, c.input_feature_dimension = 0, 1
    c.input_spatial_dimensions.append(2)
    c.kernel_spatial_dimensions.append(2)
    c.output_feature_dimension = 1
    c.output_spatial_dimensions.append(2)
    i.window.dimensions.add(size=kernel, stride=stride, window_dilation=1, base_dilation=1)
    return m


@pytest.mark.parametrize(
    ("kernel", "out", "stride"),
    [(10**12, 4, 1), (1_000_000, 1_000_000, 2)],
    ids=["a 10**12 kernel", "a 10**6 x 10**6 strided window"],
)
def test_a_convolutions_counting_is_charged_to_the_budget(
    kernel: int, out: int, stride: int
) -> None:
    """XLA counts a convolution's valid (kernel, output) pairs one by one: a 629-byte trace of
    such a module took 125 s of CPU in every parser. The loop is charged first."""
    m = _conv(kernel, out, stride)
    assert len(m.proto.SerializeToString()) < 700
    with pytest.raises(CostUnknown, match="steps"):
        module_costs(m.decoded(), "gpu")
    rows = hlo_ops(_space_with(m), worker="w")  # the file still opens, its costs unknown
    assert "conv" in rows["hlo_op"].tolist() and rows["flops"].isna().all()
    small = module_costs(_conv(3, 4, 1).decoded(), "gpu")["conv"].flops
    assert small == 2 * (4 + 3 + 2)  # XLA's count: kernel taps 0, 1, 2 meet 4, 3, 2 outputs


def test_a_dot_of_200k_contracting_dimensions_is_charged() -> None:
    m = Module()
    e = m.entry()
    m.add(e, "a", "parameter", (F32, (2, 2)), parameter_number=0)
    m.add(e, "dot", "dot", (F32, (2, 2)), "a", "a")
    e.instructions[-1].dot_dimension_numbers.lhs_contracting_dimensions.extend([1] * 200_000)
    with pytest.raises(CostUnknown, match="steps"):
        module_costs(m.decoded(), "gpu", max_work=10_000)


def test_sizes_past_any_device_are_costs_unknown_not_overflow() -> None:
    m = Module()
    e = m.entry()
    m.add(e, "a", "parameter", (F32, (2**62,) * 20), parameter_number=0)
    m.add(e, "neg", "negate", (F32, (2**62,) * 20), "a")
    with pytest.raises(CostUnknown, match="past any device"):
        module_costs(m.decoded(), "gpu")
    rows = hlo_ops(_space_with(m), worker="w")
    assert rows["hlo_op"].tolist() == ["a", "neg"]


def test_a_computation_that_calls_itself_or_nests_past_the_limit_is_refused() -> None:
    from podscope.trace_parsers.hlo_cost import MAX_NESTING

    looped = Module()
    body = looped.computation("body")
    looped.add(body, "p", "parameter", (F32, (4,)), parameter_number=0)
    looped.add(body, "again", "call", (F32, (4,)), "p")
    body.instructions[-1].called_computation_ids.append(body.id)  # itself
    e = looped.entry()
    looped.add(e, "x", "parameter", (F32, (4,)), parameter_number=0)
    looped.add(e, "c", "call", (F32, (4,)), "x", calls=["body"])
    with pytest.raises(CostUnknown, match="calls itself"):
        module_costs(looped.decoded(), "gpu")
    deep = Module()
    names = [f"c{i}" for i in range(2000)]
    for i, name in enumerate(reversed(names)):  # c1999 first: each calls the one after it
        comp = deep.computation(name)
        deep.add(comp, f"p{i}", "parameter", (F32, (4,)), parameter_number=0)
        if i:
            deep.add(comp, f"call{i}", "call", (F32, (4,)), f"p{i}", calls=[names[-i]])
    e = deep.entry()
    deep.add(e, "x", "parameter", (F32, (4,)), parameter_number=0)
    deep.add(e, "top", "call", (F32, (4,)), "x", calls=["c0"])
    with pytest.raises(CostUnknown, match=f"nested more than {MAX_NESTING}"):
        module_costs(deep.decoded(), "gpu")
    assert len(hlo_ops(_space_with(deep), worker="w")) > 2000  # listed, costs unknown


def test_an_instructions_text_stays_within_its_own_size() -> None:
    """10,000 operands that each name a 1,000-element tuple: the text shows the first few."""
    from podscope.trace_parsers.hlo_module import SHOWN, expression

    m = Module()
    e = m.entry()
    m.add(e, "t", "parameter", (13, ()), parameter_number=0, tuple=[(F32, (1,), 0)] * 1000)
    m.add(e, "wide", "tuple", (13, ()), *["t"] * 10_000, tuple=[(F32, (1,), 0)] * 10)
    wide = next(i for c in m.decoded().computations for i in c.instructions if i.name == "wide")
    text = expression(wide)
    assert len(text) < 20_000 and f"… {10_000 - SHOWN} more" in text and "… 968 more" in text
