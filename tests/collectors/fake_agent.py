"""A PodScope agent whose tracer is simulated: ok, empty, slow, busy or dying (no TF)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from podscope.collectors.export_service import (
    AgentServer,
    TraceLevels,
    TracerBusy,
    WorkerInfo,
    serve,
)
from podscope.collectors.heartbeat import Beats
from tests.xspace_builder import SpaceBuilder


def own_channel(address: str) -> grpc.Channel:
    """A channel on a connection of its own. gRPC otherwise shares a process's connections
    between channels to one address, so a call can go out on the connection the agent's door
    has just hung up after a refused call (UNAVAILABLE: "Stream removed"), not on a new one as
    a client's next try does."""
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def xspace(events: int = 20) -> bytes:
    b = SpaceBuilder()
    p = b.plane("/host:CPU")
    line = p.line(1, "python")
    for i in range(events):
        p.event(line, "train", i * 1000, 900, step_num=i)
    return b.bytes()


@dataclass(frozen=True)
class Traced:
    """One trace the simulated tracer was asked for."""

    out: Path
    start_ns: int
    duration_ms: int
    levels: TraceLevels


@contextmanager
def fake_agent(
    root: Path,
    behavior: str = "ok",
    role: str = "worker",
    index: int = 0,
    strategy: str = "",
    token: str | None = None,
    beats: Beats | None = None,
    port: int = 0,
) -> Iterator[tuple[str, list[Traced]]]:
    """Yields (address, traces asked for); ``beats``: the step heartbeats it serves."""
    received: list[Traced] = []
    servers: list[AgentServer] = []

    def tracer(out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> None:
        received.append(Traced(out, start_ns, duration_ms, levels))
        if behavior == "busy":
            raise TracerBusy("Another profiling session is active")
        if behavior == "slow":
            time.sleep(30)
        if behavior == "die":
            time.sleep(0.3)
            threading.Thread(target=servers[0].stop).start()
            time.sleep(5)
        out.write_bytes(xspace(0 if behavior == "empty" else 20))

    server = serve(
        root,
        port=port,
        token=token,
        info=WorkerInfo(role=role, index=index, strategy=strategy),
        tracer=tracer,
        beats=beats or Beats(),
    )
    servers.append(server)
    try:
        yield f"127.0.0.1:{server.port}", received
    finally:
        server.stop()
