"""PyTorch profiler (Kineto) traces as frames: the real GPU traces in ../shared/traces/kineto
checked against their own JSON, the file layouts torch.profiler writes, and what real and
hostile traces hold (decimal times, negative durations, missing headers, odd JSON)."""

from __future__ import annotations

import contextlib
import gzip
import json
import random
import re
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


@pytest.mark.parametrize(
    ("grid", "details"),
    [
        ("[80, 1, 1]", "grid:80,1,1"),
        ("[80,1,1]", "grid:80,1,1"),
        ("[ 2 , 3 ]", "grid:2,3"),
        ("[1, 2, 3, 4]", "grid:1,2,3"),
        ("[\n5,\t6]", "grid:5,6"),
        ("[2147483647]", "grid:2147483647"),
        ("[2147483648, 1]", None),  # beyond int32: not a launch dimension
        ("[1.0, 2]", None),
        ("[-1, 2]", None),
        ("[]", None),
        ('["1"]', None),
    ],
)
def test_a_grid_is_read_however_it_is_spelled(grid: str, details: str | None) -> None:
    """A kernel's grid as the file spells it (Kineto writes "[80, 1, 1]"; other writers
    differ): whole numbers below 2**31 are its launch dimensions, anything else none."""
    event = json.dumps(x("k", 1, 2, cat="kernel", device=0, stream=7, grid="GRID"))
    data = trace([]).replace(b"[]}", f"[{event}]}}".replace('"GRID"', grid).encode())
    ev = parse_kineto(data, worker="w").events
    got = ev["kernel_details"].iloc[0]
    assert (None if pd.isna(got) else got) == details


def _value(v: Any) -> tuple[str, Any]:
    """A JSON args value as ``stats`` holds it, from json.loads' reading: (kind, value); kind
    ``json``: its JSON text, as ``str``."""
    if isinstance(v, bool) or (isinstance(v, int) and -(2**63) <= v < 2**63):
        return "int", int(v)
    if isinstance(v, float):
        return "double", v
    if isinstance(v, str):
        return "str", v[:4096]
    return "json", v


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(9 if depth < 3 else 6)
    if pick == 0:
        return rng.choice(
            [0, -1, 2**63 - 1, -(2**63), 2**63, -(2**64), 10**40, rng.randrange(10**6)]
        )
    if pick == 1:
        return rng.choice([0.5, -1e-7, 1e300, 1.5e-320, rng.uniform(-1e9, 1e9), 2.0**53 + 1.0])
    if pick == 2:
        return rng.choice([True, False, None])
    if pick in (3, 4, 5):
        alphabet = 'ab"\\/\n\t\x01é€𝄞\u2028 '
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
    if pick in (6, 7):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(3))}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_reader_types_every_value_as_json_reads_it(seed: int) -> None:
    """The C reader against Python's json on random args, names and times, written with and
    without ASCII escapes and with whitespace: every stat, name and time as json.loads reads
    them (integers beyond int64 and containers as JSON text, decimals exact to the ns)."""
    rng = random.Random(seed)
    events = []
    for i in range(300):
        ts = rng.choice(
            [
                rng.randrange(10**15, 2 * 10**15),
                f"@@{rng.randrange(10**15)}.{rng.randrange(1000):03d}",
            ]
        )
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"op{i}" + rng.choice(["", "é", '"q"', "\\", "𝄞", "\u0000"]),
                "pid": 1,
                "tid": rng.randrange(3),
                "ts": ts,
                "dur": rng.randrange(1000),
                "args": {f"a{j}": _random_value(rng) for j in range(rng.randrange(5))},
            }
        )
    text = json.dumps(
        {"schemaVersion": 1, "traceEvents": events},
        ensure_ascii=seed % 2 == 0,
        indent=seed - 1 or None,
    )
    text = re.sub(r'"@@([0-9.]+)"', r"\1", text)  # the decimal times as numbers
    frames = parse_kineto(text.encode(), worker="w")
    doc = json.loads(text, parse_float=Decimal)
    ev = frames.events
    want = sorted((str(e["name"]), int(Decimal(e["ts"]) * 1000)) for e in doc["traceEvents"])
    assert sorted(zip(ev["name"].astype(str), ev["start_ns"], strict=True)) == want
    st = frames.stats[frames.stats["key"].astype(str).str.match(r"a\d$")]
    name_of = ev["name"].astype(str).to_numpy()
    got = {
        (name_of[r], k): (kind, s if kind == "str" else i if kind == "int" else f)
        for r, k, kind, i, f, s in zip(
            st["event_row"],
            st["key"].astype(str),
            st["kind"].astype(str),
            st["int_value"],
            st["float_value"],
            st["str_value"].astype(object),
            strict=True,
        )
    }
    expected = {
        (str(e["name"]), k): _value(v)
        for e in json.loads(text)["traceEvents"]
        for k, v in e["args"].items()
    }
    assert got.keys() == expected.keys()
    for key, (kind, value) in expected.items():
        if kind == "json":  # containers, null, integers past int64: the file's JSON text
            assert got[key][0] == "str" and json.loads(got[key][1]) == value, key
        else:
            assert got[key] == (kind, value), key


