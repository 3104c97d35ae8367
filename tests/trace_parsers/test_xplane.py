"""XPlane parser: conformance to the protobuf reference decode, nesting, stats, time base."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from podscope.trace_parsers import TraceParseError, load, validate, xplane
from podscope.trace_parsers.loader import merge, parse_files, worker_label
from podscope.trace_parsers.nesting import nest_columns, nest_events
from podscope.trace_parsers.proto import xplane_pb2 as xp
from podscope.trace_parsers.schema import PROMOTED_STATS, SCHEMA, TraceFrames
from podscope.trace_parsers.xplane import parse_xplane
from tests.analyzers.test_breakdown import worker_trace
from tests.conftest import real_xplanes
from tests.xspace_builder import SpaceBuilder


def reference_counts(data: bytes) -> dict[str, object]:
    """Counts read with the generated protobuf classes (the reference decoder)."""
    space = xp.XSpace()
    space.ParseFromString(data)
    timed = aggregates = 0
    stat_keys: Counter[str] = Counter()
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                if ev.WhichOneof("data") == "num_occurrences":
                    aggregates += 1
                    continue
                timed += 1
                for st in ev.stats:
                    stat_keys[names.get(st.metadata_id, "")] += 1
    return {
        "timed": timed,
        "aggregates": aggregates,
        "stat_keys": stat_keys,
        "planes": len(space.planes),
        "lines": sum(len(p.lines) for p in space.planes),
    }


@pytest.mark.parametrize("path", real_xplanes(), ids=lambda p: p.name[:40])
def test_real_captures_match_reference_decode(path: Path) -> None:
    data = path.read_bytes()
    frames = parse_xplane(data, worker="w", source=str(path))
    ref = reference_counts(data)
    assert len(frames.events) == ref["timed"]
    assert len(frames.aggregates) == ref["aggregates"]
    assert len(frames.planes) == ref["planes"]
    assert len(frames.lines) == ref["lines"]
    assert_every_stat_kept(frames, ref["stat_keys"])  # type: ignore[arg-type]
    assert (frames.events["self_ps"] <= frames.events["dur_ps"]).all()
    assert (frames.events["self_ps"] >= 0).all()


def assert_every_stat_kept(frames, stat_keys: Counter[str]) -> None:
    """Every event stat is either a typed column or a row of ``stats``."""
    long_counts = frames.stats["key"].value_counts()
    for key, n in stat_keys.items():
        if key in PROMOTED_STATS:
            assert frames.events[key].notna().sum() >= n, key
        else:
            assert long_counts.get(key, 0) == n, key


NESTED = [
    ("outer", 0, 100_000),
    ("a", 10_000, 20_000),
    ("g", 12_000, 3_000),
    ("b", 20_000, 30_000),
    ("c", 60_000, 60_000),
    ("next", 200_000, 5_000),
]


@pytest.mark.parametrize(
    "events",
    [NESTED, NESTED[::-1], NESTED[2:] + NESTED[:2]],
    ids=["in order", "reversed", "rotated"],
)
def test_nesting_parent_depth_and_self_time(events: list[tuple[str, int, int]]) -> None:
    """Whatever order the file has them in (the parser sorts only when it must)."""
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "thread")
    # outer [0, 100) with children a [10, 30) and c [60, 120) (outlasting its parent: clipped);
    # grandchild g [12, 15); b [20, 50) starts while a is open, so it nests under a (clipped).
    p.events(line, events)
    rows = parse_xplane(b.bytes(), worker="w").events
    assert rows["name"].tolist() == [n for n, _, _ in NESTED]  # rows in timeline order
    ev = rows.set_index("name")
    assert ev["depth"].to_dict() == {"outer": 0, "a": 1, "g": 2, "b": 2, "c": 1, "next": 0}
    parent_name = {
        n: (rows.loc[p_, "name"] if p_ >= 0 else None)
        for n, p_ in zip(rows["name"], rows["parent"], strict=True)
    }
    assert parent_name == {
        "outer": None,
        "a": "outer",
        "g": "a",
        "b": "a",
        "c": "outer",
        "next": None,
    }
    assert ev.loc["outer", "self_ps"] == 100_000 - 20_000 - 40_000
    assert ev.loc["a", "self_ps"] == 20_000 - 3_000 - 10_000
    assert ev.loc["next", "self_ps"] == 5_000
    assert (rows["self_ps"] >= 0).all()


def test_deep_nesting_beyond_the_initial_stack() -> None:
    """300 events each inside the previous one (the C pass grows its stack of open events)."""
    n = 300
    start = np.arange(n, dtype=np.int64)
    end = 1000 - start
    depth, parent, self_t = nest_columns(np.zeros(n, dtype=np.int64), start, end)
    assert depth.tolist() == list(range(n))
    assert parent.tolist() == [-1, *range(n - 1)]
    assert self_t.tolist() == [2] * (n - 1) + [1000 - 2 * (n - 1)]


def test_nest_events_in_any_row_order() -> None:
    """Rows already in timeline order take the fast path; shuffled rows the sorting one."""
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    p.events(p.line(1, "t1"), NESTED)
    p.events(p.line(2, "t2"), NESTED)
    ev = parse_xplane(b.bytes(), worker="w").events
    in_order = nest_events(ev)
    shuffled = nest_events(ev.sample(frac=1, random_state=3))
    pd.testing.assert_frame_equal(shuffled.loc[ev.index], in_order)
    assert in_order["depth"].tolist() == ev["depth"].tolist()
    assert (in_order["self_ps"] == ev["self_ps"]).all()


def test_stats_kinds_promoted_columns_and_metadata_stats() -> None:
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    p.event_meta("MatMul", stats={"flops": 1000})
    line = p.line(7, "tf_Compute")
    p.event(
        line,
        "MatMul",
        0,
        10,
        step_num=3,
        tf_op="dense/MatMul:MatMul",
        is_eager=1,
        correlation_id=2**63 + 5,
        shape="(32,64)",
        ratio=0.5,
        blob=b"\x00\x01\x02",
        kernel_details=("ref", "regs:32 grid:1,1,1"),
    )
    f = parse_xplane(b.bytes(), worker="w")
    e = f.events.iloc[0]
    assert e["step_num"] == 3 and bool(e["is_eager"])
    assert e["op_name"] == "dense/MatMul" and e["op_type"] == "MatMul"
    assert e["flops"] == 1000  # from the event's metadata stats
    assert e["kernel_details"] == "regs:32 grid:1,1,1"  # ref stat resolved
    s = f.stats.set_index("key")
    assert s.loc["shape", "str_value"] == "(32,64)"
    assert s.loc["ratio", "float_value"] == 0.5
    assert s.loc["blob", "kind"] == "bytes" and s.loc["blob", "int_value"] == 3
    assert f.metadata_stats["key"].tolist() == ["flops"]


def test_stats_keys_keep_only_those_stats_and_every_event_column(tmp_path: Path) -> None:
    b = SpaceBuilder()
    p = b.plane("/device:GPU:0")
    line = p.line(1, "Stream #1")
    for i in range(50):
        stats = {"hlo_op": f"fusion.{i % 3}", "shape": f"({i},)", "program_id": i % 2}
        p.event(line, "fusion", i * 10, 5, correlation_id=i, **stats)  # type: ignore[arg-type]
    full = parse_xplane(b.bytes(), worker="w")
    some = parse_xplane(b.bytes(), worker="w", stats_keys={"hlo_op", "program_id", "absent"})
    pd.testing.assert_frame_equal(full.events, some.events)
    want = full.stats[full.stats["key"].isin(["hlo_op", "program_id"])]
    pd.testing.assert_frame_equal(want.reset_index(drop=True), some.stats.reset_index(drop=True))
    assert len(want) == 100 and len(full.stats) == 150
    assert parse_xplane(b.bytes(), worker="w", stats_keys=()).stats.empty
    path = tmp_path / "w.xplane.pb"
    path.write_bytes(b.bytes())
    with pytest.raises(ValueError, match="cache=False"):  # partial frames are never cached
        load(path, stats_keys={"hlo_op"})


def test_promoted_numbers_of_any_stat_kind() -> None:
    """Integers exactly (above 2**53 too), doubles truncated, NaN and non-numeric kinds
    missing, from event stats and from event-metadata stats alike; an event stat overrides
    its metadata's."""
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    p.event_meta("meta_flops", stats={"flops": 2.0**70, "bytes_accessed": 12.9})
    p.event_meta("meta_nan", stats={"flops": float("nan"), "bytes_accessed": "many"})
    line = p.line(1, "t")
    p.event(line, "big", 0, 10, step_num=2**60 + 1, group_id=3)
    p.event(line, "double", 100, 10, step_num=7.9, group_id=-2.5)
    p.event(line, "nan", 200, 10, step_num=float("nan"), group_id=1e30)
    p.event(line, "text", 300, 10, step_num="five", group_id=("ref", "a name"))
    p.event(line, "meta_flops", 400, 10)
    p.event(line, "meta_flops", 500, 10, flops=5, bytes_accessed=float("nan"))
    p.event(line, "meta_nan", 600, 10)
    ev = parse_xplane(b.bytes(), worker="w").events
    na = None

    def col(c: str) -> list[object]:
        return [None if pd.isna(v) else int(v) for v in ev[c]]

    assert col("step_num") == [2**60 + 1, 7, na, na, na, na, na]
    assert col("group_id") == [3, -2, 2**63 - 1, na, na, na, na]
    assert col("flops") == [na, na, na, na, 2**63 - 1, 5, na]
    assert col("bytes_accessed") == [na, na, na, na, 12, na, na]


