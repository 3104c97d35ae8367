"""TFLite: sections, invokes and op tables on the synthetic samples and on constructed traces;
benchmark_model op profiles in both text layouts and CSV."""

from __future__ import annotations

import pytest

from podscope.analyzers.tflite import invokes, tflite_op_stats
from podscope.trace_parsers import TraceParseError, load
from podscope.trace_parsers.atrace import parse_atrace
from podscope.trace_parsers.tflite import parse_benchmark_model, section
from tests.conftest import shared_trace

HEADER = "# tracer: nop\n"


def line(ts_us: float, payload: str, tid: int = 2001, pid: int = 2000, task: str = "infer") -> str:
    return f"{task:>16}-{tid:<5} ({pid:>5}) [001] ...1 {ts_us / 1e6:.6f}: tracing_mark_write: {payload}\n"


def trace(*lines: str) -> bytes:
    return (HEADER + "".join(lines)).encode()


@pytest.mark.parametrize("name", ["synthetic_tflite_atrace.txt", "synthetic_tflite.pftrace"])
def test_synthetic_samples(name: str) -> None:
    ev = load(shared_trace("android", "synthetic", name), cache=False).events
    inv = invokes(ev)
    assert len(inv) == 2 and (inv["ops"] == 6).all() and set(inv["app_section"]) == {"runInference"}
    ops = tflite_op_stats(ev).set_index("op_type")
    assert ops.loc["CONV_2D", "count"] == 4 and ops.loc["CONV_2D", "per_invoke"] == 2.0
    assert set(ops.index) == {
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "AVERAGE_POOL_2D",
        "RESHAPE",
        "SOFTMAX",
    }
    conv = ev[ev["name"] == "CONV_2D@0/0"]
    assert (
        ev.loc[conv["parent"], "name"] == "Invoke@0/0"
    ).all()  # ops nest under the subgraph invoke


def test_several_invokes_two_subgraphs_delegate_unclosed_and_mid_invoke_start() -> None:
    data = trace(
        line(0, "B|2000|CONV_2D@7/0"),  # the capture starts inside an invoke: no enclosing invoke
        line(50, "E|2000"),
        line(60, "E|2000"),  # ...whose end comes without a begin
        *[
            ev_line
            for i in range(3)
            for ev_line in (
                line(100 + i * 1000, "B|2000|runInference"),
                line(110 + i * 1000, "B|2000|invoke@-1/0"),
                line(120 + i * 1000, "B|2000|Invoke@0/0"),
                line(130 + i * 1000, "B|2000|TfLiteXNNPackDelegate@0/0"),
                line(330 + i * 1000, "E|2000"),
                line(340 + i * 1000, "E|2000"),
                line(350 + i * 1000, "B|2000|Invoke@0/1"),
                line(360 + i * 1000, "B|2000|FULLY_CONNECTED@0/1"),
                line(400 + i * 1000, "E|2000"),
                line(410 + i * 1000, "E|2000"),
                line(420 + i * 1000, "E|2000"),
                line(430 + i * 1000, "E|2000"),
            )
        ],
        line(5000, "B|2000|invoke@-1/0"),  # unclosed at the end of the capture
        line(5010, "B|2000|SOFTMAX@3/1"),
        line(5030, "E|2000"),
    )
    frames = parse_atrace(data, worker="phone")
    n = frames.parse_notes.set_index("key")["value"].to_dict()
    assert n["unmatched_end"] == 1 and n["unclosed_begin"] == 1
    inv = invokes(frames.events)
    assert len(inv) == 4 and list(inv["ops"]) == [2, 2, 2, 1]
    ops = tflite_op_stats(frames.events, by_node=True).set_index(["op_type", "subgraph"])
    assert ops.loc[("TfLiteXNNPackDelegate", 0), "count"] == 3 and bool(
        ops.loc[("TfLiteXNNPackDelegate", 0), "delegate"]
    )
    assert ops.loc[("FULLY_CONNECTED", 1), "count"] == 3
    assert ops.loc[("CONV_2D", 0), "count"] == 1  # counted though no invoke encloses it
    assert ops.loc[("TfLiteXNNPackDelegate", 0), "avg_ns"] == 200_000


def test_section_names() -> None:
    assert section("CONV_2D@31/0") == ("CONV_2D", 31, 0, "op")
    assert section("invoke@-1/0").kind == "invoke"  # type: ignore[union-attr]
    assert section("Invoke@0/2").kind == "subgraph_invoke"  # type: ignore[union-attr]
    assert section("weird@name@3/1") == ("weird@name", 3, 1, "op")  # split with rpartition
    assert section("runInference") is None and section("x@a/b") is None


OLD_LAYOUT = """Operator-wise Profiling Info for Regular Benchmark Runs:
============================== Run Order ==============================
\t             [node type]\t  [start]\t  [first]\t [avg ms]\t     [%]\t  [cdf%]\t  [mem KB]\t[times called]\t[Name]
\t                 CONV_2D\t    0.000\t    4.269\t    3.611\t 24.557%\t 24.557%\t     0.000\t        1\t[MobilenetV1/Conv2d_0/Relu6]:0
\t       DEPTHWISE_CONV_2D\t    3.611\t    1.918\t    1.846\t 12.554%\t 37.111%\t     0.000\t        1\t[MobilenetV1/Conv2d_1_depthwise/Relu6]:1

============================== Top by Computation Time ==============================
"""
NEW_LAYOUT = """Operator-wise Profiling Info for Regular Benchmark Runs:
============================== Run Order ==============================
\t             [node type]\t  [first]\t [avg ms]\t     [%]\t  [cdf%]\t  [mem KB]\t[times called]\t[Name]
\t                 CONV_2D\t    4.269\t    3.611\t 24.557%\t 24.557%\t     0.000\t        1\t[MobilenetV1/Conv2d_0/Relu6]:0
\t Delegate/XNNPACK, fused\t    1.918\t    1.846\t 12.554%\t 37.111%\t     0.000\t        1\t[xnnpack]:1
"""
CSV_LAYOUT = """Operator-wise Profiling Info for Regular Benchmark Runs:
Run Order
node type,first,avg ms,%,cdf%,mem KB,times called,name
CONV_2D,4.269,3.611,24.557%,24.557%,0.000,1,[MobilenetV1/Conv2d_0/Relu6]:0
"Delegate/XNNPACK, fused",1.918,1.846,12.554%,37.111%,0.000,1,[xnnpack]:1
"""


@pytest.mark.parametrize("text", [OLD_LAYOUT, NEW_LAYOUT, CSV_LAYOUT], ids=["old", "new", "csv"])
def test_benchmark_model_layouts(text: str) -> None:
    table = parse_benchmark_model(text)
    assert len(table) == 2
    assert table.loc[0, "node_type"] == "CONV_2D" and table.loc[0, "avg_ms"] == 3.611
    assert table.loc[0, "percent"] == 24.557 and table.loc[1, "times_called"] == 1
    assert table.loc[1, "node_type"] in ("DEPTHWISE_CONV_2D", "Delegate/XNNPACK, fused")


def test_benchmark_model_without_table() -> None:
    with pytest.raises(TraceParseError, match="no 'Run Order'"):
        parse_benchmark_model("Inference timings in us: Init: 1, First inference: 2")
