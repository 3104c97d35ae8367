"""PodScope's agent service (gRPC): traces its process on request and streams the traces back.

    >>> server = serve(Path("traces"), token="s3cret", tracer=my_tracer)
    >>> server.port          # collectors call Hello, Trace, List, Fetch and Steps here
    >>> server.stop()

No framework here: the agent (``collectors.agent``) passes its in-process ``Tracer`` (the
profiler of the framework the process runs, ``collectors.frameworks``), and tests pass
simulated ones. Every trace is written, and every file served, below the
repository root only: names are single path components, and the resolved path (symlinks
followed) must stay inside the root, whatever a request says. The server is gRPC's asyncio
server on a thread of its own (training keeps its threads): a call that sends nothing costs
a coroutine, not a thread. ``collectors.guard`` checks the token before any message is read
and limits calls per peer.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import gzip
import hashlib
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import grpc

from podscope.collectors.front_door import DoorLimits, FrontDoor, private_socket, remove_private
from podscope.collectors.guard import TOKEN_HEADER, Gate, Limits, Peers, TokenInterceptor
from podscope.collectors.heartbeat import BEATS, Beats
from podscope.collectors.proto import trace_export_pb2 as pb
from podscope.collectors.proto import xspace_events_pb2 as xspace
from podscope.collectors.tf_profiler import TraceLevels
from podscope.trace_parsers import layout

__all__ = [
    "TOKEN_HEADER",
    "Limits",
    "TraceLevels",
    "Traced",
    "Tracer",
    "TracerBusy",
    "TracerError",
    "WorkerInfo",
    "serve",
]

SERVICE = "podscope.export.TraceExport"
#: Well below gRPC's default 4 MiB receive limit, so any client can read the stream; small,
#: because a slow reader holds a few chunks in this process (see ``Limits.max_streams``).
CHUNK_BYTES = 256 << 10
#: gRPC message limit for both ends (a chunk plus headroom).
MAX_MESSAGE_BYTES = 16 << 20
#: The longest trace window an agent accepts, and how far ahead its start may lie.
MAX_DURATION_MS = 10 * 60 * 1000
MAX_START_AHEAD_S = 60
#: The most traces one ``List`` names.
MAX_LISTED = 10_000
#: A trace takes the tracer this long before its window opens; until then it only waits, so
#: a trace asked for far ahead never makes the captures before it busy.
TRACE_LEAD_S = 1.0


@dataclass(frozen=True)
class WorkerInfo:
    """What the agent tells collectors about its process (``Hello``)."""

    role: str = ""
    index: int = 0
    strategy: str = ""
    profiler_address: str = ""
    #: (framework, version) whose profiler a trace would use now: asked at each Hello, since a
    #: job may import its framework after starting the agent.
    framework: Callable[[], tuple[str, str]] = lambda: ("", "")


class TracerError(RuntimeError):
    """A trace could not be taken; ``code`` is what the collector is told."""

    code = grpc.StatusCode.FAILED_PRECONDITION

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code or self.code


class TracerBusy(TracerError):
    """Another profiling session is running in this process."""

    code = grpc.StatusCode.ALREADY_EXISTS


class Traced(NamedTuple):
    """What a tracer wrote: the file (``out``, or a sibling whose suffix names another format,
    one of ``layout.TRACE_SUFFIXES``) and whose profiler wrote it."""

    path: Path
    framework: str = ""


class Tracer(Protocol):
    """Traces this process (blocking) into ``out``: waits until ``start_ns`` (Unix ns), records
    ``duration_ms``, writes the trace to ``out`` (an XSpace) or beside it in another format.

    Returns:
        What it wrote (None: an XSpace at ``out``).

    Raises:
        TracerError: no trace can be taken (TracerBusy: another profiling session is running).
    """

    def __call__(
        self, out: Path, start_ns: int, duration_ms: int, levels: TraceLevels
    ) -> Traced | None: ...


def safe_path(root: Path, session: str, name: str) -> Path:
    """``root/session/name`` if both are plain names and it resolves inside ``root``.

    Raises:
        PermissionError: a path separator, ``..``, an absolute name, or a symlink leading out.
    """
    try:
        return layout.confined(root, session, name)
    except layout.LayoutError as e:
        raise PermissionError(str(e)) from None


def has_events(path: Path) -> bool:
    """Whether the trace in ``path`` holds at least one event (TF's ``empty_trace`` test): an
    XSpace event, or a Kineto complete event (found by a byte scan, not a JSON parse: this runs
    in the training process)."""
    if not path.name.endswith(layout.KINETO_SUFFIXES):
        space = xspace.XSpace.FromString(path.read_bytes())
        return any(line.events for plane in space.planes for line in plane.lines)
    opener = gzip.open if path.name.endswith(".gz") else open
    tail = b""
    with opener(path, "rb") as f:
        while block := f.read(1 << 20):
            if COMPLETE_EVENT.search(tail + block):
                return True
            tail = block[-32:]
    return False


#: A complete ("X") event in Chrome trace JSON, as torch.profiler writes it (``"ph": "X"``).
COMPLETE_EVENT = re.compile(rb'"ph"\s*:\s*"X"')


def _unavailable_tracer(
    out: Path, start_ns: int, duration_ms: int, levels: TraceLevels
) -> Traced | None:
    raise TracerError("this agent only exports traces: it has no tracer")


class _Service:
    """Hello, List, Fetch, Trace and Steps for one repository root, every call admitted by a
    Gate."""

    def __init__(
        self, root: Path, info: WorkerInfo, tracer: Tracer, gate: Gate, beats: Beats
    ) -> None:
        self.root, self.info, self.tracer, self.gate = root, info, tracer, gate
        self.beats = beats
        self._tracing = threading.Lock()

    async def steps(self, requests: object, context: grpc.aio.ServicerContext) -> pb.StepsResponse:
        """The process's step heartbeats after the seq the watcher has seen."""
        async with self.gate.admit(context, "Steps"):
            r = await self.gate.read(context, "Steps")
            beats, last, dropped = self.beats.since(r.after_seq)
            return pb.StepsResponse(
                beats=[
                    pb.Beat(
                        seq=b.seq, step=b.step, end_unix_ns=b.end_unix_ns, duration_ns=b.duration_ns
                    )
                    for b in beats
                ],
                last_seq=last,
                dropped=dropped,
            )

    async def hello(self, requests: object, context: grpc.aio.ServicerContext) -> pb.HelloResponse:
        async with self.gate.admit(context, "Hello"):
            await self.gate.read(context, "Hello")
            i = self.info
            framework, version = i.framework()
            return pb.HelloResponse(
                host=socket.gethostname(),
                pid=os.getpid(),
                role=i.role,
                index=i.index,
                strategy=i.strategy,
                repository_root=str(self.root),
                tf_version=version if framework == "tensorflow" else "",
                profiler_address=i.profiler_address,
                framework=framework,
                framework_version=version,
            )

    async def list_traces(
        self, requests: object, context: grpc.aio.ServicerContext
    ) -> pb.ListResponse:
        async with self.gate.admit(context, "List"):
            await self.gate.read(context, "List")
            return pb.ListResponse(files=await asyncio.to_thread(self._files))

    def _files(self) -> list[pb.TraceFile]:
        """The traces under the root (at most ``MAX_LISTED``), none reached through a symlink
        that leads out of it."""
        files: list[pb.TraceFile] = []
        if not self.root.is_dir():
            return files
        for session in sorted(self.root.iterdir()):
            if not session.is_dir():
                continue
            for f in sorted(session.iterdir()):
                if not f.name.endswith(layout.TRACE_SUFFIXES):
                    continue
                try:
                    path = safe_path(self.root, session.name, f.name)
                except PermissionError:
                    continue  # a symlink out of the root
                if path.is_file():
                    files.append(
                        pb.TraceFile(session=session.name, name=f.name, size=path.stat().st_size)
                    )
                    if len(files) >= MAX_LISTED:
                        return files
        return files

    async def _path(
        self, context: grpc.aio.ServicerContext, method: str, session: str, name: str
    ) -> Path:
        try:
            return safe_path(self.root, session, name)
        except PermissionError as e:
            await self.gate.refuse(context, method, grpc.StatusCode.PERMISSION_DENIED, str(e))

    async def fetch(self, requests: object, context: grpc.aio.ServicerContext) -> None:
        async with self.gate.admit(context, "Fetch"):
            request = await self.gate.read(context, "Fetch")
            async with self.gate.stream(context, "Fetch"):
                await self._send(context, request)

    async def _send(self, context: grpc.aio.ServicerContext, request: pb.FetchRequest) -> None:
        """Streams exactly the file's size at opening, even if it grows meanwhile."""
        path = await self._path(context, "Fetch", request.session, request.name)
        if not path.is_file():
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no trace {request.session}/{request.name}"
            )
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            digest, offset = hashlib.sha256(), 0
            while True:
                data = await asyncio.to_thread(f.read, min(CHUNK_BYTES, size - offset))
                digest.update(data)
                last = offset + len(data) >= size or not data
                chunk = pb.Chunk(
                    data=data,
                    offset=offset,
                    total_size=size,
                    sha256=digest.hexdigest() if last else "",
                )
                await self.gate.write(context, "Fetch", chunk)
                offset += len(data)
                if last:
                    return

    async def trace(self, requests: object, context: grpc.aio.ServicerContext) -> pb.TraceResponse:
        async with self.gate.admit(context, "Trace"):
            r = await self.gate.read(context, "Trace")
            if not r.name.endswith(".xplane.pb"):
                await self.gate.refuse(
                    context, "Trace", grpc.StatusCode.INVALID_ARGUMENT, "not a .xplane.pb"
                )
            if not 0 < r.duration_ms <= MAX_DURATION_MS:
                await self.gate.refuse(
                    context,
                    "Trace",
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"duration {r.duration_ms} ms outside 1..{MAX_DURATION_MS}",
                )
            if r.start_timestamp_ns > time.time_ns() + MAX_START_AHEAD_S * 1_000_000_000:
                await self.gate.refuse(
                    context,
                    "Trace",
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"start more than {MAX_START_AHEAD_S} s ahead",
                )
            out = await self._path(context, "Trace", r.session, r.name)
            levels = TraceLevels(r.host_tracer_level, r.python_tracer_level, r.device_tracer_level)
            wait_s = (r.start_timestamp_ns - time.time_ns()) / 1e9 - TRACE_LEAD_S
            if wait_s > 0:  # not holding the tracer (a cancelled call ends here)
                await asyncio.sleep(wait_s)
            try:
                traced = await asyncio.to_thread(
                    self._trace, out, r.start_timestamp_ns, r.duration_ms, levels
                )
            except TracerError as e:
                await self.gate.refuse(context, "Trace", e.code, str(e))
            path = traced.path
            if not path.is_file():
                return pb.TraceResponse(empty_trace=True, framework=traced.framework)
            empty = not await asyncio.to_thread(has_events, path)
            return pb.TraceResponse(
                empty_trace=empty,
                size=path.stat().st_size,
                name=path.name,
                framework=traced.framework,
            )

    def _trace(self, out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> Traced:
        # A thread lock, held by the tracing thread: a cancelled call's trace still runs to its
        # end, and no second one may start meanwhile.
        if not self._tracing.acquire(blocking=False):
            raise TracerBusy("another PodScope capture is running on this worker")
        try:
            out.parent.mkdir(exist_ok=True)
            traced = self.tracer(out, start_ns, duration_ms, levels) or Traced(out)
        finally:
            self._tracing.release()
        # a tracer names its own file, but only a sibling of the one asked for, of a known format
        stem = out.name.removesuffix(layout.XPLANE_SUFFIXES[0])
        suffix = layout.trace_suffix(traced.path.name)
        if traced.path.parent != out.parent or traced.path.name != f"{stem}{suffix}":
            raise TracerError(f"the tracer wrote {traced.path.name}, not a trace of {stem}")
        return traced

    def handler(self) -> grpc.GenericRpcHandler:
        """Every method takes a request stream, so the Gate reads the one message itself, with
        a timeout (a unary handler would wait for it without one)."""

        def method(
            behavior: Any, request: type, response: type, stream: bool = False
        ) -> grpc.RpcMethodHandler:
            make = (
                grpc.stream_stream_rpc_method_handler
                if stream
                else grpc.stream_unary_rpc_method_handler
            )
            return make(
                behavior,
                request_deserializer=request.FromString,  # type: ignore[attr-defined]
                response_serializer=response.SerializeToString,  # type: ignore[attr-defined]
            )

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Hello": method(self.hello, pb.HelloRequest, pb.HelloResponse),
                "List": method(self.list_traces, pb.ListRequest, pb.ListResponse),
                "Fetch": method(self.fetch, pb.FetchRequest, pb.Chunk, stream=True),
                "Trace": method(self.trace, pb.TraceRequest, pb.TraceResponse),
                "Steps": method(self.steps, pb.StepsRequest, pb.StepsResponse),
            },
        )


