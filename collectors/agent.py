"""The PodScope agent, run inside a training process: traces it on request, serves the traces.

Two lines in a training script, whatever its framework (TensorFlow, JAX or PyTorch)::

    import podscope
    agent = podscope.agent.start(port=6010)      # before training; agent.stop() at the end

and, for watched jobs (``podscope watch``) and PyTorch, one more after each training step::

    podscope.agent.step(n)     # or callbacks=[podscope.agent.keras_callback()], or jax_step(n, loss)

The agent's one gRPC port (``collectors.export_service``) answers PodScope's ``Hello``,
``Trace``, ``List``, ``Fetch`` and ``Steps`` (the heartbeats, ``collectors.heartbeat``), and
writes every trace under the agent's own folder, whatever a request names. Starting it imports
no framework. At each ``Trace`` it uses the profiler of the framework the process has imported
(``collectors.frameworks``; ``framework=`` decides instead):

- TensorFlow: through the TF server the job already runs, when ``profiler_address`` names it
  (a ``tf.distribute`` server on the task's TF_CONFIG port serves TensorFlow's
  ProfilerService): the agent is its client over loopback, so the tracer levels of the capture
  plan apply; else TensorFlow's profiler session inside this process
  (``tf.profiler.experimental.start``/``stop``), which ignores the tracer levels (TF 2.21), so it
  refuses a plan that needs the host tracer off (``collectors.tf_tracer``);
- JAX: ``jax.profiler`` in-process, an ``.xplane.pb`` (``collectors.jax_tracer``);
- PyTorch: ``torch.profiler`` (CPU and CUDA), started and stopped at the training thread's step
  boundaries, a Kineto ``.pt.trace.json.gz`` (``collectors.torch_tracer``).

A process with none of them answers every ``Trace`` with that reason (the capture records the
worker as ``failed``). TensorFlow's own profiler server, which TensorBoard's capture button and
``tf.profiler.experimental.client`` need, is an explicit opt-in (``tf_profiler_port``): it has
no authentication, listens on every interface and writes wherever a request says, so the agent
warns when it starts it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podscope.collectors import heartbeat
from podscope.collectors.export_service import (
    AgentServer,
    Limits,
    TracerBusy,
    TracerError,
    WorkerInfo,
    serve,
)
from podscope.collectors.frameworks import FRAMEWORKS, FrameworkTracer, UnknownFramework
from podscope.collectors.front_door import DoorLimits
from podscope.collectors.heartbeat import RECORDING as RECORDING
from podscope.collectors.heartbeat import jax_step as jax_step  # the training loop's side
from podscope.collectors.heartbeat import step as step
from podscope.collectors.tf_tracer import ServerTracer, TfTracer
from podscope.trace_parsers import layout

__all__ = [
    "FRAMEWORKS",
    "RECORDING",
    "Agent",
    "AgentError",
    "TracerBusy",
    "TracerError",
    "UnknownFramework",
    "jax_step",
    "keras_callback",
    "start",
    "step",
]

log = logging.getLogger("podscope.agent")

TF_SERVER_WARNING = (
    "TensorFlow's profiler server on port %d has no authentication, listens on every "
    "interface and writes traces wherever a request says: anyone who reaches the port can "
    "trace this process. Start it only on a trusted network (PodScope's captures do not need it)."
)


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
    framework: str | None = None,
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
            environment, once, here (``task_from_env``: ``PODSCOPE_TASK``, ``TF_CONFIG``,
            torchrun's ``RANK``; an empty role when none is set). Pages name the worker by it.
        framework: whose profiler traces: "tensorflow", "jax" or "torch"; None (default)
            decides at each trace, from the frameworks this process has imported (PyTorch,
            then JAX, then TensorFlow).
        profiler_address: the TF server this process already runs (its ``tf.distribute``
            server, e.g. ``127.0.0.1:<TF_CONFIG port>``): TensorFlow traces go through it,
            honouring the tracer levels. None: in-process profiler sessions.
        tf_profiler_port: also start TensorFlow's own, unauthenticated profiler server on this
            port (for TensorBoard's capture button; TensorFlow traces then go through it);
            None (default) starts none and imports no TensorFlow.
        limits: call limits and idle timeout (``collectors.guard.Limits`` defaults).
        door: connection limits of the agent's port, and the collectors' networks
            (``collectors.front_door.DoorLimits``; e.g. ``DoorLimits(allow=("10.0.0.0/8",),
            allow_only=True)`` lets only that network connect).
        tf: the TensorFlow module, for a process that passes it in (tests): TensorFlow's
            profiler then traces, unless ``framework`` says otherwise.

    Returns:
        The running agent.

    Raises:
        AgentError: a non-loopback ``host`` without a ``token``, or with a short one; an
            unknown ``framework``.
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
    if tf_profiler_port is not None:
        from podscope.collectors.tf_tracer import start_profiler_server

        start_profiler_server(tf_profiler_port, tf)
        log.warning(TF_SERVER_WARNING, tf_profiler_port)
        profiler_address = profiler_address or f"127.0.0.1:{tf_profiler_port}"
    try:
        tracer = FrameworkTracer(
            framework or ("tensorflow" if tf is not None else None),
            make={
                "tensorflow": (
                    (lambda: ServerTracer(profiler_address))
                    if profiler_address
                    else (lambda: TfTracer(tf))
                )
            },
            modules={"tensorflow": tf} if tf is not None else None,
        )
    except UnknownFramework as e:
        raise AgentError(str(e)) from None
    root = Path(
        repository_root
        if repository_root is not None
        else tempfile.mkdtemp(prefix="podscope-traces-")
    )
    root.mkdir(parents=True, exist_ok=True)
    role, index = task if task is not None else task_from_env(os.environ)
    info = WorkerInfo(
        role=role,
        index=index,
        strategy=strategy,
        profiler_address=profiler_address or "",
        framework=tracer.framework,
    )
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
        from podscope.collectors.tf_tracer import keras_callback_base

        base = keras_callback_base()
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


def task_from_env(env: Mapping[str, str]) -> tuple[str, int]:
    """(task type, index) of this process, as its launcher set it: ``PODSCOPE_TASK``
    (``worker:1``, ``rank 3``: a job's own name for it), else ``TF_CONFIG``'s task, else
    torchrun's ``RANK`` (``("rank", 3)``); ("", 0) when none says.

    Raises:
        AgentError: ``PODSCOPE_TASK`` is set but not ``ROLE:INDEX`` or ``ROLE INDEX``.
    """
    given = env.get("PODSCOPE_TASK", "").strip()
    if given:
        role, _, index = given.replace(" ", ":", 1).partition(":")
        if not (layout.task_name(role, int(index)) if index.isdigit() else ""):
            raise AgentError(
                f"PODSCOPE_TASK={given!r}: expected ROLE:INDEX (worker:1) or ROLE INDEX (rank 3)"
            )
        return role, int(index)
    if env.get("TF_CONFIG"):
        return task_from_tf_config(env["TF_CONFIG"])
    rank = env.get("RANK", "")
    return ("rank", int(rank)) if rank.isdigit() else ("", 0)


def task_from_tf_config(tf_config: str | None) -> tuple[str, int]:
    """(task type, index) of a ``TF_CONFIG`` JSON string; ("", 0) when it is unset."""
    task = json.loads(tf_config or "{}").get("task", {})
    return str(task.get("type", "")), int(task.get("index", 0))