def test_strings_are_decoded_once_whatever_their_spelling() -> None:
    """Escapes, surrogate pairs, a lone surrogate and invalid UTF-8 (U+FFFD), and one name
    written two ways: one category."""
    raw = (
        b'{"schemaVersion": 1, "traceEvents": ['
        b'{"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1},'
        b'{"ph": "X", "name": "aten::\\u006dm", "pid": 1, "tid": 1, "ts": 3, "dur": 1},'
        b'{"ph": "X", "name": "\\ud834\\udd1e \\ud800 \xff", "pid": 1, "tid": 1, "ts": 5, "dur": 1}'
        b"]}"
    )
    ev = parse_kineto(raw, worker="w").events
    assert ev["name"].astype(str).tolist() == ["aten::mm", "aten::mm", "𝄞 \ufffd \ufffd"]
    assert list(ev["name"].cat.categories) == ["aten::mm", "𝄞 \ufffd \ufffd"]


def test_a_trace_cut_anywhere_is_a_typed_error() -> None:
    """A capture stopped mid-write: every prefix of a small trace (header, events, args,
    strings, numbers cut) is a TraceParseError; the whole one parses."""
    data = trace(
        [
            x(
                "aten::mm",
                1.5,
                2,
                cat="cpu_op",
                **{"External id": 3, "Input Dims": [[1, 2]], "s": "é\n"},
            )
        ],
        distributedInfo={"rank": 0},
    )
    for cut in range(len(data)):
        with pytest.raises(TraceParseError):
            parse_kineto(data[:cut], worker="w", source="cut.pt.trace.json")
    assert len(parse_kineto(data, worker="w").events) == 1


def test_the_last_member_of_a_name_wins_and_rows_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = (
        b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "a", "name": "b", "pid": 1,'
        b' "tid": 1, "ts": 1, "ts": 2, "dur": 1, "args": {"x": 1}, "args": {"y": 2}}]}'
    )
    frames = parse_kineto(raw, worker="w")
    assert frames.events[["name", "start_ns"]].astype(object).values.tolist() == [["b", 2000]]
    assert set(frames.stats["key"].astype(str)) == {"y", "cat"}
    monkeypatch.setenv("PODSCOPE_MAX_ROWS", "100")
    many = trace([x(f"e{i}", i, 1) for i in range(200)])
    with pytest.raises(TraceParseError, match="PODSCOPE_MAX_ROWS"):
        parse_kineto(many, worker="w", source="dense.pt.trace.json")


