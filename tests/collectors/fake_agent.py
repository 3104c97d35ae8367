"""A PodScope agent whose TF profiler is simulated: ok, empty, slow, busy or dying (no TF)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from collectors.export_service import WorkerInfo, serve
from collectors.proto import profiler_service_pb2 as tsl
from tests.xspace_builder import SpaceBuilder


def xspace(events: int = 20) -> bytes:
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "python")
    for i in range(events):
        p.event(line, "train", i * 1000, 900, step_num=i)
    return b.bytes()


@contextmanager
def fake_agent(
    root: Path,
    behavior: str = "ok",
    role: str = "worker",
    index: int = 0,
    strategy: str = "",
    token: str | None = None,
) -> Iterator[tuple[str, list[tsl.ProfileRequest]]]:
    """Yields (address, received Profile requests)."""
    received: list[tsl.ProfileRequest] = []
    servers: list[grpc.Server] = []

    def profile(request: bytes, context: grpc.ServicerContext) -> bytes:
        req = tsl.ProfileRequest.FromString(request)
        received.append(req)
        if behavior == "busy":
            context.abort(grpc.StatusCode.UNAVAILABLE, "Another profiling session is active")
        if behavior == "slow":
            time.sleep(30)
        if behavior == "die":
            time.sleep(0.3)
            servers[0].stop(0)
            time.sleep(5)
        if behavior == "empty":
            return tsl.ProfileResponse(empty_trace=True).SerializeToString()
        out = Path(req.repository_root) / req.session_id / f"{req.host_name}.xplane.pb"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(xspace())
        return tsl.ProfileResponse(empty_trace=False).SerializeToString()

    handler = grpc.method_handlers_generic_handler(
        "tensorflow.ProfilerService", {"Profile": grpc.unary_unary_rpc_method_handler(profile)}
    )
    server, port = serve(
        root,
        token=token,
        info=WorkerInfo(role=role, index=index, strategy=strategy),
        extra_handlers=lambda s: s.add_generic_rpc_handlers((handler,)),
    )
    servers.append(server)
    try:
        yield f"127.0.0.1:{port}", received
    finally:
        server.stop(0)
