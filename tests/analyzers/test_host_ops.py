"""Op tables of host captures read without frames (``analyzers.host_ops``, the path of
``podscope ops --no-cache --csv``) against ``op_stats`` of the parsed frames: the CSV a user
gets is the same, byte for byte, on every host capture here; what the path does not read is
refused and answered by the frames."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from podscope.analyzers.host_ops import host_op_table, session_op_table, write_csv
from podscope.analyzers.session import SessionAnalysis
from podscope.app.cli_ops import ops_table
from podscope.trace_parsers import load
from podscope.trace_parsers.loader import resolve, worker_label
from tests.analyzers.test_breakdown import worker_trace
from tests.xspace_builder import SpaceBuilder

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
#: Every host capture session the tests hold (TensorFlow on CPUs: PS and MWMS runs of the
#: reference engine, a Python-traced one), and the bench's tf-keras capture when made.
SESSIONS = [
    FIXTURES / "ps_baseline",
    *sorted(p for p in (FIXTURES / "regressions").iterdir() if p.is_dir()),
    FIXTURES / "watched_straggler",
    ROOT / "build" / "bench" / "tf-fit-1000",
]


def _frames_csv(files: list[Path], by: str) -> str:
    """What ``podscope ops --csv`` printed before this path: op_stats of the frames."""
    out = io.StringIO()
    analysis = SessionAnalysis(load(files[0].parent if len(files) > 1 else files[0], cache=False))
    ops_table(analysis.op_table_for(by, None)).to_csv(out, index=False)
    return out.getvalue()


def _host_csv(files: list[Path], by: str, processes: int = 1) -> str | None:
    table = session_op_table([(f, worker_label(f)) for f in files], by, processes)
    if table is None:
        return None
    out = io.StringIO()
    write_csv(table, out)
    return out.getvalue()


@pytest.mark.parametrize("by", ["op", "type"])
@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.name)
def test_host_tables_equal_the_frames_tables_on_every_host_capture(session: Path, by: str) -> None:
    if not session.exists():
        pytest.skip(f"{session} not made here (make bench makes it)")
    files = resolve(session)
    got = _host_csv(files, by, processes=2)
    assert got is not None, "a host capture was refused"
    assert got == _frames_csv(files, by)
    assert got.count("\n") > 2


def _space(order: str = "sorted") -> bytes:
    """A host capture with what op tables must get right: nested ops (self time among ops
    only, runtime events between them), two ops of one interval (ties), a Python tracer
    event named like an op, TensorFlow's eager runtime events, an op on a line named as a
    derived line, an event whose metadata is missing, a second host plane, a JAX op whose name
    holds a comma and quotes, and events written out of time order (``order``)."""
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(7, "tf_Compute", timestamp_ns=1_000)
    rows = [
        ("train/dense/MatMul:MatMul", 0, 90_000),
        ("ExecutorState::Process", 1_000, 80_000),  # runtime: not an op
        ("train/dense/BiasAdd:BiasAdd", 5_000, 30_000),
        ("train/dense/BiasAdd:BiasAdd", 5_000, 30_000),  # the same interval twice
        ('jit(f)/a,"b"/add:', 40_000, 2_500),  # a JAX op: its name holds a comma and quotes
        ("$train.py:12 step", 50_000, 10_000),  # Python tracer, not an op
        ("EagerLocalExecute: Mul", 95_000, 4_000),
        ("Mul:Mul", 96_000, 1_000),
        ("train/dense/MatMul:MatMul", 120_000, 70_000),
    ]
    if order == "reversed":
        rows = rows[::-1]
    p.events(line, rows)
    derived = p.line(8, "TensorFlow Ops", timestamp_ns=1_000)
    p.events(derived, [("train/dense/MatMul:MatMul", 0, 90_000)])
    other = p.line(9, "tf_data", timestamp_ns=900)
    p.events(other, [("Iterator::Root:Iterator", 10, 500), ("Iterator::Root:Iterator", 600, 40)])
    ghost = other.events.add()
    ghost.metadata_id, ghost.offset_ps, ghost.duration_ps = 999, 700, 10  # no such metadata
    q = b.plane("/host:CPU:1", plane_id=1)
    q.events(q.line(1, "pool", timestamp_ns=2_000), [("Sum:Sum", 0, 5_000)])
    return b.bytes()


@pytest.mark.parametrize("order", ["sorted", "reversed"])
@pytest.mark.parametrize("by", ["op", "type"])
def test_host_tables_equal_the_frames_tables_on_what_real_captures_hold(
    tmp_path: Path, order: str, by: str
) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    for w in ("w_b", "w_a"):  # named against the files' order: sorted by worker
        (folder / f"{w}.xplane.pb").write_bytes(_space(order))
    files = resolve(folder)
    got = _host_csv(files, by)
    assert got is not None and got == _frames_csv(files, by)
    assert "$train" not in got and ('"jit(f)/a,""b""/add"' in got) == (by == "op")
    assert got.index("\nw_a,") < got.index("\nw_b,")


def test_what_the_host_path_does_not_read_is_refused(tmp_path: Path) -> None:
    """Device planes, the stats that rename or cost an op, a timeline split in two lines:
    None (the frames' path answers)."""
    gpu = tmp_path / "gpu.xplane.pb"
    gpu.write_bytes(worker_trace("gpu", 4, gpu=True))
    assert host_op_table(gpu, "gpu", "op") is None
    for stat in ("tf_op", "is_eager", "flops", "bytes_accessed"):
        b = SpaceBuilder()
        p = b.plane("/host:CPU")
        p.event(p.line(1, "tf_Compute"), "MatMul:MatMul", 0, 10, **{stat: 1})
        f = tmp_path / f"{stat}.xplane.pb"
        f.write_bytes(b.bytes())
        assert host_op_table(f, "w", "op") is None, stat
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    for _ in range(2):
        p.event(p.line(1, "tf_Compute"), "MatMul:MatMul", 0, 10)
    f = tmp_path / "split.xplane.pb"
    f.write_bytes(b.bytes())
    assert host_op_table(f, "w", "op") is None


def _cli(*args: str, cache: Path | None = None) -> tuple[str, bool]:
    """``podscope ops …`` in a fresh process (its cache in ``cache``): its stdout, and whether
    it imported pandas."""
    script = (
        "import sys\nfrom podscope.app.cli import cli\n"
        "try:\n    cli(sys.argv[1:], standalone_mode=False)\n"
        "finally:\n    print('pandas' in sys.modules, file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, "ops", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "100"}
        | ({"PODSCOPE_CACHE_DIR": str(cache)} if cache else {}),
    )
    return out.stdout, out.stderr.strip().splitlines()[-1] == "True"


def test_the_cli_reads_host_sessions_without_pandas_and_others_with_frames(
    tmp_path: Path,
) -> None:
    session = FIXTURES / "ps_baseline"
    csv, pandas = _cli(str(session), "--no-cache", "--csv")
    assert not pandas and csv == _frames_csv(resolve(session), "op")
    one, _ = _cli(str(session), "--no-cache", "--csv", "--worker", "127.0.0.1_45131")
    assert one.splitlines()[0] == csv.splitlines()[0]
    assert one.splitlines()[1:] == [r for r in csv.splitlines() if r.startswith("127.0.0.1_45131,")]
    # the table view: as the frames' path (the cache's) shows it
    shown, pandas = _cli(str(session), "--no-cache", "--top", "30")
    assert pandas and shown == _cli(str(session), "--top", "30", cache=tmp_path / "cache")[0]
    assert "EagerService" in shown
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "cpu.xplane.pb").write_bytes(_space())
    (mixed / "gpu.xplane.pb").write_bytes(worker_trace("gpu", 4, gpu=True))
    csv, pandas = _cli(str(mixed), "--no-cache", "--csv")
    assert pandas and csv == _frames_csv(resolve(mixed), "op")