def grpc_options(door: DoorLimits | None = None) -> list[tuple[str, Any]]:
    """The agent's gRPC server options: message sizes, and behind the front door the idle
    and handshake limits that close a relayed connection with no call in progress."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]
    if door is not None:
        idle_ms = int(door.idle_s * 1000)
        options += [
            ("grpc.max_connection_idle_ms", idle_ms),
            ("grpc.server_handshake_timeout_ms", idle_ms),
            # the relay's connections (nothing else can reach its unix socket), and a margin
            # for those the relay has closed that the server has not yet seen end
            ("grpc.max_allowed_incoming_connections", door.max_connections + 16),
        ]
    return options


class AgentServer:
    """The agent's gRPC server, running on an event loop in a daemon thread of its own,
    behind its front door (``collectors.front_door``), which holds the agent's port."""

    def __init__(
        self,
        handler: grpc.GenericRpcHandler,
        address: str,
        token: str | None,
        gate: Gate,
        door: DoorLimits | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        host, _, port = address.rpartition(":")
        limits = door or DoorLimits()
        started: dict[str, Any] = {}
        ready = threading.Event()

        async def start() -> None:
            self._server = grpc.aio.server(
                interceptors=[TokenInterceptor(token, gate.peers)] if token is not None else [],
                options=grpc_options(limits),
            )
            self._server.add_generic_rpc_handlers((handler,))
            self._upstream = upstream = private_socket()
            self._remove = functools.partial(remove_private, upstream)
            atexit.register(self._remove)  # a process that exits without stop()
            if not self._server.add_insecure_port(f"unix:{upstream}"):
                remove_private(upstream)
                raise OSError(f"cannot listen on the unix socket {upstream}")
            await self._server.start()
            self.door = FrontDoor(
                host.strip("[]"),
                int(port),
                upstream,
                limits,
                token.encode() if token is not None else None,
            )
            gate.peers.bind(self.door)
            try:
                started["port"] = await self.door.start()
            except OSError as e:
                await self._server.stop(0)
                remove_private(upstream)
                raise OSError(
                    f"the port is in use or the address is not this machine's: {e}"
                ) from e

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(start())
            except BaseException as e:  # reported to the starting thread, which raises it
                started["error"] = e
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="podscope-agent", daemon=True)
        self._thread.start()
        ready.wait()
        if "error" in started:
            raise OSError(f"cannot bind the PodScope agent to {address}: {started['error']}")
        self.port: int = started["port"]

    def stop(self, grace_s: float = 0.0) -> None:
        """Ends every call (after ``grace_s``) and the loop; returns when both are done."""
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.door.close(), self._loop).result()
        asyncio.run_coroutine_threadsafe(self._server.stop(grace_s), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        atexit.unregister(self._remove)
        self._remove()


def serve(
    root: str | os.PathLike[str],
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    token: str | None = None,
    info: WorkerInfo | None = None,
    tracer: Tracer | None = None,
    limits: Limits | None = None,
    door: DoorLimits | None = None,
    beats: Beats | None = None,
) -> AgentServer:
    """Starts the agent service for ``root`` on ``host:port`` (0: any free port), behind its
    front door (connection limits: ``door``; ``collectors.front_door.DoorLimits`` defaults).

    Args:
        tracer: traces this process on ``Trace`` (None: ``Trace`` answers FAILED_PRECONDITION).
        token: callers must send it (metadata ``x-podscope-token``); None serves anyone.
        beats: the step heartbeats ``Steps`` serves (default: this process's,
            ``collectors.heartbeat.BEATS``; tests running several agents in one process give
            each its own).

    Raises:
        OSError: the port could not be bound.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    gate = Gate(limits or Limits(), Peers())
    service = _Service(
        root, info or WorkerInfo(), tracer or _unavailable_tracer, gate, beats or BEATS
    )
    return AgentServer(service.handler(), f"{host}:{port}", token, gate, door)
