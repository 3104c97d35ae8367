"""Capture every worker of a job in one window over gRPC, and bring the traces home.

    >>> from podscope.collectors.capture import CaptureOptions, Target, capture
    >>> result = capture([Target("127.0.0.1:6010"), Target("127.0.0.1:6011")],
    ...                  CaptureOptions(logdir=Path("runs/demo"), duration_ms=2000))
    >>> [(w.label, w.status) for w in result.workers]

For each worker: ``Hello`` (PodScope agent: role, strategy), then one ``Trace`` request per
worker, all with the same ``start_timestamp_ns`` so every worker traces the same window (the
agent traces its process in-process and keeps the file under its own folder), then ``Fetch``
of the worker's file into ``<logdir>/plugins/profile/<session>/<host_port>.xplane.pb``, no
more bytes than the agent declared, with a checksum. A bare TensorFlow profiler server (no
agent) is sent ``tensorflow.ProfilerService/Profile`` and only with ``shared_storage``.
``capture.json`` records options and per-worker results. No TensorFlow here.

The calls run on ``grpc.aio``, on one event loop: the collector's threads stay a handful
whatever the pod's size (the synchronous client held a polling thread per channel through the
window: 289 threads at 256 agents), and at most ``MAX_CONCURRENT`` Hellos and transfers run at
once.

Statuses: ok, empty (no events in the window), unreachable (never answered), timeout
(deadline passed), crashed (answered, then went away mid-capture), busy (another capture is
running there), failed (the profiler returned another error), transfer_failed (captured but
the file could not be brought back).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import grpc

from podscope.collectors import tf_profiler
from podscope.collectors.errors import CaptureError
from podscope.collectors.export_service import TOKEN_HEADER, grpc_options
from podscope.collectors.proto import trace_export_pb2 as pb
from podscope.collectors.proto import trace_export_pb2_grpc as pb_grpc
from podscope.collectors.status import Status
from podscope.collectors.tf_profiler import TraceLevels
from podscope.trace_parsers import layout

MWMS = "MultiWorkerMirroredStrategy"
EXIT_OK, EXIT_PARTIAL, EXIT_FAILED = 0, 3, 4


@dataclass(frozen=True)
class Target:
    """A worker to capture: its agent (or bare TF profiler server) address, and a label."""

    address: str
    label: str | None = None

    @property
    def worker_label(self) -> str:
        """``host_port`` (never the bare host: two workers on one host must not collide)."""
        return self.label or self.address.replace(":", "_")


@dataclass(frozen=True)
class CaptureOptions:
    """How to capture.

    Attributes:
        logdir: traces land in ``<logdir>/plugins/profile/<session>/`` (a ``str`` or any
            ``os.PathLike``).
        duration_ms: trace window length.
        delay_ms: the window starts this long after the requests are sent (same instant for
            every worker), so all of them are tracing before it opens.
        host_tracer_level, python_tracer_level, device_tracer_level: TF ProfileOptions levels.
        retries: extra connection attempts for a worker that does not answer (backoff 0.5 s, x2).
        timeout_s: per-worker deadline of the Profile call (default: delay + duration + 30 s).
        token: the agents' shared token.
        session: session folder name (default: UTC time, XProf's format).
        shared_storage: bare TF profiler servers (no agent) write straight into ``logdir`` on a
            filesystem the workers share; agents always keep their traces and send them.
        unsafe_full_trace: also host-trace non-chief MultiWorkerMirroredStrategy workers.
            TF 2.20/2.21 crash there (use-after-free in TraceMeRecorder::Consume); the default
            plan traces them with the Python tracer only.
        label, note: what the session is, in the user's words (kept in ``capture.json``).
    """

    logdir: Path
    duration_ms: int = 2000
    delay_ms: int = 500
    host_tracer_level: int = 2
    python_tracer_level: int = 0
    device_tracer_level: int = 1
    retries: int = 2
    timeout_s: float | None = None
    token: str | None = None
    session: str | None = None
    shared_storage: bool = False
    unsafe_full_trace: bool = False
    label: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        # a str or any os.PathLike, as every public path argument: kept as a Path
        object.__setattr__(self, "logdir", Path(self.logdir))

    def deadline_s(self) -> float:
        return (
            self.timeout_s
            if self.timeout_s is not None
            else (self.delay_ms + self.duration_ms) / 1000 + 30
        )


@dataclass
class WorkerResult:
    """What happened to one worker."""

    label: str
    address: str
    status: Status = Status.PENDING
    reason: str = ""
    role: str = ""
    index: int | None = None
    strategy: str = ""
    #: whose profiler traced the worker ("tensorflow", "jax", "torch"; "" when unknown)
    framework: str = ""
    host_tracer_level: int | None = None
    python_tracer_level: int | None = None
    file: str | None = None
    bytes: int = 0
    attempts: int = 0
    profile_s: float = 0.0
    transfer_s: float = 0.0
    plan_note: str = ""

    @property
    def task(self) -> str:
        """Its task as the job names it (``worker:1``, ``rank 3``; ``layout.task_name``)."""
        return layout.task_name(self.role, self.index)


@dataclass
class CaptureResult:
    session: str
    session_dir: Path
    options: CaptureOptions
    workers: list[WorkerResult] = field(default_factory=list)
    start_timestamp_ns: int = 0
    #: A watcher's reason and trigger (``layout.CaptureManifest.watch``); None otherwise.
    watch: dict[str, Any] | None = None

    def exit_code(self) -> int:
        ok = sum(w.status == Status.OK for w in self.workers)
        if ok == len(self.workers):
            return EXIT_OK
        return EXIT_PARTIAL if ok else EXIT_FAILED

    def save(self) -> Path:
        """Writes the session's ``capture.json`` (``trace_parsers.layout``; no token)."""
        opts = {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in asdict(self.options).items()
            if k not in ("token", "label", "note")
        }
        return layout.write_manifest(
            self.session_dir,
            self.session,
            self.start_timestamp_ns,
            opts,
            [asdict(w) for w in self.workers],
            label=self.options.label,
            note=self.options.note,
            watch=self.watch,
        )


def _metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return ((TOKEN_HEADER, token),) if token else ()


async def _hello(
    channel: grpc.aio.Channel, opts: CaptureOptions, result: WorkerResult
) -> pb.HelloResponse | None:
    """Agent info, with retries and backoff while the worker does not answer.

    Returns None when the target has no PodScope agent (a bare TF profiler server).

    Raises:
        CaptureError: unreachable after every attempt, or the agent refused the token.
    """
    stub = pb_grpc.TraceExportStub(channel)
    backoff = 0.5
    for attempt in range(opts.retries + 1):
        result.attempts = attempt + 1
        try:
            return await stub.Hello(pb.HelloRequest(), timeout=5, metadata=_metadata(opts.token))
        except grpc.RpcError as e:
            code = e.code()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return None
            if code == grpc.StatusCode.UNAUTHENTICATED:
                raise CaptureError(f"agent refused the token: {e.details()}") from None
            if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise CaptureError(f"{code.name}: {e.details()}") from None
            if attempt < opts.retries:
                await asyncio.sleep(backoff)
                backoff *= 2
    raise CaptureError(
        f"no answer from {result.address} after {opts.retries + 1} attempts (is the worker running?)",
        status=Status.UNREACHABLE,
    )


def plan_levels(hello: pb.HelloResponse | None, opts: CaptureOptions) -> tuple[int, int, str]:
    """Tracer levels for one worker: (host, python, note). The safe plan for MWMS jobs: the
    chief gets the full host trace, other workers the Python tracer only (TF 2.20/2.21 crash
    when non-chief MultiWorkerMirroredStrategy workers are host-traced)."""
    if hello is not None and hello.strategy == MWMS and not opts.unsafe_full_trace:
        is_chief = hello.role == "chief" or (hello.role == "worker" and hello.index == 0)
        if not is_chief and opts.host_tracer_level > 0:
            return (
                0,
                max(1, opts.python_tracer_level),
                "safe plan: python tracer only on non-chief MWMS worker",
            )
    return opts.host_tracer_level, opts.python_tracer_level, ""


def _levels(opts: CaptureOptions, result: WorkerResult) -> tuple[int, int, int]:
    return (
        result.host_tracer_level or 0,
        result.python_tracer_level or 0,
        opts.device_tracer_level,
    )


def _launch_trace(
    channel: grpc.aio.Channel,
    opts: CaptureOptions,
    result: WorkerResult,
    session: str,
    start_ns: int,
) -> Pending:
    """Sends the agent's ``Trace`` request without waiting for its answer (an asynchronous
    call: a pod's hundreds of requests are all out before the window opens, none holding a
    thread)."""
    host, python, device = _levels(opts, result)
    request = pb.TraceRequest(
        session=session,
        name=layout.xplane_name(result.label),
        duration_ms=opts.duration_ms,
        start_timestamp_ns=start_ns,
        host_tracer_level=host,
        python_tracer_level=python,
        device_tracer_level=device,
    )
    return _launch(pb_grpc.TraceExportStub(channel).Trace, request, opts)


def _launch_profile(
    channel: grpc.aio.Channel,
    opts: CaptureOptions,
    result: WorkerResult,
    session: str,
    start_ns: int,
    root: Path,
) -> Pending:
    """Sends TF's Profile request to a bare profiler server that writes into ``root`` (shared
    storage), without waiting for its answer."""
    request = tf_profiler.profile_request(
        root, session, result.label, opts.duration_ms, start_ns, TraceLevels(*_levels(opts, result))
    )
    return _launch(tf_profiler.profile_method(channel), request, opts)


class Pending(NamedTuple):
    """A tracing call on its way: the call (awaitable) and when it was sent."""

    call: Any
    sent: float


def _launch(method: Callable[..., Any], request: Any, opts: CaptureOptions) -> Pending:
    call = method(request, timeout=opts.deadline_s(), metadata=_metadata(opts.token))
    return Pending(call, time.monotonic())


async def _outcome(pending: Pending, opts: CaptureOptions, result: WorkerResult) -> Any:
    """The tracing call's response, or None with the result's status and reason set (an
    error, or an empty trace)."""
    try:
        response = await pending.call
    except grpc.RpcError as e:
        result.profile_s = time.monotonic() - pending.sent
        result.status, result.reason = _classify(e, result.profile_s, opts)
        return None
    result.profile_s = time.monotonic() - pending.sent
    if response.empty_trace:
        result.status, result.reason = (
            Status.EMPTY,
            "the profiler collected no events in the window (is the job running?)",
        )
        return None
    return response


def _classify(e: grpc.RpcError, elapsed_s: float, opts: CaptureOptions) -> tuple[Status, str]:
    code, details = e.code(), e.details() or ""
    low = details.lower()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Status.TIMEOUT, f"no answer within the {opts.deadline_s():.0f} s deadline"
    if "no trace event" in low or "empty" in low:
        return Status.EMPTY, details
    if (
        code in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.RESOURCE_EXHAUSTED)
        or "another" in low
        or "already" in low
    ):
        return Status.BUSY, f"another profiling session is running on this worker ({details})"
    if code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
    ):
        return (
            Status.CRASHED,
            f"worker went away during the capture after {elapsed_s:.1f} s ({code.name}: {details})",
        )
    return Status.FAILED, f"{code.name}: {details}"


