"""Shared fixtures: the public trace samples in ../shared/traces and real TF captures."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from podscope.reference_engine import cluster
from podscope.reference_engine.config import EngineConfig
from verify.run import ScenarioCapture, capture_scenario

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
FIXTURE_CACHE = REPO / "build" / "fixtures"
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def shared_trace(*parts: str) -> Path:
    """A file or folder of ../shared/traces; skips the test (with the reason) when absent."""
    path = SHARED_TRACES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"public trace samples not present: {path}")
    return path


def real_xplanes() -> list[Path]:
    """Every real .xplane.pb sample in ../shared/traces/xplane (empty list when absent)."""
    root = SHARED_TRACES / "xplane"
    return sorted(root.rglob("*.xplane.pb")) if root.is_dir() else []


def require_tf() -> None:
    pytest.importorskip("tensorflow", reason="TensorFlow (extra 'engine') is not installed")


@dataclass(frozen=True)
class Capture:
    """A real TF capture made by tests/tf_captures.py."""

    kind: str
    logdir: Path
    steps: int

    @property
    def files(self) -> list[Path]:
        return sorted(self.logdir.rglob("*.xplane.pb"))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``path`` (created): a fixture made on disk once, however
    many pytest-xdist workers ask for it at the same time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _make_capture(kind: str, steps: int) -> Capture:
    """Runs tests/tf_captures.py once per (kind, steps, script, TF version); cached on disk."""
    require_tf()
    import tensorflow as tf

    script = REPO / "tests" / "tf_captures.py"
    key = hashlib.sha1(
        f"{kind}-{steps}-{tf.__version__}".encode() + script.read_bytes()
    ).hexdigest()[:12]
    logdir = FIXTURE_CACHE / f"{kind}-{key}"
    with _locked(FIXTURE_CACHE / f"{kind}-{key}.lock"):
        if not list(logdir.rglob("*.xplane.pb")):
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
            subprocess.run(
                [sys.executable, str(script), kind, str(logdir), str(steps)],
                check=True,
                env=env,
                timeout=300,
            )
    return Capture(kind, logdir, steps)


@pytest.fixture(scope="session")
def loop_capture() -> Capture:
    return _make_capture("loop", 8)


@pytest.fixture(scope="session")
def fit_capture() -> Capture:
    return _make_capture("fit", 6)


@pytest.fixture(scope="session")
def fit_one_marker_capture() -> Capture:
    """tf-keras fit profiled as TensorBoard(profile_batch=(3, 5)) does: one whole marker."""
    return _make_capture("fit1", 8)


@pytest.fixture(scope="session")
def xla_capture() -> Capture:
    return _make_capture("xla", 6)


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def start_cluster(tmp_path: Path) -> Iterator[Callable[..., cluster.Manifest]]:
    """``start_cluster(cfg, workers=…, ps=…)`` → manifest; every cluster is stopped at teardown."""
    require_tf()
    started: list[cluster.Manifest] = []

    def start(cfg: EngineConfig, workers: int = 2, ps: int = 0) -> cluster.Manifest:
        run_dir = tmp_path / f"run{len(started)}"
        m = cluster.up(cfg, workers=workers, ps=ps, run_dir=run_dir, ready_timeout_s=240)
        started.append(m)
        return m

    yield start
    for m in started:
        cluster.down(m, grace_s=2)
        assert not [t.name for t in m.tasks if cluster.alive(t.pid)], "processes left after down"


@pytest.fixture(scope="session")
def scenario_capture(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ScenarioCapture]]:
    """``scenario_capture(workload, scenario, workers=2, ps=0, host_tracer_level=2,
    full_trace=False, **config)``: runs the cluster, waits for warm-up, captures 2 s of every
    task with the default (safe) plan, or with ``full_trace`` every worker host-traced (the
    tasks run with jemalloc preloaded), stops the cluster. Cached for the session: each
    scenario runs once however many tests use it, also across pytest-xdist's workers (they
    share the run's base folder: the first to ask captures, under a lock, and leaves the
    capture's description there for the others)."""
    require_tf()
    made: dict[tuple[object, ...], ScenarioCapture] = {}
    # the run's base folder: a worker's own is a folder of it
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    shared = shared / "scenarios"

    def make(
        workload: str,
        scenario: str,
        workers: int = 2,
        ps: int = 0,
        host_tracer_level: int = 2,
        full_trace: bool = False,
        **config: object,
    ) -> ScenarioCapture:
        if full_trace:  # every MWMS worker host-traced: safe with jemalloc only (README)
            if not Path(JEMALLOC).exists():
                pytest.skip(f"{JEMALLOC} absent (make test installs libjemalloc2)")
            config = {**config, "preload": JEMALLOC}
        cfg = EngineConfig(workload=workload, scenario=scenario, steps=None, **config)  # type: ignore[arg-type]
        # the same run however its options are spelled (defaults given or not)
        key = (cfg.to_json(), workers, ps, host_tracer_level, full_trace)
        if key in made:
            return made[key]
        name = hashlib.sha1(repr(key).encode()).hexdigest()[:12]
        described = shared / f"{name}.pickle"
        with _locked(shared / f"{name}.lock"):
            if described.exists():
                made[key] = pickle.loads(described.read_bytes())
            else:
                # a folder of its own: a failed try's stays as it was
                prefix = f"{workload}-{scenario}-h{host_tracer_level}-"
                root = Path(tempfile.mkdtemp(prefix=prefix, dir=shared))
                made[key] = capture_scenario(
                    cfg,
                    root,
                    workers=workers,
                    ps=ps,
                    host_tracer_level=host_tracer_level,
                    full_trace=full_trace,
                )
                described.write_bytes(pickle.dumps(made[key]))
        return made[key]

    yield make


#: Markers of the tests that take seconds to minutes each.
HEAVY = ("cluster", "browser", "tf", "slow")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with the most heavy tests (engine clusters, browsers, TF captures) first.

    pytest-xdist hands files out in this order (``--dist loadfile``): a heavy file left for the
    end keeps one process busy while the other has nothing to do. The order within a file, and
    the set of tests, stay as collected."""
    weight: dict[Path, int] = {}
    for item in items:
        heavy = any(item.get_closest_marker(m) for m in HEAVY)
        weight[item.path] = weight.get(item.path, 0) + heavy
    items.sort(key=lambda item: -weight[item.path])
