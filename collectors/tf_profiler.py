"""Client of TensorFlow's own ``tensorflow.ProfilerService`` (no TensorFlow import).

    >>> request = profile_request(Path("/traces"), "s1", "w_1", 2000, start_ns, TraceLevels())
    >>> response = call_profile(channel, request, timeout_s=35)

Used by the agent to trace its task through the TF server the job itself already runs (a
``tf.distribute`` server on the task's TF_CONFIG port serves this service), always into the
agent's own folder, and by the collector for bare TF profiler servers on shared storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from podscope.collectors.proto import profiler_service_pb2 as tsl

PROFILE_METHOD = "/tensorflow.ProfilerService/Profile"


@dataclass(frozen=True)
class TraceLevels:
    """TensorFlow's ProfilerOptions levels for one trace."""

    host: int = 2
    python: int = 0
    device: int = 1


def profile_request(
    root: Path, session: str, host: str, duration_ms: int, start_ns: int, levels: TraceLevels
) -> tsl.ProfileRequest:
    """A Profile request: TF writes ``<root>/<session>/<host>.xplane.pb`` (``:`` → ``_``)."""
    return tsl.ProfileRequest(
        duration_ms=duration_ms,
        max_events=0,
        repository_root=str(root),
        session_id=session,
        host_name=host,
        opts=tsl.ProfileOptions(
            version=1,  # TSL replaces the levels by its defaults when version is 0
            host_tracer_level=levels.host,
            python_tracer_level=levels.python,
            device_tracer_level=levels.device,
            start_timestamp_ns=start_ns,
            duration_ms=duration_ms,  # TF records nothing without it (measured, TF 2.21)
        ),
    )


def profile_method(channel: grpc.Channel | grpc.aio.Channel) -> Any:
    """TensorFlow's ``ProfilerService.Profile`` on ``channel`` (a gRPC multicallable: call it;
    on a ``grpc.aio`` channel, await the call)."""
    return channel.unary_unary(
        PROFILE_METHOD,
        request_serializer=tsl.ProfileRequest.SerializeToString,
        response_deserializer=tsl.ProfileResponse.FromString,
    )


def call_profile(
    channel: grpc.Channel,
    request: tsl.ProfileRequest,
    timeout_s: float,
    metadata: tuple[tuple[str, str], ...] = (),
) -> Any:
    """Sends ``request``; returns the ``ProfileResponse``.

    Raises:
        grpc.RpcError: the server's error, or the deadline passed.
    """
    return profile_method(channel)(request, timeout=timeout_s, metadata=metadata)
