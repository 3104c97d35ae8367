"""The PodScope agent, run inside a training process: traces it on request, serves the traces.

Two lines in a training script::

    import podscope
    agent = podscope.agent.start(port=6010)      # before training; agent.stop() at the end

and, for watched jobs (``podscope watch``), one more after each training step::

    podscope.agent.step(n)     # or callbacks=[podscope.agent.keras_callback()], or jax_step(n, loss)

The agent's one gRPC port (``collectors.export_service``) answers PodScope's ``Hello``,
``Trace``, ``List``, ``Fetch`` and ``Steps`` (the heartbeats, ``collectors.heartbeat``), and
writes every trace under the agent's own folder, whatever a request names. The agent opens
no TensorFlow port. ``Trace`` runs:

- through the TF server the job already runs, when ``profiler_address`` names it (a
  ``tf.distribute`` server on the task's TF_CONFIG port serves TensorFlow's ProfilerService):
  the agent is its client over loopback, so the tracer levels of the capture plan apply;
- else TensorFlow's profiler session inside this process
  (``tf.profiler.experimental.start``/``stop``). TF 2.21's in-process session ignores the
  tracer levels (measured: host events at host_tracer_level 0, no Python events at
  python_tracer_level 1), so it refuses a plan that needs the host tracer off.

TensorFlow's own profiler server, which TensorBoard's capture button and
``tf.profiler.experimental.client`` need, is an explicit opt-in (``tf_profiler_port``): it has
no authentication, listens on every interface and writes wherever a request says, so the agent
warns when it starts it. TensorFlow is imported here only, lazily, and can be injected (``tf=``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from podscope.collectors import heartbeat
from podscope.collectors.export_service import (
    AgentServer,
    Limits,
    TraceLevels,
    TracerBusy,
    TracerError,
    WorkerInfo,
    serve,
)
from podscope.collectors.front_door import DoorLimits
from podscope.collectors.heartbeat import jax_step as jax_step  # the training loop's side
from podscope.collectors.heartbeat import step as step
from podscope.collectors.tf_profiler import call_profile, profile_request

log = logging.getLogger("podscope.agent")

TF_SERVER_WARNING = (
    "TensorFlow's profiler server on port %d has no authentication, listens on every "
    "interface and writes traces wherever a request says: anyone who reaches the port can "
    "trace this process. Start it only on a trusted network (PodScope's captures do not need it)."
)


class ServerTracer:
    """Traces this task through a TF profiler server in this process, into the agent's folder."""

    def __init__(self, address: str) -> None:
        self.address = address

    def __call__(self, out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> None:
        """Asks the server for ``out`` (``<root>/<session>/<name>``); TF sleeps until ``start_ns``.

        Raises:
            TracerError: the server's error, with its status code (busy: ALREADY_EXISTS).
        """
        host = out.name.removesuffix(".xplane.pb")
        request = profile_request(
            out.parent.parent, out.parent.name, host, duration_ms, start_ns, levels
        )
        wait_s = max(0.0, (start_ns - time.time_ns()) / 1e9)
        with grpc.insecure_channel(self.address) as channel:
            try:
                call_profile(channel, request, timeout_s=wait_s + duration_ms / 1000 + 60)
            except grpc.RpcError as e:
                raise TracerError(f"TF profiler server: {e.details()}", e.code()) from None


class TfTracer:
    """Traces this process with TensorFlow's profiler session API (in-process, no server)."""

    def __init__(self, tf: Any) -> None:
        self.tf = tf

    def __call__(self, out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> None:
        """Records ``duration_ms`` from ``start_ns`` into ``out``; TF writes to a folder of its
        own naming (``plugins/profile/<time>/<host>.xplane.pb``), made next to ``out``.

        Raises:
            TracerBusy: another profiler (a Keras TensorBoard callback, TF's server) is running.
        """
        tf = self.tf
        if levels.host == 0:
            raise TracerError(
                "this agent traces in-process, where TensorFlow ignores the tracer levels and "
                "always runs the host tracer, which crashes non-chief MultiWorkerMirroredStrategy "
                "workers on TF 2.20/2.21: start the agent with profiler_address= the task's "
                "tf.distribute server (its TF_CONFIG address) to honour the plan"
            )
        time.sleep(max(0.0, (start_ns - time.time_ns()) / 1e9))
        work = Path(tempfile.mkdtemp(prefix=".tracing-", dir=out.parent))
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=levels.host,
            python_tracer_level=levels.python,
            device_tracer_level=levels.device,
        )
        try:
            try:
                tf.profiler.experimental.start(str(work), options=options)
            except tf.errors.AlreadyExistsError as e:
                raise TracerBusy(f"another profiler is running in this process ({e})") from None
            try:
                time.sleep(duration_ms / 1000)
            finally:
                tf.profiler.experimental.stop()
            written = sorted(work.glob("plugins/profile/*/*.xplane.pb"))
            if written:
                written[0].replace(out)
        finally:
            shutil.rmtree(work, ignore_errors=True)


@dataclass
class Agent:
    """A running agent. ``address`` is what collectors connect to."""

    address: str
    repository_root: Path
    profiler_address: str
    _server: AgentServer

    def stop(self, grace_s: float = 1.0) -> None:
        """Stops the agent's service (TF's opt-in profiler server lives as long as TF)."""
        self._server.stop(grace_s)


def start(
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    repository_root: str | os.PathLike[str] | None = None,
    token: str | None = None,
    strategy: str = "",
    task: tuple[str, int] | None = None,
    profiler_address: str | None = None,
    tf_profiler_port: int | None = None,
    limits: Limits | None = None,
    door: DoorLimits | None = None,
    tf: Any = None,
) -> Agent:
    """Starts the agent's service; traces are taken in-process when a collector asks.

    Args:
        port: the agent's port (0: any free port).
        host: interface to bind (127.0.0.1 by default; 0.0.0.0 to serve other machines).
        repository_root: where traces are kept, a ``str`` or any ``os.PathLike`` (default: a
            new temporary folder).
        token: shared secret the collector must send; required when ``host`` is not a
            loopback address, and then of at least ``MIN_TOKEN_CHARS`` (``AgentError``
            otherwise).
        strategy: the job's tf.distribute strategy class name (collectors plan safe captures).
        task: this process's (task type, index), e.g. ("worker", 1); None reads it from the
            ``TF_CONFIG`` environment variable, once, here (an empty role when unset).
        profiler_address: the TF server this process already runs (its ``tf.distribute``
            server, e.g. ``127.0.0.1:<TF_CONFIG port>``): traces go through it, honouring the
            tracer levels. None: in-process profiler sessions.
        tf_profiler_port: also start TensorFlow's own, unauthenticated profiler server on this
            port (for TensorBoard's capture button; traces then go through it); None (default)
            starts none.
        limits: call limits and idle timeout (``collectors.guard.Limits`` defaults).
        door: connection limits of the agent's port, and the collectors' networks
            (``collectors.front_door.DoorLimits``; e.g. ``DoorLimits(allow=("10.0.0.0/8",),
            allow_only=True)`` lets only that network connect).
        tf: the TensorFlow module (imported when None).

    Returns:
        The running agent.

    Raises:
        AgentError: a non-loopback ``host`` without a ``token``, or with a short one.
        OSError: the port could not be bound.
    """
    if not is_loopback(host):
        if token is None:
            raise AgentError(
                f"binding {host} serves other machines: pass a token (the collectors send it; "
                "PODSCOPE_TOKEN for the engine), or bind 127.0.0.1"
            )
        if len(token) < MIN_TOKEN_CHARS:
            raise AgentError(
                f"binding {host} serves other machines and the token has {len(token)} "
                f"characters: anyone who reaches the port can guess that. Use at least "
                f"{MIN_TOKEN_CHARS} (python -c 'import secrets; print(secrets.token_urlsafe(24))')"
            )
    if tf is None:
        import tensorflow as tf  # type: ignore[no-redef]
    if tf_profiler_port is not None:
        tf.profiler.experimental.server.start(tf_profiler_port)
        log.warning(TF_SERVER_WARNING, tf_profiler_port)
        profiler_address = profiler_address or f"127.0.0.1:{tf_profiler_port}"
    root = Path(
        repository_root
        if repository_root is not None
        else tempfile.mkdtemp(prefix="podscope-traces-")
    )
    root.mkdir(parents=True, exist_ok=True)
    role, index = task if task is not None else task_from_tf_config(os.environ.get("TF_CONFIG"))
    info = WorkerInfo(
        role=role,
        index=index,
        strategy=strategy,
        tf_version=str(getattr(tf, "__version__", "")),
        profiler_address=profiler_address or "",
    )
    tracer = ServerTracer(profiler_address) if profiler_address else TfTracer(tf)
    server = serve(
        root,
        port=port,
        host=host,
        token=token,
        info=info,
        tracer=tracer,
        limits=limits,
        door=door,
    )
    return Agent(f"{host}:{server.port}", root, profiler_address or "", server)


def keras_callback(base: type | None = None) -> Any:
    """A Keras callback that records a step heartbeat after every training batch
    (``collectors.heartbeat``): ``model.fit(..., callbacks=[podscope.agent.keras_callback()])``.

    Args:
        base: the ``Callback`` class of the Keras the model uses (default:
            ``tf.keras.callbacks.Callback``; pass ``tf_keras.callbacks.Callback`` or
            ``keras.callbacks.Callback`` for those).
    """
    if base is None:
        import tensorflow as tf

        base = tf.keras.callbacks.Callback
    return heartbeat.keras_callback(base)


#: The shortest token an agent that serves other machines accepts.
MIN_TOKEN_CHARS = 16


class AgentError(ValueError):
    """The agent cannot start as asked (a non-loopback address without a token)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address or ``localhost`` (``0.0.0.0``, ``::`` and every
    other address serve other machines)."""
    import ipaddress

    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def task_from_tf_config(tf_config: str | None) -> tuple[str, int]:
    """(task type, index) of a ``TF_CONFIG`` JSON string; ("", 0) when it is unset."""
    task = json.loads(tf_config or "{}").get("task", {})
    return str(task.get("type", "")), int(task.get("index", 0))