async def fetch_trace(
    channel: grpc.aio.Channel,
    opts: CaptureOptions,
    result: WorkerResult,
    session: str,
    dest: Path,
    declared: int,
) -> None:
    """Streams the worker's trace into ``dest``, verifying size and SHA-256; stops reading as
    soon as the agent sends more than the ``declared`` bytes."""
    stub = pb_grpc.TraceExportStub(channel)
    name = dest.name
    tmp = dest.with_suffix(".part")
    t = time.monotonic()
    digest = hashlib.sha256()
    expected = ""
    size = 0
    stream = stub.Fetch(
        pb.FetchRequest(session=session, name=name), timeout=600, metadata=_metadata(opts.token)
    )
    try:
        with tmp.open("wb") as out:
            async for chunk in stream:
                if chunk.offset != size:
                    raise CaptureError(f"chunk at offset {chunk.offset}, expected {size}")
                if size + len(chunk.data) > declared:
                    raise CaptureError(
                        f"the agent sent more than the {declared:,} bytes it declared"
                    )
                out.write(chunk.data)
                digest.update(chunk.data)
                size += len(chunk.data)
                expected = chunk.sha256 or expected
        if size != declared:
            raise CaptureError(f"{size:,} bytes arrived of the {declared:,} declared")
        if digest.hexdigest() != expected:
            raise CaptureError("checksum mismatch: the file changed or was corrupted in transit")
        tmp.replace(dest)
    except (grpc.RpcError, CaptureError, OSError) as e:
        stream.cancel()
        tmp.unlink(missing_ok=True)
        detail = f"{e.code().name}: {e.details()}" if isinstance(e, grpc.RpcError) else str(e)
        result.status, result.reason = (
            Status.TRANSFER_FAILED,
            f"trace captured on the worker but not brought back ({detail})",
        )
        return
    result.transfer_s = time.monotonic() - t
    result.bytes, result.file, result.status = size, str(dest), Status.OK


