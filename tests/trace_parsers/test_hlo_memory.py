"""The memory viewer (``trace_parsers.hlo_memory``, ``podscope hlo-memory``): XProf's
``memory_viewer`` on every program of the shared XLA samples, and the heap replay's rules on
buffer assignments written by hand (sharing, buffers of indefinite lifetime, small buffers,
traces it must refuse, and its cost on a long trace)."""

from __future__ import annotations

import gc
import json
import resource
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from podscope.app.cli import cli
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.hlo_memory import (
    ALLOC,
    FREE,
    SHARE_WITH,
    SMALL_BUFFER_BYTES,
    memory_views,
)
from podscope.trace_parsers.hlo_module import hlo_proto_class
from tests.conftest import real_xplanes
from tests.trace_parsers.test_hlo_cost import F32, Module
from tests.xspace_builder import SpaceBuilder

MIB = 1 << 20
XLA_SAMPLES = [p for p in real_xplanes() if "gpu_tf_multiworker" not in str(p)]


class Assignment:
    """A program and its buffer assignment: one logical buffer per instruction (named as it),
    allocations, and one heap-simulator trace."""

    def __init__(self, n: int = 0, name: str = "jit_step") -> None:
        self.m = Module(name)
        self.main = self.m.entry()
        for k in range(n):
            self.m.add(self.main, f"op.{k}", "add", (F32, (4,)))
        self.proto = hlo_proto_class("HloProtoWithBuffers").FromString(
            self.m.proto.SerializeToString()
        )
        self.ba = self.proto.buffer_assignment
        self.trace = self.ba.heap_simulator_traces.add()

    def instruction(self, name: str, opcode: str = "add", dims: tuple[int, ...] = (4,)) -> None:
        self.m.add(self.main, name, opcode, (F32, dims))
        self.proto.hlo_module.CopyFrom(
            type(self.proto).FromString(self.m.proto.SerializeToString()).hlo_module
        )

    def buffer(self, name: str, size: int, allocation: int = 0, **flags: Any) -> int:
        lb = self.ba.logical_buffers.add(id=len(self.ba.logical_buffers), size=size)
        lb.defined_at.instruction_id = self.m.ids[name]
        found = [a for a in self.ba.buffer_allocations if a.index == allocation]
        a = found[0] if found else self.ba.buffer_allocations.add(index=allocation)
        for key, value in flags.items():
            setattr(a, key, value)
        a.size = max(a.size, size)
        a.assigned.add(logical_buffer_id=lb.id)
        return int(lb.id)

    def event(self, kind: int, buffer: int, at: str = "", share: int = 0) -> None:
        self.trace.events.add(
            kind=kind, buffer_id=buffer, instruction_name=at, share_with_canonical_id=share
        )

    def capture(self) -> bytes:
        b = SpaceBuilder()
        b.plane("/host:metadata", 0).event_meta(
            self.proto.hlo_module.name, stats={"Hlo Proto": self.proto.SerializeToString()}
        )
        return b.bytes()


def test_a_shared_buffer_is_counted_again_once_its_region_was_freed() -> None:
    """a (4 MiB) and b (2 MiB) allocated; a freed; c shares a's region (counted again, as a's
    size: c is a); b freed, c freed. Peak 6 MiB at the second event, a and b alive there."""
    t = Assignment()
    for name in ("a", "b", "c"):
        t.instruction(name, dims=(MIB,))
    a, b = t.buffer("a", 4 * MIB), t.buffer("b", 2 * MIB)
    c = t.buffer("c", 4 * MIB)
    for kind, buf, share in ((ALLOC, a, 0), (ALLOC, b, 0), (FREE, a, 0), (SHARE_WITH, c, a)):
        t.event(kind, buf, at=f"ev{len(t.trace.events)}", share=share)
    t.event(FREE, b, at="ev4")
    t.event(FREE, c, at="ev5")
    v = memory_views(t.capture(), worker="w")
    p = v.programs.iloc[0]
    assert (p["peak_heap_mib"], p["peak_position"], p["error"]) == (6.0, 1, "")
    assert list(v.buffers["instruction"]) == ["a", "b"]
    assert list(v.buffers["size_mib"]) == [4.0, 2.0]
    assert list(v.buffers["kind"]) == ["Temporary", "Temporary"]
    assert list(v.heap["heap_mib"]) == [4.0, 6.0, 2.0, 6.0, 4.0, 0.0]
    assert list(v.heap["instruction"]) == [f"ev{k}" for k in range(6)]