def test_aggregated_events_stay_off_the_timeline() -> None:
    b = SpaceBuilder()
    p = b.plane("/device:TPU:0")
    line = p.line(1, "XLA Ops")
    p.event(line, "fusion", 0, 10)
    agg = line.events.add()
    agg.metadata_id, agg.num_occurrences, agg.duration_ps = p.event_meta("all-reduce"), 12, 3400
    f = parse_xplane(b.bytes(), worker="w")
    assert f.events["name"].tolist() == ["fusion"]
    assert f.aggregates[["name", "num_occurrences", "dur_ps"]].values.tolist() == [
        ["all-reduce", 12, 3400]
    ]


@pytest.mark.parametrize("start", [1_700_000_000_000_000_000, 1.7e18], ids=["int", "double"])
def test_absolute_time_from_task_environment(start: float) -> None:
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "python", timestamp_ns=1_000)
    p.event(line, "x", 2_500_000, 10)
    b.plane("Task Environment", profile_start_time=start, peak_teraflops=312.5)
    f = parse_xplane(gzip.compress(b.bytes()), worker="h_1")
    assert f.events["start_ns"].tolist() == [1_700_000_000_000_000_000 + 1_000 + 2_500]
    assert f.workers["time_base"].tolist() == ["epoch"]
    assert f.workers[["host", "port"]].values.tolist() == [["h", 1]]


