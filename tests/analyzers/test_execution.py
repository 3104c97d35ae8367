"""The per-worker execution layer: in this process and on a real Dask cluster (a ``dask
scheduler`` and two ``dask worker`` processes on 127.0.0.1), equal to the whole-session
analysis frame for frame, and losing nothing when a worker, a trace or the scheduler fails."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from bench.synth import synth_xspace
from podscope.analyzers import execution
from podscope.analyzers.execution import RULE_FRAMES, ExecConfig, ExecutionError, run_session
from podscope.analyzers.session import SessionAnalysis
from podscope.trace_parsers import cache as cache_module
from podscope.trace_parsers import load, resolve
from tests.analyzers.test_breakdown import worker_trace
from tests.app.helpers import free_port
from tests.conftest import real_xplanes

#: Where a 2-process pool runs while other threads run in this process (``_pool_start``).
POOL_BESIDE_THREADS = "2 processes from a fork server"
REPO = Path(__file__).resolve().parents[2]
DASK = Path(sys.executable).with_name("dask")


def mixed_session(root: Path) -> Path:
    """Four workers: one late with input waits, one with a GPU, one Python-traced only."""
    root.mkdir(parents=True, exist_ok=True)
    for w, kw in [
        ("10.0.0.1_6000", {"gpu": True}),
        ("10.0.0.2_6000", {"offset_us": 300, "input_us": 50, "gpu": True}),
        ("10.0.0.3_6000", {}),
        ("10.0.0.4_6000", {"python_only": True}),
    ]:
        (root / f"{w}.xplane.pb").write_bytes(worker_trace(w, 12, **kw))  # type: ignore[arg-type]
    return root


FRAMES = ("steps", "methods", "aligned", "missing", "breakdown", "memory", "pod")
RULE_VIEWS = (*RULE_FRAMES, "ops_per_step", "device_firsts")


def _text_as_str(frame: pd.DataFrame) -> pd.DataFrame:
    """Categorical and string columns as ``str`` (one frame's text column is object, another's
    pandas' string dtype: the same values)."""
    text = frame.select_dtypes(["category", "string", "object"]).columns
    return frame.reset_index(drop=True).astype({c: str for c in text})


def assert_same(a: SessionAnalysis, b: SessionAnalysis) -> None:
    for name in (*FRAMES, *RULE_VIEWS):
        x, y = getattr(a, name), getattr(b, name)
        pd.testing.assert_frame_equal(
            _text_as_str(x), _text_as_str(y), check_categorical=False, obj=name
        )
    for by in ("op", "type", "kernel"):
        pd.testing.assert_frame_equal(
            a.op_table_for(by, None), b.op_table_for(by, None), check_categorical=False, obj=by
        )
    assert [asdict(f) for f in a.findings] == [asdict(f) for f in b.findings]


def test_in_process_equals_the_whole_session_analysis(tmp_path: Path) -> None:
    folder = mixed_session(tmp_path / "s")
    whole = SessionAnalysis(load(folder, cache=False))
    assert len(whole.breakdown) > 0 and whole.pod["worker"].nunique() == 4
    # a pool forks only while no other thread runs here (this test run may have some left)
    pool = "2 forked processes" if threading.active_count() == 1 else POOL_BESIDE_THREADS
    for processes, where in ((1, "in-process"), (2, pool)):
        run = run_session(resolve(folder), ExecConfig(cache=False, processes=processes))
        assert run.where == where and run.failures == ()
        assert_same(whole, run.analysis)
    assert_same(whole, SessionAnalysis.from_path(folder, cache_dir=str(tmp_path / "c")))


@pytest.mark.timeout(300)
def test_a_pool_beside_another_thread_does_not_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forked child inherits the locks other threads hold at that instant, held, with no
    thread to release them (a clean-clone run hung 600 s so, beside gRPC's and Dask's
    threads). Here a thread holds a lock every task takes: forked tasks would wait for it;
    tasks from the fork server have never seen it."""
    folder = mixed_session(tmp_path / "s")
    held, holding, release = threading.Lock(), threading.Event(), threading.Event()

    def hold() -> None:
        with held:
            holding.set()
            release.wait()

    def load_under_lock(*args: object, **kwargs: object) -> object:
        if not held.acquire(timeout=30):
            raise RuntimeError("a forked task waited on a lock another thread held at the fork")
        held.release()
        return load(*args, **kwargs)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    holding.wait()
    monkeypatch.setattr("podscope.analyzers.execution.load", load_under_lock)
    try:
        run = run_session(resolve(folder), ExecConfig(cache=False, processes=2))
    finally:
        release.set()
        holder.join()
    assert run.where == POOL_BESIDE_THREADS and run.failures == ()
    assert_same(SessionAnalysis(load(folder, cache=False)), run.analysis)


def test_a_second_run_reads_derived_shards_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = mixed_session(tmp_path / "s")
    config = ExecConfig(cache_dir=str(tmp_path / "cache"), processes=1)
    first = run_session(resolve(folder), config)
    entries = {p.parent for p in (tmp_path / "cache" / "derived").glob("*/*.arrow")}
    workers = {e: json.loads((e / "part.json").read_text())["workers"] for e in entries}
    # one task per worker here (one process: 4 batches of one), and the session's entry
    gathered = {e for e, w in workers.items() if len(w) == 4}
    shards = sorted(p for e in entries - gathered for p in e.glob("*.arrow"))
    assert len({p.parent for p in shards}) == 4 and any(
        p.name == "ops-kernel.arrow" for p in shards
    )
    assert len(gathered) == 1  # the session's parts, gathered: a warm run reads only these

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached worker was loaded again")

    monkeypatch.setattr("podscope.analyzers.execution.load", no_parse)
    monkeypatch.setattr("podscope.analyzers.execution.run_tasks", no_parse)
    second = run_session(resolve(folder), config)
    assert second.where == "the cache"
    assert_same(first.analysis, second.analysis)
    # without the gathered entry, the workers' shards answer, and no worker is parsed
    monkeypatch.undo()
    monkeypatch.setattr("podscope.analyzers.execution.load", no_parse)
    shutil.rmtree(next(iter(gathered)))
    assert_same(first.analysis, run_session(resolve(folder), config).analysis)
    assert_same(SessionAnalysis(load(folder, cache=False)), second.analysis)
    # a changed trace is a miss: its worker is parsed again (and only it)
    monkeypatch.undo()
    (folder / "10.0.0.3_6000.xplane.pb").write_bytes(worker_trace("10.0.0.3_6000", 5))
    third = run_session(resolve(folder), config)
    assert (third.analysis.steps["worker"] == "10.0.0.3_6000").sum() == 5
    # an unreadable shard is a miss too
    for p in (tmp_path / "cache" / "derived").glob("*/*.arrow"):
        p.write_bytes(b"ARROW1 not arrow")
    assert_same(third.analysis, run_session(resolve(folder), config).analysis)


def test_a_fresh_session_is_hashed_by_its_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session never seen is a miss without reading its files in the driver: the tasks
    hash them (in parallel, where the driver read a pod's 255 MB alone first), each once,
    and the session's entry is then written under the same keys."""
    folder = mixed_session(tmp_path / "s")
    config = ExecConfig(cache_dir=str(tmp_path / "cache"), processes=1)
    hashed: list[str] = []
    digest = cache_module._file_digest
    monkeypatch.setattr(cache_module, "_file_digest", lambda p: hashed.append(p.name) or digest(p))
    before_tasks: list[int] = []
    run_tasks = execution.run_tasks

    def counted(*args: object, **kwargs: object) -> object:
        before_tasks.append(len(hashed))
        return run_tasks(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(execution, "run_tasks", counted)
    first = run_session(resolve(folder), config)
    assert before_tasks == [0] and sorted(hashed) == sorted(f.name for f in resolve(folder))
    second = run_session(resolve(folder), config)
    assert second.where == execution.FROM_CACHE and len(hashed) == 4 and before_tasks == [0]
    assert_same(first.analysis, second.analysis)


def test_the_cli_and_the_dashboard_share_one_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whichever runs first serves the other: the dashboard's whole analysis answers the
    CLI's rules (``podscope stragglers``) without a task; the CLI's rules first, the
    dashboard's Pod Viewer part comes from the cache at once and only the parts the CLI did
    not compute (the op tables by op and by type) are run, the rules' frames read."""
    folder = mixed_session(tmp_path / "s")
    files = resolve(folder)
    config = ExecConfig(cache_dir=str(tmp_path / "cache"), processes=1)
    run_tasks = execution.run_tasks
    asked: list[frozenset[str]] = []

    def counted(
        task: object, units: object, config_: object, args: tuple, *a: object, **k: object
    ) -> object:
        asked.append(args[0])
        return run_tasks(task, units, config_, args, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(execution, "run_tasks", counted)
    whole = run_session(files, config)  # the dashboard's
    rules = run_session(files, config, frozenset({"rules"}))  # the CLI's
    assert rules.where == execution.FROM_CACHE and len(asked) == 1
    for name in RULE_VIEWS:
        pd.testing.assert_frame_equal(
            _text_as_str(getattr(rules.analysis, name)),
            _text_as_str(getattr(whole.analysis, name)),
            check_categorical=False,
            obj=name,
        )

    other = ExecConfig(cache_dir=str(tmp_path / "cache2"), processes=1)
    asked.clear()
    run_session(files, other, frozenset({"rules"}))  # the CLI first
    heads: list[execution.SessionRun] = []
    dashboard = run_session(files, other, first=heads.append)
    (head,) = heads
    assert head.where == execution.FROM_CACHE
    assert asked[1] == {"ops:op", "ops:type"}  # only what the CLI's rules did not hold
    assert_same(whole.analysis, dashboard.analysis)
    assert run_session(files, other).where == execution.FROM_CACHE  # whole now


#: Sessions whose workers differ: synthetic ones (``mixed``: GPU, late, Python-traced only), a
#: real ParameterServerStrategy capture (workers, parameter servers, a coordinator), a real TPU
#: and a real ROCm sample side by side, and (make verify: a minute and a half more) every real
#: sample side by side.
BATCH_SESSIONS = [
    "mixed",
    "ps_baseline",
    "real",
    pytest.param("every_real", marks=pytest.mark.long),
]
REAL_IN_MAKE_TEST = ("tpu_inference_2.xplane.pb", "traces__mi300__jax08_gemm__tw003.xplane.pb")


def batch_session(name: str, tmp_path: Path) -> Path:
    """The session ``name`` of ``BATCH_SESSIONS`` (the real ones skip when ../shared is
    absent)."""
    if name == "mixed":
        return mixed_session(tmp_path / "mixed")
    if name == "ps_baseline":
        return REPO / "tests" / "fixtures" / "ps_baseline"
    samples = [f for f in real_xplanes() if name == "every_real" or f.name in REAL_IN_MAKE_TEST]
    if not samples:
        pytest.skip("../shared/traces/xplane is absent")
    folder = tmp_path / name
    folder.mkdir()
    for i, f in enumerate(samples):
        shutil.copyfile(f, folder / f"host{i}_6000.xplane.pb")  # links out are refused
    return folder


@pytest.mark.parametrize("name", BATCH_SESSIONS)
def test_a_batch_of_workers_equals_a_task_per_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Small workers are reduced together (``batches``): every frame, op table and finding
    equals one task per worker's."""
    folder = batch_session(name, tmp_path)
    files = resolve(folder)
    config = ExecConfig(cache=False, processes=1, in_process_below=100)
    monkeypatch.setattr(execution, "batches", lambda f, _: [(str(x),) for x in f])
    alone = run_session(files, config)
    monkeypatch.setattr(execution, "batches", lambda f, _: [tuple(map(str, f))])
    together = run_session(files, config)
    assert len(together.analysis.worker_names) == len(files) > 1
    assert_same(alone.analysis, together.analysis)
    assert_same(SessionAnalysis(load(folder, cache=False)), together.analysis)


#: What the Pod Viewer reads of an analysis (``app.pages.pod_viewer``, ``analyzers.hosts``).
POD_VIEWS = ("pod", "stragglers", "roles", "slow_steps", "lateness", "devices", "pod_summary")


@pytest.mark.parametrize("name", BATCH_SESSIONS)
def test_the_pod_viewers_part_comes_first_and_the_whole_is_the_same(
    tmp_path: Path, name: str
) -> None:
    """``first``: the Pod Viewer's part of a pod is handed over before the rest is computed;
    what the Pod Viewer reads of it equals the whole analysis', it reads no events, and the
    whole equals one run's."""
    folder = batch_session(name, tmp_path)
    files = resolve(folder)
    whole = SessionAnalysis(load(folder, cache=False))
    config = ExecConfig(cache_dir=str(tmp_path / "cache"), processes=2, in_process_below=2)
    heads: list[execution.SessionRun] = []

    def first(run: execution.SessionRun) -> None:
        assert not heads  # once, before the rest
        heads.append(run)

    run = run_session(files, config, first=first)
    (head,) = heads
    assert head.analysis is not run.analysis and head.failures == run.failures
    assert head.analysis.trace_kind == whole.trace_kind
    for view in POD_VIEWS:
        pd.testing.assert_frame_equal(
            _text_as_str(getattr(head.analysis, view)),
            _text_as_str(getattr(whole, view)),
            check_categorical=False,
            obj=view,
        )
    with pytest.raises(RuntimeError, match="the Pod Viewer's part of the analysis"):
        head.analysis.findings  # noqa: B018 (a frame it does not hold: never the events)
    assert_same(whole, run.analysis)
    if name == "mixed":  # the whole is cached: read as it is, no first part
        again = run_session(files, config, first=first)
        assert again.where == execution.FROM_CACHE and len(heads) == 1
        assert_same(whole, again.analysis)


def _niceness(*_: object) -> int:
    return os.nice(0)


def test_the_rest_of_a_pod_runs_at_a_lower_priority() -> None:
    config = ExecConfig(cache=False, processes=2, in_process_below=2)
    mine = os.nice(0)
    done, _ = execution.run_tasks(_niceness, ["a", "b"], config, (), small_tasks=True)
    assert done == [mine, mine]
    done, _ = execution.run_tasks(
        _niceness, ["a", "b"], config, (), small_tasks=True, background=True
    )
    assert done == [min(mine + execution.BACKGROUND_NICE, 19)] * 2


def test_a_session_is_cut_into_batches_by_size(monkeypatch: pytest.MonkeyPatch) -> None:
    small = Path(__file__)
    # four batches per process while the files allow, at most BATCH_FILES files a batch
    assert [len(b) for b in execution.batches([small] * 512, 2)] == [64] * 8
    assert [len(b) for b in execution.batches([small] * 20, 2)] == [3] * 6 + [2]
    assert [len(b) for b in execution.batches([small] * 4, 2)] == [1] * 4
    # a batch holds BATCH_BYTES at most; a file past BIG_FILE_BYTES is a batch of its own, in
    # its place, even where the batch has room for it
    big = REPO / "tests" / "fixtures" / "ps_baseline" / "127.0.0.1_34313.xplane.pb.gz"
    assert big.stat().st_size > 2 * small.stat().st_size
    monkeypatch.setattr(execution, "BATCH_BYTES", big.stat().st_size)
    cut = execution.batches([small, small, big, *[small] * 5], 1)
    s, b = str(small), str(big)
    assert cut == [(s, s), (b,), (s, s), (s, s), (s,)]
    monkeypatch.setattr(execution, "BATCH_BYTES", 4 * big.stat().st_size)
    monkeypatch.setattr(execution, "BIG_FILE_BYTES", big.stat().st_size - 1)
    cut = execution.batches([small, small, big, *[small] * 5], 1)
    assert cut == [(s, s), (b,), (s, s), (s, s), (s,)]


def test_a_pod_of_small_files_runs_in_a_pool_and_a_big_worker_on_dask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``in_process_below`` files, small tasks run in a pool of this machine's processes
    (no cluster to start), even where small sessions run in the calling thread (the
    dashboard's ``fork=False``); a session with a file past ``BIG_FILE_BYTES`` goes to Dask."""
    folder = mixed_session(tmp_path / "s")
    files = resolve(folder)
    pool = "2 forked processes" if threading.active_count() == 1 else POOL_BESIDE_THREADS
    for fork in (True, False):
        config = ExecConfig(cache=False, processes=2, in_process_below=2, fork=fork)
        run = run_session(files, config)
        assert run.where == pool and run.failures == ()
        assert_same(SessionAnalysis(load(folder, cache=False)), run.analysis)
    units = execution.batches(files, 2)
    assert execution.small_units(units)
    monkeypatch.setattr(execution, "BIG_FILE_BYTES", min(f.stat().st_size for f in files) - 1)
    assert not execution.small_units(execution.batches(files, 2))
    started: list[str] = []

    class NoCluster(Exception):
        pass

    def local_cluster(**kwargs: object) -> None:
        started.append("LocalCluster")
        raise NoCluster  # where it would run is all this test asks

    monkeypatch.setattr("distributed.LocalCluster", local_cluster)
    with pytest.raises(NoCluster):
        run_session(files, ExecConfig(cache=False, processes=2, in_process_below=2))
    assert started == ["LocalCluster"]


def _die(*args: object) -> None:
    os._exit(9)  # as the kernel's OOM killer ends a process: no exception, no cleanup


def test_a_pool_process_that_dies_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ExecConfig(cache=False, processes=2, in_process_below=100)
    with pytest.raises(ExecutionError, match="a process of the pool died mid-run"):
        execution.run_tasks(_die, ["a", "b", "c"], config, ())


def test_findings_of_a_per_worker_run_never_load_the_events(tmp_path: Path) -> None:
    def no_events() -> None:
        raise AssertionError("the findings read the session's events")

    folder = mixed_session(tmp_path / "s")
    run = run_session(
        resolve(folder), ExecConfig(cache=False), frozenset({"rules"}), None, no_events
    )  # type: ignore[arg-type]
    judged = {f.rule_id: f for f in run.analysis.findings if f.applies}
    assert {"step_gaps", "straggler", "tiny_ops", "slow_iterator", "host_device_copies"} <= set(
        judged
    )
    whole = SessionAnalysis(load(folder, cache=False))
    assert [asdict(f) for f in run.analysis.findings] == [asdict(f) for f in whole.findings]
    # the timeline and event details read the one worker shown, from its own file
    index = run.analysis.timeline("10.0.0.2_6000")
    same = whole.timeline("10.0.0.2_6000")
    assert index.labels == same.labels and (index.start == same.start).all()
    row = int(index.rows[index.matching("MatMul")][0])
    details = run.analysis.event_details("10.0.0.2_6000", row)
    assert details["worker"] == "10.0.0.2_6000" and "MatMul" in str(details["name"])


def test_a_corrupt_trace_is_listed_and_the_others_kept(tmp_path: Path) -> None:
    folder = mixed_session(tmp_path / "s")
    (folder / "10.0.0.9_6000.xplane.pb").write_bytes(b"\x0a\xff\xff\xff\xff\x0f garbage")
    run = run_session(resolve(folder), ExecConfig(cache=False))
    (failed,) = run.failures
    assert failed.worker == "10.0.0.9_6000" and "10.0.0.9_6000.xplane.pb" in str(failed.error)
    assert set(run.analysis.steps["worker"]) == {f"10.0.0.{i}_6000" for i in (1, 2, 3, 4)}


def test_unknown_parts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown parts"):
        run_session(resolve(mixed_session(tmp_path / "s")), ExecConfig(), frozenset({"nope"}))


def test_config_reads_the_environment_and_flags_win() -> None:
    env = {"PODSCOPE_DASK_SCHEDULER": "tcp://10.0.0.5:8786", "PODSCOPE_DASK_PROCESSES": "3"}
    assert ExecConfig.from_env(env).scheduler == "tcp://10.0.0.5:8786"
    assert ExecConfig.from_env(env).processes == 3
    assert ExecConfig.from_env(env, scheduler="tcp://127.0.0.1:1").scheduler == "tcp://127.0.0.1:1"
    assert ExecConfig.from_env({}, scheduler=None).scheduler is None


class Cluster:
    """A Dask scheduler and ``n`` single-threaded workers as subprocesses on loopback."""

    def __init__(self, n: int, tmp: Path) -> None:
        self.address = f"tcp://127.0.0.1:{free_port()}"
        env = {**os.environ, "PYTHONPATH": str(REPO), "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
        log = (tmp / "dask.log").open("w")
        common = {"cwd": REPO, "env": env, "stdout": log, "stderr": subprocess.STDOUT}
        port = self.address.rsplit(":", 1)[1]
        self.scheduler = subprocess.Popen(
            [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", port, "--no-dashboard"],
            **common,  # type: ignore[call-overload]
        )
        worker = [str(DASK), "worker", self.address, "--nthreads", "1", "--no-dashboard"]
        worker += ["--host", "127.0.0.1", "--no-nanny"]  # a killed worker stays dead
        self.workers = [
            subprocess.Popen([*worker, "--name", f"w{i}"], **common)  # type: ignore[call-overload]
            for i in range(n)
        ]
        from distributed import Client

        with Client(self.address, timeout="30s") as c:
            c.wait_for_workers(n, timeout=60)

    def stop(self) -> None:
        # killed, not terminated: a terminated worker whose scheduler went first waited 10 s
        # for it, at every test's end; nothing of theirs is kept
        for p in [*self.workers, self.scheduler]:
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    pytest.importorskip("distributed")
    c = Cluster(2, tmp_path)
    try:
        yield c
    finally:
        c.stop()


@pytest.mark.cluster
@pytest.mark.slow
def test_a_real_cluster_gives_the_same_frames(cluster: Cluster, tmp_path: Path) -> None:
    folder = mixed_session(tmp_path / "s")
    (folder / "10.0.0.9_6000.xplane.pb").write_bytes(b"not an xspace at all")
    cache = str(tmp_path / "cache")
    local = run_session(resolve(folder), ExecConfig(cache_dir=cache + "-local"))
    remote = run_session(resolve(folder), ExecConfig(scheduler=cluster.address, cache_dir=cache))
    assert remote.where == cluster.address
    assert [f.worker for f in remote.failures] == ["10.0.0.9_6000"]
    assert remote.failures[0].error == local.failures[0].error  # the parser's own message
    assert_same(local.analysis, remote.analysis)
    again = run_session(resolve(folder), ExecConfig(scheduler=cluster.address, cache_dir=cache))
    assert_same(local.analysis, again.analysis)  # the second run reads the gathered parts
    assert again.where == "the cache" and again.failures == remote.failures
    # as a library user calls it, without the dashboard package
    lib = SessionAnalysis.from_path(folder, scheduler=cluster.address, cache_dir=cache)
    assert_same(local.analysis, lib)


@pytest.mark.cluster
@pytest.mark.slow
def test_a_killed_dask_worker_loses_nothing(cluster: Cluster, tmp_path: Path) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    data = synth_xspace(400)
    for i in range(8):
        (folder / f"10.0.1.{i}_6000.xplane.pb").write_bytes(data)
    victim = cluster.workers[1]

    def kill_after_first(done: int, total: int) -> None:
        if done == 1 and victim.poll() is None:
            victim.send_signal(signal.SIGKILL)

    run = run_session(
        resolve(folder),
        ExecConfig(scheduler=cluster.address, cache=False),
        frozenset({"steps", "ops:op"}),
        progress=kill_after_first,
    )
    assert victim.poll() is not None  # it died mid-run
    assert run.failures == ()
    assert sorted(run.analysis.steps["worker"].unique()) == [f"10.0.1.{i}_6000" for i in range(8)]
    assert run.analysis.steps.groupby("worker").size().eq(400).all()


@pytest.mark.cluster
@pytest.mark.slow
def test_a_scheduler_that_is_gone_is_one_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    folder = mixed_session(tmp_path / "s")
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    with pytest.raises(ExecutionError, match=f"Dask scheduler {address} unreachable"):
        run_session(resolve(folder), ExecConfig(scheduler=address, connect_timeout_s=2))
    assert time.monotonic() - started < 30
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "podscope",
            "ops",
            str(folder),
            "--scheduler",
            address,
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PODSCOPE_DASK_CONNECT_TIMEOUT": "2"},
    )
    assert out.returncode == 4, out.stderr
    assert (
        out.stderr.strip()
        .splitlines()[-1]
        .startswith(f"podscope: error: Dask scheduler {address} unreachable")
    )


@pytest.mark.cluster
@pytest.mark.slow
def test_a_scheduler_lost_mid_run_is_one_clear_error(
    cluster: Cluster, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    data = synth_xspace(400)
    for i in range(8):
        (folder / f"10.0.1.{i}_6000.xplane.pb").write_bytes(data)

    def kill_scheduler(done: int, total: int) -> None:
        if done == 1:
            cluster.scheduler.send_signal(signal.SIGKILL)

    started = time.monotonic()
    with pytest.raises(ExecutionError, match="lost the Dask cluster"):
        run_session(
            resolve(folder),
            ExecConfig(scheduler=cluster.address, cache=False),
            frozenset({"steps"}),
            progress=kill_scheduler,
        )
    assert time.monotonic() - started < 60
    err = capfd.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err


#: A process that imported this PodScope, then works in a folder that holds another
#: ``podscope/`` source tree (a user's checkout, or a broken copy), with a thread running (so
#: its pools start from a fork server, as the dashboard's do).
SHADOWED = """
import json, os, sys, threading
from pathlib import Path
from podscope.analyzers.execution import ExecConfig, analyze_path
session, shadow = sys.argv[1:3]
os.chdir(shadow)
threading.Thread(target=threading.Event().wait, daemon=True).start()
a = analyze_path(Path(session), None, ExecConfig(cache=False, in_process_below=2, processes=2))
print(json.dumps(sorted(str(w) for w in a.breakdown["worker"].unique())))
"""


def test_a_pool_imports_this_podscope_from_a_folder_that_holds_another(tmp_path: Path) -> None:
    """The fork server ran ``python -c`` in the working folder and imported its ``podscope/``:
    every pool process died on it, and the Pod Viewer said 'a process of the pool died'."""
    shadow = tmp_path / "checkout"  # another PodScope: its execution module has none of ours
    (shadow / "podscope" / "analyzers").mkdir(parents=True)
    for module in ("__init__.py", "analyzers/__init__.py", "analyzers/execution.py"):
        (shadow / "podscope" / module).write_text('"""Another PodScope."""\n')
    fixture = REPO / "tests" / "fixtures" / "ps_baseline"
    out = subprocess.run(
        [sys.executable, "-c", SHADOWED, str(fixture), str(shadow)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    here = SessionAnalysis(load(fixture, cache=False)).breakdown["worker"].unique()
    assert json.loads(out.stdout) == sorted(str(w) for w in here)


def test_fork_servers_started_at_once_leave_the_environment_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two uploads that start the fork server at once: each set PYTHONSAFEPATH around the
    start and put back what it had seen, the other's "1", which stayed; every later
    ``python -m tests.…`` of the test process then failed to find its folder."""
    import threading
    import time
    from multiprocessing import forkserver

    from podscope.analyzers import execution

    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    monkeypatch.setattr(forkserver, "ensure_running", lambda: time.sleep(0.2))
    threads = [threading.Thread(target=execution._start_fork_server) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert "PYTHONSAFEPATH" not in os.environ