def test_buffers_of_indefinite_lifetime_lie_under_the_whole_heap() -> None:
    """A parameter allocation (its largest logical buffer shown, its size under every point of
    the heap), an output, a thread-local counter (no part of the heap: XProf leaves it out),
    and small temporaries summed into one row."""
    t = Assignment()
    for name in ("p", "q", "out", "i", "t", "s1", "s2"):
        t.instruction(name, opcode="parameter" if name in "pq" else "add")
    t.buffer("p", 8 * MIB, allocation=1, is_entry_computation_parameter=True)
    t.buffer("q", 1 * MIB, allocation=1)
    t.buffer("out", 2 * MIB, allocation=2, maybe_live_out=True)
    t.buffer("i", 4, allocation=3, is_thread_local=True)
    tmp = t.buffer("t", 3 * MIB)
    s1, s2 = t.buffer("s1", 100), t.buffer("s2", SMALL_BUFFER_BYTES - 1)
    for buf in (tmp, s1, s2):
        t.event(ALLOC, buf)
    v = memory_views(t.capture(), worker="w")
    p = v.programs.iloc[0]
    assert p["indefinite_mib"] == 10.0  # the parameter allocation (8) and the output (2)
    assert p["peak_heap_mib"] == pytest.approx(13.0 + (100 + SMALL_BUFFER_BYTES - 1) / MIB)
    assert list(v.buffers["instruction"]) == [
        "p",
        "out",
        "t",
        f"small (<{SMALL_BUFFER_BYTES} bytes)",
    ]
    assert list(v.buffers["kind"][:3]) == ["Parameter", "Output", "Temporary"]
    assert v.buffers["size_mib"].iloc[-1] == pytest.approx((100 + SMALL_BUFFER_BYTES - 1) / MIB)
    assert p["total_allocation_mib"] == pytest.approx(8 + 2 + 3)
    assert v.heap["heap_mib"].iloc[0] == 13.0  # the first temporary, over the 10 MiB


@pytest.mark.parametrize(
    "events, reason",
    [
        ([(ALLOC, 0, 0), (FREE, 0, 0), (FREE, 0, 0)], "freed more often"),
        ([(ALLOC, 0, 0), (SHARE_WITH, 1, 0), (SHARE_WITH, 0, 1)], "shares with itself"),
        ([(ALLOC, 0, 0), (7, 0, 0)], "unknown heap event kind 7"),
    ],
)
def test_a_trace_that_cannot_be_replayed_is_refused_for_its_program_only(
    events: list[tuple[int, int, int]], reason: str
) -> None:
    t = Assignment()
    t.instruction("a")
    t.instruction("b")
    t.buffer("a", MIB)
    t.buffer("b", MIB)
    for kind, buf, share in events:
        t.event(kind, buf, share=share)
    v = memory_views(t.capture(), worker="w")
    assert reason in v.programs["error"].iloc[0]
    assert v.buffers.empty and v.heap.empty


def test_a_long_trace_costs_linear_time() -> None:
    """Each of n buffers allocated after the others is a new peak: a copy of the live list per
    peak (XProf's way) would be quadratic. 4× the events stays within 6× the CPU time (the
    best of two runs each, the garbage collector off while timed: in a test process that
    holds other tests' objects, each of its full passes walks them all, and the larger run
    makes more of them — a CI run measured 6.4×)."""

    def cpu(n: int) -> float:
        t = Assignment(n)
        for k in range(n):
            t.event(ALLOC, t.buffer(f"op.{k}", 1 << 20))
        data = t.capture()
        best = float("inf")
        for _ in range(2):
            gc.collect()
            gc.disable()
            try:
                start = resource.getrusage(resource.RUSAGE_SELF).ru_utime
                v = memory_views(data, worker="w")
                best = min(best, resource.getrusage(resource.RUSAGE_SELF).ru_utime - start)
            finally:
                gc.enable()
            assert v.programs["buffers_at_peak"].iloc[0] == n
        return best

    small, big = cpu(5_000), cpu(20_000)
    assert big < 6 * max(small, 0.01), (small, big)


def test_a_corrupt_program_names_its_file() -> None:
    b = SpaceBuilder()
    b.plane("/host:metadata", 0).event_meta("jit_x", stats={"Hlo Proto": b"\x0a\xff\xff"})
    with pytest.raises(TraceParseError, match=r"bad\.xplane\.pb.*program"):
        memory_views(b.bytes(), worker="w", source="bad.xplane.pb")