def test_relative_time_without_task_environment() -> None:
    f = load(real_or_skip("gpu_tf_multiworker_v100/34.83.195.179_6003.xplane.pb"), cache=False)
    assert f.workers["time_base"].tolist() == ["relative"]
    assert f.workers["worker"].tolist() == ["34.83.195.179_6003"]
    assert f.workers["port"].tolist() == [6003]


def real_or_skip(rel: str) -> Path:
    from tests.conftest import shared_trace

    return shared_trace("xplane", *rel.split("/"))


def test_multi_worker_merge_keeps_row_references(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for i, host in enumerate(["10.0.0.1_2222", "10.0.0.1_2223"]):
        b = SpaceBuilder()
        p = b.plane("/host:CPU")
        line = p.line(1, "t")
        p.event(line, "outer", 0, 100, step_num=i)
        p.event(line, "inner", 10, 10, note=f"w{i}")
        (run / f"{host}.xplane.pb").write_bytes(b.bytes())
    f = validate(load(run, cache=False))
    assert f.events["worker"].cat.categories.tolist() == ["10.0.0.1_2222", "10.0.0.1_2223"]
    inner = f.events[f.events["name"] == "inner"]
    assert f.events.loc[inner["parent"], "name"].tolist() == ["outer", "outer"]
    assert f.events.loc[inner["parent"], "worker"].tolist() == inner["worker"].tolist()
    assert f.events.loc[f.stats["event_row"], "worker"].astype(str).tolist() == [
        "10.0.0.1_2222",
        "10.0.0.1_2223",
    ]


@pytest.mark.parametrize("path", real_xplanes()[:3], ids=lambda p: p.name[:40])
def test_frames_conform_to_schema(path: Path) -> None:
    frames = validate(parse_xplane(path.read_bytes(), worker="w"))
    for name, frame in frames.frames():
        assert list(frame.columns) == list(SCHEMA[name])
        for col, dtype in SCHEMA[name].items():
            if dtype == "category":
                assert isinstance(frame[col].dtype, pd.CategoricalDtype)
    ev = frames.events
    assert ev["start_ns"].dtype == np.int64 and ev["dur_ps"].dtype == np.int64


def test_line_and_metadata_ids_are_int_categoricals(tmp_path: Path) -> None:
    """Ids repeat on every row: int64 categories with small codes, values kept exactly (a line
    id shared by two planes, a 64-bit id, an event whose metadata is missing from the table),
    through a multi-worker merge and a warm cache load."""
    run = tmp_path / "run"
    run.mkdir()
    for host, line_id in [("h_1", 7), ("h_2", 2**62 + 1)]:
        b = SpaceBuilder()
        for plane in ("/host:CPU", "/device:GPU:0"):
            p = b.plane(plane)
            p.event(p.line(line_id, "t"), "op", 0, 10)
        p.plane.lines[0].events.add(metadata_id=999, offset_ps=20, duration_ps=5)
        (run / f"{host}.xplane.pb").write_bytes(b.bytes())
    cold = load(run, cache_dir=tmp_path / "cache")
    warm = load(run, cache_dir=tmp_path / "cache")
    for f in (cold, warm):
        ev = validate(f).events
        for col in ("line_id", "metadata_id"):
            assert ev[col].cat.categories.dtype == np.int64
            assert ev[col].cat.codes.dtype == np.int8
        assert ev.groupby("worker", observed=True)["line_id"].unique().map(list).to_dict() == {
            "h_1": [7],
            "h_2": [2**62 + 1],
        }
        assert sorted(ev["metadata_id"].astype(np.int64)) == [1, 1, 1, 1, 999, 999]
    pd.testing.assert_frame_equal(warm.events, cold.events)


def test_metadata_lookup_matches_a_dict() -> None:
    """``_lookup`` (C, hashed) against a dict: absent keys, negative and 64-bit ids, duplicate
    table keys (the last row wins, as when protobuf parses a map), lookups through an owner."""
    from podscope.trace_parsers.xplane import _lookup

    rng = np.random.default_rng(7)
    pool = np.array([0, 1, 2, 5, -3, 2**62, -(2**63), 12345678901], dtype=np.int64)
    t_plane = rng.integers(0, 3, 400)
    t_ids = rng.choice(pool, 400)
    ref = {(int(p), int(i)): r for r, (p, i) in enumerate(zip(t_plane, t_ids, strict=True))}
    q_plane = rng.integers(0, 4, 5000).astype(np.int32)
    q_ids = rng.choice(np.append(pool, [7, -1]), 5000)
    want = [ref.get((int(p), int(i)), -1) for p, i in zip(q_plane, q_ids, strict=True)]
    assert _lookup(q_plane, q_ids, t_plane, t_ids).tolist() == want
    owner = rng.integers(0, len(q_plane), 5000).astype(np.int32)
    via_owner = [ref.get((int(q_plane[o]), int(i)), -1) for o, i in zip(owner, q_ids, strict=True)]
    assert _lookup(q_plane, q_ids, t_plane, t_ids, owner).tolist() == via_owner
    assert _lookup(q_plane[:0], q_ids[:0], t_plane, t_ids).tolist() == []
    assert _lookup(q_plane, q_ids, t_plane[:0], t_ids[:0]).tolist() == [-1] * 5000
    with pytest.raises(ValueError, match="owner out of range"):
        _lookup(q_plane[:3], q_ids[:1], t_plane, t_ids, np.array([3], dtype=np.int32))


def test_stats_follow_their_events_when_the_file_is_out_of_order() -> None:
    """A capture whose events are not in timeline order is sorted; the long stats' event_row
    must point at each stat's own event after the sort (and promoted stats land on it)."""
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "t")
    for name, off in [("late", 900), ("early", 100), ("mid", 500)]:
        p.event(line, name, off, 50, note=f"of {name}", step_num=off)
    f = validate(parse_xplane(b.bytes(), worker="w"))
    assert f.events["name"].tolist() == ["early", "mid", "late"]
    assert f.events["step_num"].tolist() == [100, 500, 900]
    rows = f.stats.set_index("str_value")["event_row"]
    for name in ("early", "mid", "late"):
        assert f.events.loc[rows[f"of {name}"], "name"] == name