def capture(
    targets: Sequence[Target],
    opts: CaptureOptions,
    on_update: Callable[[WorkerResult], None] | None = None,
    watch: dict[str, Any] | None = None,
) -> CaptureResult:
    """Captures every target in one common window and pulls the traces into ``opts.logdir``.

    ``watch`` (a watcher's reason, trigger and heartbeat window) goes into ``capture.json``.

    Never raises for a worker's failure: each one's status and reason are in the result (and
    in ``capture.json``); the traces of the others are kept.

    Raises:
        CaptureError: no targets, or two targets with the same label.
    """
    labels = [t.worker_label for t in targets]
    if not targets:
        raise CaptureError("no workers to capture")
    if len(set(labels)) != len(labels):
        raise CaptureError(f"two workers share a label: {labels}")
    try:
        layout.check_label(opts.label, layout.MAX_LABEL)
        layout.check_label(opts.note, layout.MAX_NOTE)
        if opts.session:
            layout.check_plain_name(opts.session)
    except layout.LayoutError as e:
        raise CaptureError(f"session label, note or name refused: {e}") from None
    if opts.session:
        session_dir = layout.session_dir(opts.logdir, opts.session)
        session_dir.mkdir(parents=True, exist_ok=True)
    else:  # a new folder of its own, even for two captures in the same second
        session_dir = layout.new_session_dir(opts.logdir)
    session = session_dir.name
    results = [WorkerResult(t.worker_label, t.address) for t in targets]
    notify = on_update or (lambda r: None)
    _room_for_connections(len(targets))
    start_ns = run_async(
        lambda: _capture_all(
            [t.address for t in targets], opts, results, notify, session, session_dir
        )
    )
    out = CaptureResult(session, session_dir, opts, results, start_ns, watch)
    out.save()
    return out