def test_the_cli_shows_the_peak_and_its_buffers(tmp_path: Path) -> None:
    t = Assignment(name="jit_train_step")
    for name in ("a", "b"):
        t.instruction(name, dims=(MIB,))
    a, b = t.buffer("a", 4 * MIB), t.buffer("b", 2 * MIB)
    for kind, buf in ((ALLOC, a), (ALLOC, b), (FREE, a), (FREE, b)):
        t.event(kind, buf)
    (tmp_path / "h.xplane.pb").write_bytes(t.capture())
    run = CliRunner().invoke
    r = run(cli, ["hlo-memory", str(tmp_path), "--csv"])
    assert r.exit_code == 0, r.output
    head, *rows = r.output.strip().splitlines()
    assert head.startswith("worker,program_id,program,peak_heap_mib,order,instruction,size_mib")
    assert [row.split(",")[5] for row in rows] == ["a", "b"]
    r = run(cli, ["hlo-memory", str(tmp_path)])
    assert "jit_train_step: peak 6.0 MiB at heap position 1" in r.output
    r = run(cli, ["hlo-memory", str(tmp_path), "--view", "heap", "--csv"])
    assert [line.split(",")[5] for line in r.output.strip().splitlines()[1:]] == [
        "4.0",
        "6.0",
        "2.0",
        "0.0",
    ]
    r = run(cli, ["hlo-memory", str(tmp_path), "--program", "jit_other"])
    assert r.exit_code == 2 and "known: jit_train_step" in r.output


def test_the_cli_says_when_a_capture_has_no_program(tmp_path: Path) -> None:
    b = SpaceBuilder()
    b.plane("/host:CPU", 1)
    (tmp_path / "h.xplane.pb").write_bytes(b.bytes())
    r = CliRunner().invoke(cli, ["hlo-memory", str(tmp_path)])
    assert r.exit_code == 0 and "carries no XLA program" in r.output


def _xprof_memory(folder: Path, program: str) -> dict[str, Any]:
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data", reason="xprof not installed")
    raw, _ = convert.xspace_to_tool_data(
        [str(folder / "w.xplane.pb")],
        "memory_viewer",
        {"module_name": program, "memory_space": "0", "use_saved_result": False},
    )
    assert raw is not None, f"XProf has no memory view of {program}"
    return dict(json.loads(raw))


def _heap_object(o: dict[str, Any]) -> tuple[object, ...]:
    known = o.get("logicalBufferId", 0) >= 0
    return (
        int(o.get("logicalBufferId", 0)),
        round(o["logicalBufferSizeMib"], 9),
        o.get("instructionName", "") if known else "",
        o.get("shapeString", ""),
        o.get("groupName", "") if known else "",
        o.get("opCode", ""),
    )


@pytest.mark.slow
@pytest.mark.skipif(not XLA_SAMPLES, reason="../shared/traces/xplane absent")
@pytest.mark.parametrize("path", XLA_SAMPLES, ids=lambda p: p.name.split(".xplane")[0][-28:])
def test_every_program_equals_xprofs_memory_viewer(path: Path, tmp_path: Path) -> None:
    """Peak heap (MiB), the peak's position, the buffers alive there (id, size, instruction
    with its shape index, shape, kind, opcode; as a set: XProf lists the indefinite ones in a
    hash map's order), the totals, and the heap after every event, for every program of the
    sample and its main memory. XProf reads the programs from the ``.hlo_proto.pb`` files its
    tool listing writes beside the capture (one capture alone in its folder)."""
    convert = pytest.importorskip("xprof.convert.raw_to_tool_data", reason="xprof not installed")
    shutil.copy(path, tmp_path / "w.xplane.pb")
    convert.xspace_to_tool_names([str(tmp_path / "w.xplane.pb")])
    v = memory_views(path.read_bytes(), worker="w")
    assert len(v.programs) > 0 and (v.programs["error"] == "").all()
    for p in v.programs.itertuples():
        theirs = _xprof_memory(tmp_path, f"{p.program}({p.program_id})")
        assert theirs["peakHeapMib"] == pytest.approx(p.peak_heap_mib, rel=1e-12, abs=1e-12)
        assert theirs.get("peakHeapSizePosition", 0) == p.peak_position
        mine = v.buffers[v.buffers["program_id"] == p.program_id]
        ours = sorted(
            (
                int(r.logical_buffer_id),
                round(r.size_mib, 9),
                r.instruction if r.logical_buffer_id >= 0 else "",
                r.shape,
                r.kind if r.logical_buffer_id >= 0 else "",
                r.opcode,
            )
            for r in mine.itertuples()
        )
        assert ours == sorted(_heap_object(o) for o in theirs["maxHeap"]), p.program
        for key, col in (
            ("totalBufferAllocationMib", "total_allocation_mib"),
            ("indefiniteBufferAllocationMib", "indefinite_mib"),
            ("maybeLiveOutMib", "maybe_live_out_mib"),
            ("nonReusableMib", "non_reusable_mib"),
            ("peakUnpaddedHeapMib", "peak_unpadded_heap_mib"),
        ):
            assert theirs.get(key, 0) == pytest.approx(getattr(p, col), abs=1e-9), key
        heap = v.heap[v.heap["program_id"] == p.program_id]["heap_mib"].tolist()
        assert heap == pytest.approx(theirs.get("heapSizes", [])[1:], abs=1e-9)
