"""TensorFlow's profiler, for an agent in a TensorFlow process: the one collectors module that
imports TensorFlow, lazily, when a trace starts (or a Keras callback is asked for).

    >>> tracer = TfTracer()                          # in-process profiler session
    >>> tracer = ServerTracer("127.0.0.1:2222")      # through the task's tf.distribute server
    >>> tracer(out, start_ns, 2000, TraceLevels())   # writes ``out`` (an .xplane.pb)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc

from podscope.collectors.export_service import TracerBusy, TracerError
from podscope.collectors.frameworks import record_xspace
from podscope.collectors.tf_profiler import TraceLevels, call_profile, profile_request


def tensorflow() -> Any:
    """The TensorFlow module (imported here, the seam tests replace with ``tf=``)."""
    import tensorflow as tf

    return tf


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

    def __init__(self, tf: Any = None) -> None:
        self.tf = tf

    def __call__(self, out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> None:
        """Records ``duration_ms`` from ``start_ns`` into ``out``; TF writes to a folder of its
        own naming (``plugins/profile/<time>/<host>.xplane.pb``), made next to ``out``.

        Raises:
            TracerBusy: another profiler (a Keras TensorBoard callback, TF's server) is running.
            TracerError: a plan with the host tracer off (TF ignores the levels in-process).
        """
        tf = self.tf if self.tf is not None else tensorflow()
        if levels.host == 0:
            raise TracerError(
                "this agent traces in-process, where TensorFlow ignores the tracer levels and "
                "always runs the host tracer, which crashes non-chief MultiWorkerMirroredStrategy "
                "workers on TF 2.20/2.21: start the agent with profiler_address= the task's "
                "tf.distribute server (its TF_CONFIG address) to honour the plan"
            )
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=levels.host,
            python_tracer_level=levels.python,
            device_tracer_level=levels.device,
        )

        def start(folder: Path) -> None:
            try:
                tf.profiler.experimental.start(str(folder), options=options)
            except tf.errors.AlreadyExistsError as e:
                raise TracerBusy(f"another profiler is running in this process ({e})") from None

        record_xspace(out, start_ns, duration_ms, start, tf.profiler.experimental.stop)


def start_profiler_server(port: int, tf: Any = None) -> None:
    """Starts TensorFlow's own (unauthenticated) profiler server on ``port``."""
    (tf if tf is not None else tensorflow()).profiler.experimental.server.start(port)


def keras_callback_base() -> type:
    """``tf.keras.callbacks.Callback``: the default base of the agent's Keras heartbeat."""
    return tensorflow().keras.callbacks.Callback


def make_tracer() -> TfTracer:
    """The agent's tracer for a TensorFlow process (``collectors.frameworks``)."""
    return TfTracer()