def test_stat_kinds_are_the_decoders_codes() -> None:
    from podscope.trace_parsers import _xplane_fast
    from podscope.trace_parsers.xplane import KINDS, StatKind

    assert [k.value for k in StatKind] == list(range(len(StatKind)))
    assert {k.name: k.value for k in StatKind} == {
        n.removeprefix("KIND_"): getattr(_xplane_fast, n)
        for n in dir(_xplane_fast)
        if n.startswith("KIND_")
    }
    assert KINDS == ["none", "double", "uint64", "int64", "str", "bytes", "ref"]


def test_decoder_is_a_parameter_and_its_tables_are_named() -> None:
    """A test can wrap or replace the wire decoder; the builder reads the tables by name."""
    from podscope.trace_parsers import _xplane_fast
    from podscope.trace_parsers.errors import TraceParseError
    from podscope.trace_parsers.xplane import LineTable
    from podscope.trace_parsers.xplane_wire import _named_tables

    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    p.event(p.line(3, "tf_Compute", timestamp_ns=100), "MatMul", 0, 10)
    seen: list[dict[str, object]] = []

    def spy(data: bytes, max_rows: int) -> dict[str, object]:
        raw = _xplane_fast.decode_xspace(data, max_rows)
        seen.append(raw)
        return raw

    f = parse_xplane(b.bytes(), worker="w", decoder=spy)
    assert len(seen) == 1 and f.events["name"].tolist() == ["MatMul"]
    lines = _named_tables(_xplane_fast.decode_xspace(b.bytes()))["lines"]
    assert isinstance(lines, LineTable)
    assert (lines.id, lines.name, lines.timestamp_ns, lines.n_events) == (
        (3,),
        ("tf_Compute",),
        (100,),
        (1,),
    )

    def broken(data: bytes, max_rows: int) -> dict[str, object]:
        raise ValueError("offset 7: truncated varint")

    with pytest.raises(TraceParseError, match="offset 7: truncated varint"):
        parse_xplane(b.bytes(), worker="w", source="x.xplane.pb", decoder=broken)


