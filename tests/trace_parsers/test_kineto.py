"""PyTorch profiler (Kineto) traces as frames: the real GPU traces in ../shared/traces/kineto
checked against their own JSON, the file layouts torch.profiler writes, and what real and
hostile traces hold (decimal times, negative durations, missing headers, odd JSON)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from podscope.trace_parsers import TraceParseError, load
from podscope.trace_parsers.kineto import ANNOTATION_LINES, parse_kineto
from podscope.trace_parsers.loader import format_of
from podscope.trace_parsers.schema import KINETO_MARK
from tests.conftest import SHARED_TRACES

KINETO = sorted((SHARED_TRACES / "kineto").rglob("*.json.gz")) if SHARED_TRACES.exists() else []


def stat_of(frames: Any, key: str) -> dict[int, Any]:
    """Per event row, the value of its stat ``key``."""
    rows = frames.stats[frames.stats["key"] == key]
    values = rows["str_value"].astype(object).where(rows["kind"] == "str", rows["int_value"])
    return dict(zip(rows["event_row"], values, strict=True))


@pytest.mark.skipif(not KINETO, reason="public Kineto samples not present")
@pytest.mark.parametrize("path", KINETO, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_traces_become_the_frames_their_json_describes(path: Path) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    timed = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]
    assert format_of(path, path.read_bytes()[:65536]).name == "kineto"
    frames = load(path, cache=False)
    ev = frames.events
    # every timed event, each with its category, on the host or on its GPU's stream
    assert len(ev) == len(timed)
    cats = stat_of(frames, "cat")
    assert Counter(cats.values()) == Counter(e["cat"] for e in timed)
    gpu = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    on_device = ev["plane"].astype(str).str.startswith("/device:GPU:")
    assert sorted(on_device.to_numpy().nonzero()[0]) == sorted(
        r for r, c in cats.items() if c in gpu
    )
    devices = {f"/device:GPU:{e['args']['device']}" for e in timed if e["cat"] == "kernel"}
    assert set(ev.loc[on_device, "plane"].astype(str)) == devices
    kernels = ev[[cats[r] == "kernel" for r in range(len(ev))]]
    streams = {e["args"]["stream"] for e in timed if e["cat"] == "kernel"}
    assert set(kernels["line_id"].astype(int)) == streams
    assert set(kernels["line"].astype(str)) == {f"Stream #{s}" for s in streams}
    # steps, and the launch → kernel flow: each kernel's correlation is a host launch's
    steps = sorted(
        int(e["name"].split("#")[1]) for e in timed if e["name"].startswith("ProfilerStep#")
    )
    assert sorted(ev["step_num"].dropna().astype(int)) == steps
    # (all but those launched before the window: in v100_2ranks_r1, 546 of its 9,876 kernels
    # (and 614 of 15,632 GPU events), every one in the first 40 ms of its 745)
    host_corr = set(ev.loc[~on_device, "correlation_id"].dropna())
    kernel_corr = kernels["correlation_id"].dropna()
    launched = kernel_corr.isin(host_corr)
    assert len(kernel_corr) == len(kernels) and launched.mean() > 0.9
    early = kernels.loc[~launched.to_numpy(), "start_ns"] - ev["start_ns"].min()
    assert (early < 0.1 * (ev["start_ns"].max() - ev["start_ns"].min())).all()
    # times: exact µs → ns since the epoch; durations as given
    base = doc.get("baseTimeNanoseconds", 0)
    assert ev["start_ns"].min() == base + int(min(e["ts"] for e in timed) * 1000)
    assert ev["dur_ps"].sum() == int(sum(max(e["dur"], 0) for e in timed) * 1_000_000)
    # the header: the rank, the GPUs' properties
    ps = frames.plane_stats
    host = ps[ps["plane"] == "/host:CPU"].set_index("key")
    info = doc.get("distributedInfo")
    if info is not None:
        assert host.loc["rank", "int_value"] == info["rank"]
        assert host.loc["world_size", "int_value"] == info["world_size"]
    for device in doc.get("deviceProperties", []):
        plane = f"/device:GPU:{device['id']}"
        if plane in devices:
            mine = ps[ps["plane"] == plane].set_index("key")
            assert mine.loc["name", "str_value"] == device["name"]
            assert mine.loc["numSms", "int_value"] == device["numSms"]
    assert (frames.workers["time_base"] == "epoch").all()


def trace(events: list[dict[str, Any]], **header: Any) -> bytes:
    return json.dumps({"schemaVersion": 1, **header, "traceEvents": events}).encode()


def x(
    name: str, ts: Any, dur: Any, cat: str = "cpu_op", tid: Any = 1, **args: Any
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 7,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def test_decimal_times_are_read_exactly_and_relative_ones_get_the_base() -> None:
    raw = b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1712195495406752.8, "dur": 3.217}]}'
    ev = parse_kineto(raw, worker="w").events
    # a float64 of this µs time is off by 50 ns; the text is not
    assert ev["start_ns"].tolist() == [1712195495406752800] and ev["dur_ps"].tolist() == [3217000]
    base = 1711964646000000000
    rel = parse_kineto(trace([x("a", 12.5, 1)], baseTimeNanoseconds=base), worker="w")
    assert rel.events["start_ns"].tolist() == [base + 12500]
    assert rel.workers["time_base"].tolist() == ["epoch"]
    host = rel.plane_stats.set_index("key")
    assert host.loc[KINETO_MARK, "int_value"] == 1  # a decimal start: HTA rounds the times


def test_what_real_traces_hold_nests_and_is_counted() -> None:
    events = [
        x("ProfilerStep#3", 100, 50, cat="user_annotation"),
        x("aten::mm", 110, 20),
        x("aten::partial", 132, 30),  # runs past its parent's end: clipped
        x("negative", 140, -5),
        x("k", 120, 10, cat="kernel", tid="stream 7", device=0, stream=7, correlation=9),
        x("ann", 118, 30, cat="gpu_user_annotation", tid=7, device=0, stream=7),
        {"ph": "s", "cat": "ac2g", "id": 9, "ts": 111, "pid": 7, "tid": 1},
        {"ph": "i", "name": "[memory]", "ts": 112, "pid": 7, "tid": 1},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "python"}},
        "not an event",
    ]
    frames = parse_kineto(trace(events), worker="rank-0")  # no distributedInfo, no devices
    ev = frames.events.set_index("name")
    assert ev.loc["ProfilerStep#3", "step_num"] == 3
    assert ev.loc["aten::mm", "depth"] == 1 and ev.loc["aten::partial", "depth"] == 1
    assert ev.loc["ProfilerStep#3", "self_ps"] == (50 - 20 - 18) * 10**6  # children clipped
    assert ev.loc["negative", "dur_ps"] == 0
    assert ev.loc["k", "plane"] == "/device:GPU:0" and ev.loc["k", "line"] == "Stream #7"
    assert ev.loc["ann", "line_id"] == ANNOTATION_LINES + 7 and ev.loc["k", "depth"] == 0
    assert ev.loc["k", "correlation_id"] == 9
    assert ev.loc["aten::mm", "line"] == "python (1)"
    notes = dict(zip(frames.parse_notes["key"], frames.parse_notes["value"], strict=True))
    assert notes == {
        "negative_durations": 1,
        "flow_events": 1,
        "phase_i": 1,
        "metadata": 1,
        "skipped_events": 1,
    }
    assert frames.workers["worker"].tolist() == ["rank-0"]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"[1, 2]", "no traceEvents list"),
        (b'{"schemaVersion": 1, "traceEvents": {}}', "no traceEvents list"),
        (b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "ts": "x"}]}', "no timed events"),
        (b'{"schemaVersion": 1, "traceEvents": [' + b"[" * 100_000, "nested too deeply"),
        (b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "ts": 1e400}]}', "no timed events"),
        (
            b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "ts": 9' + b"9" * 400 + b"}]}",
            "no timed events",
        ),
    ],
)
def test_hostile_json_is_a_typed_error(data: bytes, reason: str) -> None:
    with pytest.raises(TraceParseError, match=reason):
        parse_kineto(data, worker="w", source="bad.pt.trace.json")


def test_odd_args_are_kept_as_text_and_numbers_as_numbers() -> None:
    events = [
        x("a", 1, 1, big=10**30, flag=True, ratio=0.5, dims=[[1, 2]], name_="s", nan=float("nan"))
    ]
    frames = parse_kineto(trace(events), worker="w")
    st = frames.stats.set_index("key")
    assert st.loc["big", "str_value"] == str(10**30) and st.loc["flag", "int_value"] == 1
    assert st.loc["ratio", "float_value"] == 0.5 and st.loc["dims", "str_value"] == "[[1, 2]]"
    assert st.loc["name_", "str_value"] == "s" and st.loc["nan", "str_value"] == "NaN"


def test_torch_profiler_file_layouts_make_a_run(tmp_path: Path) -> None:
    """tensorboard_trace_handler writes <worker>.<time>.pt.trace.json per rank into one folder;
    export_chrome_trace any name; both plain and gzipped: the folder is one run of ranks."""
    run = tmp_path / "run"
    run.mkdir()
    for rank in range(2):
        data = trace(
            [x("ProfilerStep#1", 10, 5, cat="user_annotation")],
            distributedInfo={"rank": rank, "world_size": 2},
        )
        name = f"host_{100 + rank}.1733421234567.pt.trace.json"
        (run / name).write_bytes(data if rank == 0 else gzip.compress(data))
        if rank == 1:
            (run / name).rename(run / (name + ".gz"))
    frames = load(run, cache=False)
    assert sorted(frames.workers["worker"]) == ["host_100.1733421234567", "host_101.1733421234567"]
    ranks = frames.plane_stats[frames.plane_stats["key"] == "rank"]
    assert sorted(ranks["int_value"]) == [0, 1]
    plain = tmp_path / "trace.json"  # export_chrome_trace("trace.json")
    plain.write_bytes(trace([x("a", 1, 1)]))
    assert format_of(plain, plain.read_bytes()).name == "kineto"
    chrome = tmp_path / "other.json"  # a Chrome trace without Kineto's header stays one
    chrome.write_bytes(json.dumps({"traceEvents": [x("a", 1, 1)]}).encode())
    assert format_of(chrome, chrome.read_bytes()).name == "chrome_json"


def test_ops_and_kernels_are_named_as_pytorch_names_them() -> None:
    """The op tables group by ``op_name``: a CPU op's own name, given to the launches and
    kernels that share its External id; a kernel's launch dimensions as kernel_details."""
    events = [
        x("aten::mm", 10, 20, **{"External id": 5}),
        x("cudaLaunchKernel", 12, 2, cat="cuda_runtime", correlation=9, **{"External id": 5}),
        x(
            "volta_sgemm_128x64_nn",
            40,
            30,
            cat="kernel",
            tid=7,
            device=0,
            stream=7,
            correlation=9,
            grid=[80, 1, 1],
            block=[128, 1, 1],
            **{"External id": 5, "registers per thread": 32, "shared memory": 0},
        ),
        x("k2", 80, 3, cat="kernel", tid=7, device=0, stream=7, grid=["x"], block=[1, 2, 3]),
    ]
    ev = parse_kineto(trace(events), worker="w").events.set_index("name")
    assert ev.loc["aten::mm", "op_name"] == "aten::mm" == ev.loc["aten::mm", "op_type"]
    assert ev.loc["cudaLaunchKernel", "op_name"] == "aten::mm"
    assert ev.loc["volta_sgemm_128x64_nn", "op_name"] == "aten::mm"
    assert (
        ev.loc["volta_sgemm_128x64_nn", "kernel_details"]
        == "regs:32 shm:0 grid:80,1,1 block:128,1,1"
    )
    assert ev.loc["k2", "kernel_details"] == "block:1,2,3" and pd.isna(ev.loc["k2", "op_name"])
