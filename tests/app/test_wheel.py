"""The package as users install it: one wheel, one import package (``podscope``), installed into
fresh virtual environments beside a user's own ``app`` and ``collectors``, with the whole
dashboard, with the base install only (no dash, plotly, dask or waitress), and with just what
the agent imports (grpcio, protobuf, hpack). No compiler is on the PATH of any of them.

The environments take their third-party packages from this test's own environment (a folder of
links, so no download), leaving out the packages a role does not install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.app.helpers import free_port, get_when_up

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "ps_baseline"
pytestmark = pytest.mark.slow

#: What each install leaves out of this environment's packages (import names, prefixes).
DASHBOARD_AND_DASK = ("dash", "plotly", "_plotly", "waitress", "dask", "distributed")
ENGINE = ("tensorflow", "tf_keras", "keras", "jax")
#: What the agent imports, all of it (the agent-only install): grpcio (with typing_extensions,
#: which grpcio requires), protobuf and hpack.
AGENT_ONLY = ("grpc", "grpcio", "typing_extensions", "google", "protobuf", "hpack")
PIP = (sys.executable, "-m", "pip")
NO_COMPILER = {"PATH": "/nonexistent", "CC": "/nonexistent/cc"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(REPO)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (built,) = dist.glob("podscope-*.whl")
    return built


def fresh_venv(root: Path, wheel: Path, *, leave_out: tuple[str, ...] = (), only=()) -> Path:
    """A new venv at ``root`` with the wheel installed (no compiler on the PATH) and this
    environment's packages, less ``leave_out`` (or only ``only``), linked in; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    deps = root / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name.lower()
        if name.endswith(".pth") or name.startswith(("podscope", "__editable__")):
            continue
        if name.startswith(leave_out) or (only and not name.startswith(only)):
            continue
        (deps / entry.name).symlink_to(entry)
    subprocess.run(
        [*PIP, "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
        env={**os.environ, **NO_COMPILER},
    )
    (site / "deps.pth").write_text(f"{deps}\n")
    return python


def run(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python args`` in ``cwd`` with a cache of its own there: a session this machine's
    cache holds whole is answered without starting a task (nor a scheduler)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return subprocess.run(
        [str(python), *args],
        cwd=cwd,
        env={**env, **NO_COMPILER, "PODSCOPE_CACHE_DIR": str(cwd / "podscope-cache")},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_wheel_is_one_package_with_assets_protos_and_readers(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"podscope", "podscope-0.1.0.dist-info"}, sorted(top)
    for expected in (
        "podscope/assets/bootstrap.min.css",
        "podscope/assets/podscope.css",
        "podscope/assets/plotly-podscope.min.js",  # without it the pages load Dash's plotly.js
        "podscope/assets/PLOTLY_LICENSE",
        "podscope/collectors/proto/trace_export_pb2.py",
        "podscope/trace_parsers/proto/xplane_pb2.py",
        "podscope/app/pages/pod_viewer.py",
        "podscope/py.typed",
    ):
        assert expected in names, expected
    for ext in ("_xplane_fast", "_ftrace_fast", "_kineto_fast", "_column_kernels"):
        assert any(
            n.startswith(f"podscope/trace_parsers/{ext}") and n.endswith(".so") for n in names
        ), ext


USER_CODE = """
import json, sys
import app, collectors, podscope
from podscope.app.cli import main
frames = podscope.load(sys.argv[1])
analysis = podscope.SessionAnalysis(frames)
print(json.dumps({
    "app": app.WHO, "collectors": collectors.WHO, "podscope": podscope.__file__,
    "version": podscope.__version__, "workers": sorted(frames.workers["worker"]),
    "steps": len(analysis.steps), "start": callable(podscope.agent.start),
}))
"""


def test_wheel_in_a_fresh_venv_beside_user_packages_app_and_collectors(
    wheel: Path, tmp_path: Path
) -> None:
    python = fresh_venv(tmp_path / "venv", wheel)
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    top = sorted(p.name for p in site.iterdir() if p.name not in ("deps.pth", "bin"))
    assert top == ["podscope", "podscope-0.1.0.dist-info"], top
    project = tmp_path / "project"
    for name in ("app", "collectors"):
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text(f"WHO = 'the user\\'s {name}'\n")
    out = run(python, project, "-c", USER_CODE, str(FIXTURE))
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["app"] == "the user's app" and seen["collectors"] == "the user's collectors"
    assert seen["podscope"].startswith(str(site)) and seen["version"] == "0.1.0"
    assert len(seen["workers"]) == 4 and seen["steps"] > 0 and seen["start"]
    version = run(python, project, "-m", "podscope", "--version")
    assert version.stdout.strip() == "podscope 0.1.0", version

    port = free_port()
    proc = subprocess.Popen(
        [
            str(python),
            "-m",
            "podscope",
            "serve",
            "--logdir",
            str(tmp_path / "x"),
            "--port",
            str(port),
        ],
        cwd=project,
        env={**os.environ, **NO_COMPILER, "PODSCOPE_CACHE_DIR": str(tmp_path / "cache")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        css = get_when_up(f"http://127.0.0.1:{port}/assets/bootstrap.min.css", proc)
        assert b"Bootstrap" in css[:200]
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
        assert "bootstrap.min.css" in page and "cdn" not in page.lower()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_base_install_parses_and_analyses_and_says_which_extra_serve_needs(
    wheel: Path, tmp_path: Path
) -> None:
    python = fresh_venv(tmp_path / "venv", wheel, leave_out=DASHBOARD_AND_DASK + ENGINE)
    env_check = run(python, tmp_path, "-c", "import dash")
    assert env_check.returncode != 0  # the dashboard really is absent
    for command, needs in (("up", "tensorflow, tf_keras are"), ("jax", "jax is")):
        args = ("--logdir", str(tmp_path / "runs")) if command == "jax" else ()
        cluster = run(python, tmp_path, "-m", "podscope", "cluster", command, *args)
        assert cluster.returncode == 2
        assert cluster.stderr.strip().splitlines() == [
            f"podscope: error: podscope cluster {command} needs the engine extra, and {needs} "
            "not installed: pip install 'podscope[engine]'"
        ], cluster.stderr
    cache = ["--no-cache"]
    out = run(python, tmp_path, "-m", "podscope", "stragglers", str(FIXTURE), *cache)
    assert out.returncode == 0, out.stderr
    assert "worker" in out.stdout
    serve = run(python, tmp_path, "-m", "podscope", "serve", "--logdir", str(tmp_path))
    assert serve.returncode == 2
    assert serve.stderr.strip().splitlines() == [
        "podscope: error: podscope serve needs the dashboard extra, and dash, plotly, "
        "dash_ag_grid, dash_bootstrap_components, waitress are not installed: "
        "pip install 'podscope[dashboard]'"
    ], serve.stderr
    scheduler = run(
        python, tmp_path, "-m", "podscope", "stragglers", str(FIXTURE), "--scheduler", "x:1"
    )
    assert scheduler.returncode != 0 and "pip install 'podscope[dask]'" in scheduler.stderr


#: The agent alone: this venv has no framework (Hello only).
AGENT_CODE = """
import sys
import podscope
from podscope.collectors.capture import TOKEN_HEADER
from podscope.collectors.proto import trace_export_pb2 as pb, trace_export_pb2_grpc as pb_grpc
import grpc
agent = podscope.agent.start(repository_root=sys.argv[1], token="t" * 24)
with grpc.insecure_channel(agent.address) as channel:
    hello = pb_grpc.TraceExportStub(channel).Hello(
        pb.HelloRequest(), timeout=10, metadata=((TOKEN_HEADER, "t" * 24),)
    )
agent.stop()
heavy = ("pandas", "numpy", "pyarrow", "dash", "dask", "tensorflow", "jax", "torch")
print(sorted(m for m in heavy if m in sys.modules), repr(hello.framework))
"""


def test_agent_runs_with_only_grpcio_protobuf_and_hpack(wheel: Path, tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv", wheel, only=AGENT_ONLY)
    assert run(python, tmp_path, "-c", "import pandas").returncode != 0
    out = run(python, tmp_path, "-c", AGENT_CODE, str(tmp_path / "traces"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] ''"


#: A training image's runtimes: protobuf of every major from 4.25 (TensorFlow 2.16-2.19 images
#: pin < 5 or < 6) to this environment's 7.x, and the grpcio older images carry. The job in
#: each is JAX (which needs no protobuf), so a real trace is taken there.
IMAGES = [
    ("protobuf==4.25.8", "grpcio==1.62.3"),
    ("protobuf==5.29.5", "grpcio==1.66.2"),
    ("protobuf==6.33.6", None),
    (None, None),  # this environment's protobuf 7.x and grpcio
]
JAX_STACK = ("jax", "ml_dtypes", "numpy", "opt_einsum", "scipy")
JOB = REPO / "tests" / "collectors" / "framework_job.py"


@pytest.mark.parametrize(("protobuf", "grpcio"), IMAGES, ids=lambda v: str(v))
def test_the_agent_starts_and_is_captured_on_every_protobuf_from_4_25(
    wheel: Path, tmp_path: Path, protobuf: str | None, grpcio: str | None
) -> None:
    from podscope.collectors.capture import CaptureOptions, Target, capture
    from podscope.trace_parsers import load

    pinned = tuple(p for p in (protobuf, grpcio) if p)
    leave = ("google", "protobuf") * bool(protobuf) + ("grpc",) * bool(grpcio)
    link = tuple(m for m in (*AGENT_ONLY, *JAX_STACK) if not m.startswith(leave))
    python = fresh_venv(tmp_path / "venv", wheel, only=link)
    if pinned:
        site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
        subprocess.run(
            [*PIP, "install", "--no-deps", "-q", "--target", str(site), *pinned],
            check=True,
            timeout=300,
            capture_output=True,
        )
    versions = run(
        python,
        tmp_path,
        "-c",
        "import google.protobuf as p, grpc; print(p.__version__, grpc.__version__)",
    )
    assert versions.returncode == 0, versions.stderr
    got_protobuf, got_grpc = versions.stdout.split()
    assert protobuf is None or got_protobuf == protobuf.split("==")[1]
    assert grpcio is None or got_grpc == grpcio.split("==")[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    job = subprocess.Popen(
        [str(python), str(JOB), "jax", str(tmp_path / "agent")],
        cwd=tmp_path,  # not the checkout: the job imports the installed wheel
        env={**env, **NO_COMPILER},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "job.log").open("w"),
        text=True,
    )
    try:
        assert job.stdout is not None and job.stdin is not None
        line = job.stdout.readline()
        assert line, (tmp_path / "job.log").read_text()[-3000:]
        address = json.loads(line)["address"]
        result = capture(
            [Target(address, "w0")],
            CaptureOptions(logdir=tmp_path / "logdir", duration_ms=1000, delay_ms=300),
        )
        job.stdin.close()
        assert job.wait(timeout=60) == 0, (tmp_path / "job.log").read_text()[-3000:]
    finally:
        job.kill()
    (worker,) = result.workers
    assert (worker.status, worker.framework) == ("ok", "jax"), worker
    assert len(load(worker.file).events) > 0
