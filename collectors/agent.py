"""The PodScope agent, run inside a training process: TF profiler server + trace export service.

Two lines in a training script::

    from collectors import agent
    podscope = agent.start(port=6010)            # before training; podscope.stop() at the end

The agent's one gRPC port answers TensorFlow's ``ProfilerService`` (forwarded byte for byte
to the process's TF profiler server, which writes the trace to this machine's disk) and
PodScope's ``TraceExport`` (streams those files back to the collector). TensorFlow is imported
here only, lazily, and can be injected (``tf=``) in tests.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from collectors.export_service import TOKEN_HEADER, WorkerInfo, grpc_options, serve

PROFILER_METHODS = ("Profile", "Terminate")


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _proxy(target: str, token: str | None) -> grpc.GenericRpcHandler:
    """Forwards ``tensorflow.ProfilerService`` calls as raw bytes to ``target``.

    Bytes in, bytes out: no ProfilerService messages are deserialized, so this agent never
    registers protobuf types that could clash with TensorFlow's own in this process.
    """
    channel = grpc.insecure_channel(target, options=grpc_options())

    def make(method: str) -> grpc.RpcMethodHandler:
        call = channel.unary_unary(f"/tensorflow.ProfilerService/{method}")

        def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
            if token is not None and dict(context.invocation_metadata()).get(TOKEN_HEADER) != token:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong or missing PodScope token")
            try:
                return bytes(call(request, timeout=context.time_remaining()))
            except grpc.RpcError as e:
                context.abort(e.code(), e.details() or "profiler server error")
                raise  # unreachable: abort raises

        return grpc.unary_unary_rpc_method_handler(handle)

    return grpc.method_handlers_generic_handler(
        "tensorflow.ProfilerService", {m: make(m) for m in PROFILER_METHODS}
    )


@dataclass
class Agent:
    """A running agent. ``address`` is what collectors connect to."""

    address: str
    profiler_address: str
    repository_root: Path
    _server: grpc.Server

    def stop(self, grace_s: float = 1.0) -> None:
        """Stops the export service and the proxy (TF's profiler server lives as long as TF)."""
        self._server.stop(grace_s).wait()


def start(
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    profiler_address: str | None = None,
    repository_root: Path | None = None,
    token: str | None = None,
    strategy: str = "",
    task: tuple[str, int] | None = None,
    tf: Any = None,
) -> Agent:
    """Starts the TF profiler server (unless ``profiler_address`` names one) and the agent.

    Args:
        port: the agent's port (0: any free port).
        host: interface to bind (127.0.0.1 by default; 0.0.0.0 to serve other machines).
        profiler_address: an existing TF profiler server (e.g. a tf.distribute.Server's port).
        repository_root: where traces are kept (default: a new temporary folder).
        token: shared secret the collector must send; required when ``host`` is not a
            loopback address (``AgentError`` otherwise).
        strategy: the job's tf.distribute strategy class name (collectors plan safe captures).
        task: this process's (task type, index), e.g. ("worker", 1); None reads it from the
            ``TF_CONFIG`` environment variable, once, here (an empty role when unset).
        tf: the TensorFlow module (imported when None).

    Returns:
        The running agent.

    Raises:
        AgentError: a non-loopback ``host`` without a ``token``.
    """
    if token is None and not is_loopback(host):
        raise AgentError(
            f"binding {host} serves other machines: pass a token (the collectors send it; "
            "PODSCOPE_TOKEN for the engine), or bind 127.0.0.1"
        )
    if profiler_address is None:
        if tf is None:
            import tensorflow as tf  # type: ignore[no-redef]
        tf_port = _free_port(host)
        tf.profiler.experimental.server.start(tf_port)
        profiler_address = f"{host}:{tf_port}"
    root = repository_root or Path(tempfile.mkdtemp(prefix="podscope-traces-"))
    root.mkdir(parents=True, exist_ok=True)
    role, index = task if task is not None else task_from_tf_config(os.environ.get("TF_CONFIG"))
    info = WorkerInfo(
        role=role,
        index=index,
        strategy=strategy,
        tf_version=str(getattr(tf, "__version__", "")),
        profiler_address=profiler_address,
    )
    proxy = _proxy(profiler_address, token)
    server, bound = serve(
        root,
        port=port,
        host=host,
        token=token,
        info=info,
        extra_handlers=lambda s: s.add_generic_rpc_handlers((proxy,)),
    )
    return Agent(f"{host}:{bound}", profiler_address, root, server)


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
