"""Local cluster: spawns the tasks of a run as processes on 127.0.0.1 and stops them all.

    >>> from podscope.reference_engine.cluster import up, wait, down
    >>> m = up(EngineConfig(workload="mwms-loop", steps=20), workers=2, run_dir=Path("runs/x"))
    >>> results = wait(m, timeout_s=300); down(m)

The manifest (``<run_dir>/cluster.json``) lists every task: role, index, pid, TF_CONFIG
address, PodScope agent address (what ``podscope capture --cluster`` connects to) and log file, so ``podscope cluster status/down`` work from any
process. Tasks run in their own process groups; ``down`` sends SIGINT (TF's preemption handler
ignores SIGTERM), waits a grace period, then SIGKILLs what is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from podscope.reference_engine import netdelay
from podscope.reference_engine.config import EngineConfig, EngineError
from podscope.reference_engine.scenarios import SCENARIOS
from podscope.reference_engine.workloads import validate_config

MANIFEST = "cluster.json"
HOST = "127.0.0.1"
#: A manifest lists a few hundred tasks at most.
MAX_MANIFEST_BYTES, MAX_TASKS = 1 << 20, 4096


def _field(data: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str = "") -> None:
    """``data[name]`` is there and of ``kind`` (a bool is not a number here).

    Raises:
        KeyError, TypeError: it is not.
    """
    if name not in data:
        raise KeyError(f"{where}{name} missing")
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "a string" if kind is str else "an integer" if kind is int else "a number"
        raise TypeError(f"{where}{name} is not {what}")


@dataclass(frozen=True)
class TaskInfo:
    """One task of the manifest. ``started`` is the process's start time (``/proc/<pid>/stat``
    field 22, clock ticks since boot) as ``up`` saw it: with the command line, what proves a
    pid is still the task's and not a later process that got the same number."""

    role: str
    index: int
    pid: int
    address: str
    agent_address: str  # the PodScope agent: traces the task in-process, exports the trace
    log: str
    started: int = 0

    @property
    def name(self) -> str:
        return f"{self.role}:{self.index}"


@dataclass(frozen=True)
class Manifest:
    run_dir: str
    workload: str
    scenario: str
    tasks: tuple[TaskInfo, ...]
    started_at: float

    def save(self) -> Path:
        path = Path(self.run_dir) / MANIFEST
        path.write_text(
            json.dumps({**asdict(self), "tasks": [asdict(t) for t in self.tasks]}, indent=2)
        )
        return path

    @classmethod
    def load(cls, run_dir: Path) -> Manifest:
        """The manifest of ``run_dir`` (or at that path), every field checked.

        Raises:
            EngineError: unreadable, over ``MAX_MANIFEST_BYTES``, not JSON (or nested past
                what JSON manifests are), or a field missing or of the wrong type.
        """
        path = run_dir / MANIFEST if run_dir.is_dir() else run_dir
        try:
            with path.open("rb") as f:
                raw = f.read(MAX_MANIFEST_BYTES + 1)
        except OSError as e:
            raise EngineError(f"no cluster manifest at {path}: {e.strerror or e}") from None
        if len(raw) > MAX_MANIFEST_BYTES:
            raise EngineError(f"{path} is not a cluster manifest: over {MAX_MANIFEST_BYTES} bytes")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:
            why = "nested too deep" if isinstance(e, RecursionError) else str(e)
            raise EngineError(f"{path} is not a cluster manifest: {why}") from None
        try:
            return cls._checked(data)
        except (TypeError, KeyError, ValueError) as e:
            raise EngineError(f"{path} is not a cluster manifest: {e}") from None

    @classmethod
    def _checked(cls, data: object) -> Manifest:
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        fields: dict[str, type | tuple[type, ...]] = {
            "run_dir": str,
            "workload": str,
            "scenario": str,
            "started_at": (int, float),
        }
        for name, kind in fields.items():
            _field(data, name, kind)
        tasks = data["tasks"]
        if not isinstance(tasks, list) or len(tasks) > MAX_TASKS:
            raise TypeError(f"tasks: a list of at most {MAX_TASKS} tasks expected")
        task_fields = {
            "role": str,
            "index": int,
            "pid": int,
            "address": str,
            "agent_address": str,
            "log": str,
        }
        checked = []
        for n, t in enumerate(tasks):
            if not isinstance(t, dict):
                raise TypeError(f"task {n}: not a JSON object")
            for name, kind in task_fields.items():
                _field(t, name, kind, f"task {n}: ")
            started = t.get("started", 0)
            if not isinstance(started, int) or isinstance(started, bool):
                raise TypeError(f"task {n}: started is not an integer")
            checked.append(TaskInfo(**{k: t[k] for k in task_fields}, started=started))
        return cls(
            data["run_dir"], data["workload"], data["scenario"], tuple(checked), data["started_at"]
        )