def _ranks(folder: Path) -> list[Path]:
    """PyTorch ranks unlike each other: every real sample (A100, V100, MI250, the pair of a
    128-rank job), a CPU-only rank without distributedInfo, a rank with skipped and flow
    events (parse notes the others lack), one with a GPU of another id and decimal times, one
    with no timed event (it fails), and a file that is not JSON."""
    files = []
    for i, path in enumerate(KINETO):
        files.append(folder / f"sample{i}.pt.trace.json.gz")
        files[-1].write_bytes(path.read_bytes())
    synthetic = {
        "cpu_only": trace(
            [x("ProfilerStep#3", 10, 50, cat="user_annotation"), x("aten::add", 12, 5)]
        ),
        "notes": trace(
            [x("a", 1, 2), {"ph": "s", "id": 1, "pid": 7, "tid": 1, "ts": 1}, 5],
            distributedInfo={"rank": 3, "world_size": 4, "backend": "nccl"},
        ),
        "gpu3": trace(
            [
                x("aten::mm", 10.25, 20.5, **{"External id": 1}),
                x(
                    "k",
                    40.125,
                    3,
                    cat="kernel",
                    device=3,
                    stream=20,
                    correlation=4,
                    grid=[2, 1, 1],
                    **{"External id": 1},
                ),
            ],
            deviceProperties=[{"id": 3, "name": "Other GPU", "numSms": 10}],
        ),
        "empty": trace(
            [{"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "m"}}]
        ),
    }
    for name, data in synthetic.items():
        files.append(folder / f"{name}.pt.trace.json")
        files[-1].write_bytes(data)
    files.append(folder / "cut.pt.trace.json")
    files[-1].write_bytes(trace([x("a", 1, 2)])[:-9])
    return files


def test_ranks_built_together_equal_each_rank_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's ranks are read one by one and their frames built once (``kineto.build_frames``):
    the frames equal ``merge`` of each rank's own, categories in the same order, rows
    shifted; the ranks that fail are named and the others kept."""
    from podscope.trace_parsers import kineto
    from podscope.trace_parsers.loader import merge, parse_files, worker_label

    files = _ranks(tmp_path)
    each = []
    for f in files:
        with contextlib.suppress(TraceParseError):
            each.append(parse_kineto(f.read_bytes(), worker=worker_label(f), source=str(f)))
    expected = merge(each)
    got = parse_files(files)
    assert got.frames is not None
    _same_frames(got.frames, expected)
    assert sorted(Path(e.path).name for e in got.failures) == [
        "cut.pt.trace.json",
        "empty.pt.trace.json",
    ]
    assert [n for _, _, n in got.workers] == [len(f.events) for f in each]
    # a set that does not validate is parsed rank by rank, and gives the same frames
    built = kineto.build_frames

    def refused(ranks, *args, **kwargs):  # type: ignore[no-untyped-def]
        if len(ranks) > 1:
            raise TraceParseError("<batch>", "kineto", "refused")
        return built(ranks, *args, **kwargs)

    monkeypatch.setattr(kineto, "build_frames", refused)
    again = parse_files(files)
    assert again.frames is not None and again.workers == got.workers
    _same_frames(again.frames, expected)


def _same_frames(got: Any, expected: Any) -> None:
    """Frame by frame, the same columns, dtypes and values; categoricals by their categories
    and codes (``assert_frame_equal`` boxes every element of one: a minute on these ranks)."""
    for name, frame in expected.frames():
        mine = getattr(got, name)
        assert list(mine.columns) == list(frame.columns) and len(mine) == len(frame), name
        for col in frame.columns:
            a, b = mine[col], frame[col]
            assert a.dtype == b.dtype, (name, col, a.dtype, b.dtype)
            if isinstance(b.dtype, pd.CategoricalDtype):
                assert a.cat.categories.tolist() == b.cat.categories.tolist(), (name, col)
                assert (a.cat.codes.to_numpy() == b.cat.codes.to_numpy()).all(), (name, col)
            else:
                pd.testing.assert_series_equal(a, b, obj=f"{name}.{col}")