def _by_value(frames: TraceFrames) -> dict[str, pd.DataFrame]:
    """Each frame with its categorical columns as their values (a set built at once orders
    its categories in its own way)."""
    return {
        name: frame.astype({c: object for c in frame.select_dtypes("category").columns})
        for name, frame in frames.frames()
    }


def _mixed_files(folder: Path) -> list[Path]:
    """Workers unlike each other, side by side: every real sample (GPU, ROCm, TPU with its
    XLA programs and breakdown stats), synthetic GPU and Python-only workers, epoch and
    relative time bases, a worker without events, and a truncated file."""
    folder.mkdir()
    for i, f in enumerate(real_xplanes()):
        (folder / f"real{i}_6000.xplane.pb").write_bytes(f.read_bytes())
    (folder / "10.0.0.1_6000.xplane.pb").write_bytes(worker_trace("10.0.0.1_6000", 6, gpu=True))
    (folder / "10.0.0.2_6000.xplane.pb").write_bytes(
        worker_trace("10.0.0.2_6000", 4, python_only=True)
    )
    for host, start in [("epoch_1", 1.7e18), ("relative_1", None)]:
        b = SpaceBuilder()
        p = b.plane("/host:CPU")
        line = p.line(3, "python", timestamp_ns=5_000)
        p.event(line, "train", 1_000, 900, step_num=0, note=host)
        if start:
            b.plane("Task Environment", profile_start_time=start, profile_stop_time=start + 9e6)
        (folder / f"{host}.xplane.pb").write_bytes(b.bytes())
    b = SpaceBuilder()
    b.plane("/host:CPU")
    (folder / "idle_1.xplane.pb").write_bytes(b.bytes())
    whole = worker_trace("10.0.0.9_6000", 6)
    (folder / "10.0.0.9_6000.xplane.pb").write_bytes(whole[: len(whole) // 2])
    return sorted(folder.glob("*.xplane.pb"))


def _each_merged(files: list[Path]) -> tuple[TraceFrames, list[Path]]:
    each, failed = [], []
    for f in files:
        try:
            each.append(parse_xplane(f.read_bytes(), worker=worker_label(f), source=str(f)))
        except TraceParseError:
            failed.append(f)
    return merge(each), failed


def test_files_built_together_equal_each_file_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's small workers are decoded one by one and their frames built at once: every
    frame equals the merge of each file's (values, row order, row references), the workers'
    events are counted, and the truncated file is a failure that names it."""
    files = _mixed_files(tmp_path / "s")
    expected, failed = _each_merged(files)
    assert [f.name for f in failed] == ["10.0.0.9_6000.xplane.pb"]
    got = parse_files(files)
    assert got.frames is not None
    for name, frame in _by_value(expected).items():
        pd.testing.assert_frame_equal(_by_value(got.frames)[name], frame, obj=name)
    kept = [f for f in files if f not in failed]
    assert [(w, f) for w, f, _ in got.workers] == [(worker_label(f), str(f)) for f in kept]
    counts = expected.events["worker"].value_counts()
    assert [n for _, _, n in got.workers] == [counts.get(w, 0) for w, _, _ in got.workers]
    assert [Path(e.path).name for e in got.failures] == ["10.0.0.9_6000.xplane.pb"]
    assert "10.0.0.9_6000.xplane.pb" in str(got.failures[0])
    # a set that does not validate is parsed file by file, and gives the same frames
    built = xplane.build_frames

    def refused(decoded, *args, **kwargs):  # type: ignore[no-untyped-def]
        if len(decoded) > 1:
            raise TraceParseError("<batch>", "xplane", "refused")
        return built(decoded, *args, **kwargs)

    monkeypatch.setattr(xplane, "build_frames", refused)
    again = parse_files(files)
    assert again.frames is not None and again.workers == got.workers
    for name, frame in _by_value(expected).items():
        pd.testing.assert_frame_equal(_by_value(again.frames)[name], frame, obj=name)