async def _capture_all(
    addresses: Sequence[str],
    opts: CaptureOptions,
    results: Sequence[WorkerResult],
    notify: Callable[[WorkerResult], None],
    session: str,
    session_dir: Path,
) -> int:
    """The capture on this thread's event loop; returns the common start (Unix ns). At most
    ``MAX_CONCURRENT`` Hellos and transfers at a time (connections being read and files being
    written are bounded); the tracing calls all go out before the window opens."""
    gate = asyncio.Semaphore(MAX_CONCURRENT)
    channels = [grpc.aio.insecure_channel(a, options=grpc_options()) for a in addresses]
    try:

        async def hello(i: int) -> object:
            async with gate:
                return await _hello_or_fail(channels[i], opts, results[i], notify)

        hellos = await asyncio.gather(*(hello(i) for i in range(len(addresses))))
        # One instant for every worker: after the slowest Hello, plus the delay.
        start_ns = time.time_ns() + opts.delay_ms * 1_000_000
        pending = [
            _start_one(channels[i], opts, results[i], hellos[i], session, session_dir, start_ns)
            for i in range(len(addresses))
        ]
        for h, result in zip(hellos, results, strict=True):
            if h is not None:  # tracing, or failed for want of an agent
                notify(result)
        await asyncio.gather(
            *(
                _finish_one(channels[i], opts, results[i], pending[i], session_dir, notify, gate)
                for i in range(len(addresses))
            )
        )
    finally:
        await close_all(channels)
    return start_ns


async def close_all(channels: Sequence[grpc.aio.Channel]) -> None:
    """Closes ``channels`` at once (on the loop they were made on)."""
    await asyncio.gather(*(c.close() for c in channels))


_NO_AGENT = object()


async def _hello_or_fail(
    channel: grpc.aio.Channel,
    opts: CaptureOptions,
    result: WorkerResult,
    notify: Callable[[WorkerResult], None],
) -> object:
    result.status = Status.CONNECTING
    notify(result)
    try:
        hello = await _hello(channel, opts, result)
    except CaptureError as e:
        result.status, result.reason = e.status, str(e)
        notify(result)
        return None
    if hello is None:
        return _NO_AGENT
    result.role, result.index, result.strategy = hello.role, hello.index, hello.strategy
    result.framework = hello.framework
    return hello