#: Where ``free_ports`` looks first: below the kernel's ephemeral range, which outgoing
#: connections draw from (a port picked there can be taken by any connect() in the ~10 s
#: before TensorFlow binds it: 3 of ~15 starts failed on a busy machine).
LOW_PORTS = 20_000


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32_768, 60_999


def free_ports(n: int) -> list[int]:
    """n distinct TCP ports free on 127.0.0.1 now, outside the ephemeral range when it leaves
    room (no outgoing connection takes them while the tasks start), else any free ones; held
    open together so that they differ."""
    import random

    lo, _ = _ephemeral_range()
    pool = list(range(LOW_PORTS, lo))
    random.shuffle(pool)
    socks: list[socket.socket] = []
    try:
        for port in pool:
            if len(socks) == n:
                break
            s = socket.socket()
            try:
                s.bind((HOST, port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        while len(socks) < n:  # no room below the ephemeral range: the kernel's choice
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _roles(workload: str, workers: int, ps: int) -> list[tuple[str, int]]:
    if workload == "ps":
        if ps < 1 or workers < 1:
            raise EngineError("the ps workload needs --ps >= 1 and --workers >= 1")
        return (
            [("chief", 0)]
            + [("worker", i) for i in range(workers)]
            + [("ps", i) for i in range(ps)]
        )
    if ps:
        raise EngineError(f"{workload} uses no parameter servers (--ps 0)")
    return [("worker", i) for i in range(workers)]


def _slow_link(cfg: EngineConfig, cluster: dict[str, list[str]], proxy_port: int) -> str:
    """The ``slow-allreduce`` scenario's proxy for worker ``straggler_task`` (``netdelay.ENV``
    value: the others reach it through ``proxy_port``), or "" for other scenarios.

    Raises:
        EngineError: no such worker.
    """
    if not SCENARIOS[cfg.scenario].slow_link:
        return ""
    workers = cluster.get("worker", [])
    if not 0 <= cfg.straggler_task < len(workers):
        raise EngineError(
            f"--straggler-task {cfg.straggler_task} is not a worker (0..{len(workers) - 1})"
        )
    target = int(workers[cfg.straggler_task].rsplit(":", 1)[1])
    return f"{proxy_port}:{target}:{cfg.link_delay_ms}"


#: Starts tried, each on fresh ports, while a task dies because its port was taken.
START_ATTEMPTS = 3
#: What a task's log says when its TensorFlow or agent port was taken before it bound it.
PORT_TAKEN = re.compile(r"Failed to add port|Could not start gRPC server|[Aa]ddress already in use")


def up(
    cfg: EngineConfig, *, workers: int, ps: int = 0, run_dir: Path, ready_timeout_s: float = 180.0
) -> Manifest:
    """Starts every task and returns once each serves: its TensorFlow server bound (a PS
    job's coordinator, which has none: its agent up). Ports are picked free just before; a
    start whose task died because another process took its port in between is run again on
    fresh ports (``START_ATTEMPTS`` in all; the failed attempts' logs are kept as
    ``task.attemptN.log``).

    Raises:
        EngineError: bad config, or a task exited / was not ready in time (the others are
            stopped; the message has the task's last log lines). Any other exception on the
            way (Ctrl-C, or SIGTERM where the caller turns it into one) also stops every task
            started so far before it propagates.
    """
    validate_config(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "engine.json").write_text(cfg.to_json())
    roles = _roles(cfg.workload, workers, ps)
    for attempt in range(1, START_ATTEMPTS + 1):
        ports = free_ports(2 * len(roles) + 1)
        cluster: dict[str, list[str]] = {}
        for (role, _), port in zip(roles, ports, strict=False):
            cluster.setdefault(role, []).append(f"{HOST}:{port}")
        slow_link = _slow_link(cfg, cluster, ports[-1])
        procs: list[subprocess.Popen[bytes]] = []
        try:
            manifest = _start_tasks(cfg, roles, cluster, ports, slow_link, run_dir, procs)
            _wait_ready(manifest, ready_timeout_s)
            return manifest
        except EngineError as e:
            _stop_started(procs)
            if attempt == START_ATTEMPTS or not PORT_TAKEN.search(str(e)):
                raise
            for role, index in roles:  # each log kept beside the next attempt's
                log = run_dir / f"{role}-{index}" / "task.log"
                with contextlib.suppress(OSError):
                    log.replace(log.with_name(f"task.attempt{attempt}.log"))
        except BaseException:  # Ctrl-C or SIGTERM: no task outlives this call
            _stop_started(procs)
            raise
    raise AssertionError("unreachable")  # every attempt returns or raises


def _stop_started(procs: list[subprocess.Popen[bytes]], grace_s: float = 5.0) -> None:
    """Stops the tasks this process just started, by their ``Popen``: SIGINT to each one's
    process group, SIGKILL after ``grace_s``. Not ``down``: a task whose exec is still under
    way shows an empty command line, which ``started_by`` rightly cannot prove; our own
    unreaped children cannot have had their pids reused (``poll`` first: one already reaped,
    by ``_wait_ready`` or here, is never signalled)."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _start_tasks(
    cfg: EngineConfig,
    roles: list[tuple[str, int]],
    cluster: dict[str, list[str]],
    ports: list[int],
    slow_link: str,
    run_dir: Path,
    procs: list[subprocess.Popen[bytes]],
) -> Manifest:
    """Starts each task in its own session, appending its process to ``procs`` as it starts
    (so the caller can stop those already started if this is interrupted), and saves the
    manifest."""
    tasks = []
    for i, (role, index) in enumerate(roles):
        task_dir = run_dir / f"{role}-{index}"
        task_dir.mkdir(exist_ok=True)
        log = task_dir / "task.log"
        seen = cluster  # how this task reaches the others
        if slow_link and (role, index) != ("worker", cfg.straggler_task):
            seen = {**cluster, "worker": list(cluster["worker"])}
            seen["worker"][cfg.straggler_task] = f"{HOST}:{ports[-1]}"
        env = {
            **os.environ,
            "TF_CONFIG": json.dumps({"cluster": seen, "task": {"type": role, "index": index}}),
            "TF_USE_LEGACY_KERAS": "1",
            "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
            "PYTHONUNBUFFERED": "1",
        }
        if cfg.memory_events or SCENARIOS[cfg.scenario].memory_leak:
            # TF records allocator events for BFC allocators only; CPU's default is not one.
            env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
        if cfg.preload:
            env["LD_PRELOAD"] = cfg.preload
        if slow_link and (role, index) == ("worker", cfg.straggler_task):
            env[netdelay.ENV] = slow_link
        agent_port = ports[len(roles) + i]
        cmd = [
            sys.executable,
            "-m",
            "podscope.reference_engine.worker",
            "--config",
            str((run_dir / "engine.json").resolve()),
        ]
        cmd += ["--agent-port", str(agent_port)]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                cmd,
                cwd=task_dir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        procs.append(proc)
        tasks.append(
            TaskInfo(
                role,
                index,
                proc.pid,
                cluster[role][index],
                f"{HOST}:{agent_port}",
                str(log),
                started=process_start(proc.pid) or 0,
            )
        )
    manifest = Manifest(
        str(run_dir.resolve()), cfg.workload, cfg.scenario, tuple(tasks), time.time()
    )
    manifest.save()
    return manifest


def events(task: TaskInfo) -> list[dict[str, Any]]:
    """The JSON events a task has logged so far (other log lines skipped)."""
    out: list[dict[str, Any]] = []
    try:
        text = Path(task.log).read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith('{"event"'):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line being written right now
    return out


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (``/proc/<pid>/stat`` field 22, clock ticks since boot),
    or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _reap(pid: int) -> int | None:
    """Exit code of our own child if it has ended (None if running or not our child)."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status) if done else None


def _tail(task: TaskInfo, n: int = 8) -> str:
    try:
        lines = Path(task.log).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def serves_tf(workload: str, role: str) -> bool:
    """Whether the task runs a TensorFlow server on its TF_CONFIG port (a PS job's
    coordinator does not)."""
    return workload != "ps" or role in ("worker", "ps")


def _wait_ready(manifest: Manifest, timeout_s: float) -> None:
    """Until every task serves (``up``): it logged ``serving`` once its TensorFlow server
    was bound, or ``ready`` (its agent up) where it runs none."""
    deadline = time.monotonic() + timeout_s
    pending = {t.name: t for t in manifest.tasks}
    while pending:
        for name, task in list(pending.items()):
            wanted = "serving" if serves_tf(manifest.workload, task.role) else "ready"
            if any(e["event"] == wanted for e in events(task)):
                del pending[name]
            elif not alive(task.pid):
                _reap(task.pid)
                raise EngineError(f"task {name} exited before it was ready:\n{_tail(task)}")
        if pending and time.monotonic() > deadline:
            raise EngineError(
                f"tasks not ready after {timeout_s:.0f} s: {', '.join(sorted(pending))}"
            )
        time.sleep(0.2)


@dataclass(frozen=True)
class TaskStatus:
    name: str
    pid: int
    alive: bool
    last_event: str | None
    steps: int
    last_loss: float | None


def status(manifest: Manifest) -> list[TaskStatus]:
    """Per task: alive or not, last event, steps done, last loss."""
    out = []
    for t in manifest.tasks:
        ev = events(t)
        steps = [e for e in ev if e["event"] == "step"]
        if not alive(t.pid):
            _reap(t.pid)
        out.append(
            TaskStatus(
                t.name,
                t.pid,
                alive(t.pid),
                ev[-1]["event"] if ev else None,
                len(steps),
                steps[-1]["loss"] if steps else None,
            )
        )
    return out


def wait(
    manifest: Manifest, timeout_s: float, roles: tuple[str, ...] = ("worker", "chief")
) -> dict[str, dict[str, Any]]:
    """Waits until the training tasks (``roles``) log ``done`` or ``error``; returns their last events.

    In the ``ps`` workload only the chief finishes (workers and ps serve until ``down``).

    Raises:
        EngineError: timeout, or a task died without a final event.
    """
    trainers = [
        t
        for t in manifest.tasks
        if t.role in roles and not (manifest.workload == "ps" and t.role == "worker")
    ]
    deadline = time.monotonic() + timeout_s
    results: dict[str, dict[str, Any]] = {}
    while len(results) < len(trainers):
        for t in trainers:
            if t.name in results:
                continue
            final = [e for e in events(t) if e["event"] in ("done", "error")]
            if final:
                results[t.name] = final[-1]
            elif not alive(t.pid):
                _reap(t.pid)
                final = [e for e in events(t) if e["event"] in ("done", "error")]
                results[t.name] = final[-1] if final else {"event": "died", "log_tail": _tail(t)}
        if len(results) < len(trainers) and time.monotonic() > deadline:
            raise EngineError(f"training not finished after {timeout_s:.0f} s")
        time.sleep(0.2)
    return results


def started_by(manifest: Manifest, task: TaskInfo) -> bool:
    """Whether ``task.pid`` is provably the engine worker ``up`` started for this manifest:
    a session leader (``up`` starts each task in a new session) that started when ``up`` saw
    it start (``TaskInfo.started``) and whose command line is ``reference_engine.worker
    --config <this run's engine.json>``. A manifest is a file anyone can edit, and a pid is
    reused once its process ends (by another run of the same folder, too): nothing else is
    ever signalled (not pid 0 or 1, which would signal a whole process group or init, nor this
    process, nor a task of a manifest without start times)."""
    pid = task.pid
    if pid <= 1 or pid in (os.getpid(), os.getpgrp()):
        return False
    if not task.started or process_start(pid) != task.started:
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if os.getpgid(pid) != pid:
            return False
    except (OSError, ProcessLookupError):
        return False
    config = str((Path(manifest.run_dir) / "engine.json").resolve()).encode()
    return b"podscope.reference_engine.worker" in argv and config in argv


def kill_task(task: TaskInfo, manifest: Manifest | None = None) -> None:
    """SIGKILLs one task's process group now (failure injection); with ``manifest``, only
    when ``started_by`` proves it is that run's task."""
    if manifest is not None and not started_by(manifest, task):
        return
    try:
        os.killpg(task.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    _reap(task.pid)


@dataclass(frozen=True)
class Stopped:
    """What ``down`` did: the tasks it stopped (``killed`` of them with SIGKILL after the
    grace period), and the manifest's others with why they were left alone."""

    stopped: tuple[str, ...]
    killed: tuple[str, ...]
    left: tuple[str, ...]

    def summary(self) -> str:
        said = f"stopped {len(self.stopped)} of {len(self.stopped) + len(self.left)} tasks"
        if self.killed:
            said += f" (SIGKILL: {', '.join(self.killed)})"
        if self.left:
            said += "; left alone: " + "; ".join(self.left)
        return said


def down(manifest: Manifest, grace_s: float = 5.0) -> Stopped:
    """Stops every task (process group) that ``started_by`` proves this run started: SIGINT,
    then SIGKILL after ``grace_s``. Pids the manifest holds that are not provably its
    tasks (ended, reused by another process, or edited in) are left alone, and said so."""
    ours, left = [], []
    for t in manifest.tasks:
        if started_by(manifest, t):
            ours.append(t)
        elif not alive(t.pid) or t.pid <= 1:
            left.append(f"{t.name} (pid {t.pid}: not running)")
        else:
            left.append(f"{t.name} (pid {t.pid}: another process now, not this run's task)")
    for t in ours:
        try:
            os.killpg(t.pid, signal.SIGINT)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(t.pid) for t in ours):
        for t in ours:
            _reap(t.pid)
        time.sleep(0.1)
    mine = replace(manifest, tasks=tuple(ours))
    killed = []
    for t in ours:
        if alive(t.pid):
            killed.append(t.name)
            kill_task(t, mine)
    for t in ours:
        for _ in range(50):
            _reap(t.pid)
            if not alive(t.pid):
                break
            time.sleep(0.05)
    return Stopped(tuple(t.name for t in ours), tuple(killed), tuple(left))
