"""The op in its program (``trace_parsers.hlo_graph``): the module's HLO text with the op's
line marked, and the graph of instructions within a few hops, fusions opened on request,
bounded by ``MAX_NODES`` whatever the program."""

from __future__ import annotations

import pytest

from podscope.trace_parsers.hlo_graph import MAX_NODES, module_text, modules_of, neighbourhood
from tests.trace_parsers.test_hlo_cost import F32, Module, exp_add_fusion
from tests.trace_parsers.test_hlo_memory import Assignment


def test_the_module_text_marks_the_ops_line() -> None:
    m = exp_add_fusion().decoded()
    lines = module_text(m, "fusion")
    marked = [text for text, hit in lines if hit]
    assert marked == ["  ROOT %fusion = f32[1024]{0} fusion(f32[1024]{0} %a, f32[1024]{0} %b), "
                      "kind=kLoop, calls=%fused"]  # fmt: skip
    text = "\n".join(t for t, _ in lines)
    assert text.startswith("HloModule jit_step\n\nENTRY %main {")
    assert "%fused {" in text  # the fused computation follows


def test_the_graph_goes_in_data_flow_order_and_opens_a_fusion() -> None:
    m = exp_add_fusion().decoded()
    closed = neighbourhood(m, "fusion", hops=1)
    layer = dict(zip(closed.nodes["name"], closed.nodes["layer"], strict=True))
    assert layer == {"fusion": 1, "a": 0, "b": 0}
    assert sorted(closed.edges) == [("a", "fusion"), ("b", "fusion")]
    assert closed.nodes.loc[closed.nodes["name"] == "fusion", "is_op"].all()
    opened = neighbourhood(m, "fusion", hops=1, expand={"fusion"})
    inside = opened.nodes[opened.nodes["inside"] == "fusion"]
    assert len(inside) == len(m.computations[1].instructions) > 0
    root = m.computations[1].root.name
    assert (root, "fusion") in opened.edges  # the fused root gives the fusion its value
    lay = opened.nodes.set_index("name")["layer"]
    assert lay["p0"] < lay[root] < lay["fusion"]  # parameters, then the root, then its fusion


def test_hops_and_the_node_cap_bound_the_graph() -> None:
    """A chain of 10 instructions: 2 hops from the middle is 5 of them. An instruction with
    500 users: the graph stops at MAX_NODES and says how many it left out."""
    m = Module()
    e = m.entry()
    m.add(e, "p", "parameter", (F32, (8,)), parameter_number=0)
    prev = "p"
    for k in range(10):
        m.add(e, f"neg.{k}", "negate", (F32, (8,)), prev)
        prev = f"neg.{k}"
    for k in range(500):
        m.add(e, f"use.{k}", "negate", (F32, (8,)), "neg.9")
    d = m.decoded()
    two = neighbourhood(d, "neg.4", hops=2)
    assert set(two.nodes["name"]) == {f"neg.{k}" for k in range(2, 7)} and two.left_out == 0
    wide = neighbourhood(d, "neg.9", hops=1)
    assert len(wide.nodes) == MAX_NODES and wide.left_out == 501 - MAX_NODES + 1
    with pytest.raises(KeyError):
        neighbourhood(d, "nope")


def test_programs_are_keyed_by_their_unsigned_id() -> None:
    t = Assignment(n=1)
    modules = modules_of(t.capture())
    assert list(modules) == [1] and modules[1].name == "jit_step"