def _start_one(
    channel: grpc.aio.Channel,
    opts: CaptureOptions,
    result: WorkerResult,
    hello: object,
    session: str,
    session_dir: Path,
    start_ns: int,
) -> Pending | None:
    """Plans the worker's capture and sends its tracing call; None when it has none to wait
    for (unreachable, refused, or no agent and no shared storage: its status says why)."""
    if hello is None:
        return None  # unreachable / refused: already reported
    agent = hello if isinstance(hello, pb.HelloResponse) else None
    result.host_tracer_level, result.python_tracer_level, result.plan_note = plan_levels(
        agent, opts
    )
    if agent is None and not opts.shared_storage:
        result.status = Status.FAILED
        result.reason = (
            "no PodScope agent at this address (a bare TF profiler server writes the trace to the "
            "worker's own disk): start podscope.agent in the worker, or pass --shared-storage "
            "if the logdir is on storage the workers share"
        )
        return None
    result.status = Status.TRACING
    if agent is None:  # a bare TF profiler server writing into the shared logdir
        root = session_dir.parent.resolve()
        return _launch_profile(channel, opts, result, session, start_ns, root)
    return _launch_trace(channel, opts, result, session, start_ns)


async def _finish_one(
    channel: grpc.aio.Channel,
    opts: CaptureOptions,
    result: WorkerResult,
    pending: Pending | None,
    session_dir: Path,
    notify: Callable[[WorkerResult], None],
    gate: asyncio.Semaphore,
) -> None:
    """Waits for the worker's tracing call (holding nothing), then brings its trace home
    (one of ``gate``'s transfers)."""
    if pending is None:
        return
    response = await _outcome(pending, opts, result)
    if response is None:
        notify(result)
        return
    if not isinstance(response, pb.TraceResponse):  # a bare TF profiler server
        _check_shared(result, session_dir / layout.xplane_name(result.label))
        notify(result)
        return
    result.framework = response.framework or result.framework
    try:
        dest = session_dir / _answered_name(result.label, response.name)
    except layout.LayoutError as e:
        result.status, result.reason = Status.FAILED, f"the agent named no trace of it: {e}"
        notify(result)
        return
    async with gate:
        result.status = Status.TRANSFERRING
        notify(result)
        await fetch_trace(channel, opts, result, session_dir.name, dest, int(response.size))
    notify(result)


def _answered_name(label: str, name: str) -> str:
    """The file an agent says it wrote for worker ``label``: ``<label><suffix>`` with a known
    trace suffix (an XPlane, or a PyTorch agent's Kineto JSON); an older agent names none.

    Raises:
        layout.LayoutError: any other name (a hostile agent chooses no file of the session).
    """
    if not name:
        return layout.xplane_name(label)
    suffix = layout.trace_suffix(name)
    if suffix is None or name != layout.trace_name(label, suffix):
        raise layout.LayoutError(f"{name!r} is not a trace file of {label}")
    return name


#: Hellos and transfers at a time: connections being read and files being written are
#: bounded whatever the pod's size (the traces of 256 agents on one machine took 5.8 s to
#: bring home at 16; more gained nothing there).
MAX_CONCURRENT = 32

T = TypeVar("T")


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``make()``'s coroutine run to its end on an event loop of its own: in this thread, or,
    where this thread already runs one (a notebook's), in a thread of its own, so a capture is
    a plain call from anywhere."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as e:  # handed to the caller's thread as it is
            box["error"] = e

    thread = threading.Thread(target=run, name="podscope-capture")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _room_for_connections(n: int) -> None:
    """A capture holds one connection per worker through the window: raises this process's
    open-file limit towards its hard limit when the soft one leaves too little room."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = n * 2 + 256
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    except (ImportError, ValueError, OSError):  # not on this platform, or not allowed
        pass


def _check_shared(result: WorkerResult, path: Path) -> None:
    if path.exists():
        result.status, result.file, result.bytes = Status.OK, str(path), path.stat().st_size
    else:
        result.status, result.reason = (
            Status.TRANSFER_FAILED,
            f"the worker reported a trace but {path} does not exist (is the logdir really shared?)",
        )
