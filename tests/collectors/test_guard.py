"""The agent as a hostile peer on the network finds it: nothing done without the token, no
path outside its folder, and no way to starve Hello and captures with idle calls."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from podscope.collectors import agent
from podscope.collectors.capture import (
    EXIT_OK,
    CaptureOptions,
    Target,
    WorkerResult,
    capture,
    fetch_trace,
)
from podscope.collectors.export_service import TOKEN_HEADER, Limits, TraceLevels, serve
from podscope.collectors.guard import peer_host
from podscope.collectors.proto import trace_export_pb2 as pb
from podscope.collectors.proto import trace_export_pb2_grpc as pb_grpc
from podscope.collectors.status import Status
from podscope.collectors.tf_profiler import call_profile, profile_request
from tests.collectors.fake_agent import fake_agent, own_channel
from tests.collectors.flood import from_address
from tests.collectors.loop_agent import loop_agent, rss_mib

TOKEN = "s3cret"
GOOD = ((TOKEN_HEADER, TOKEN),)


def half_open(channel: grpc.Channel, method: str, metadata: Any, stop: threading.Event) -> Any:
    """A call that sends its headers and then nothing (the request iterator blocks)."""

    def never() -> Iterator[bytes]:
        stop.wait()
        return
        yield b""

    call = channel.stream_stream(f"/podscope.export.TraceExport/{method}")
    return call(never(), metadata=metadata)


def opts(tmp_path: Path, **kw: Any) -> CaptureOptions:
    base = {"logdir": tmp_path / "logdir", "duration_ms": 100, "delay_ms": 50, "retries": 0}
    return CaptureOptions(**{**base, **kw, "token": TOKEN})


@contextmanager
def held_open(address: str, n: int, method: str, metadata: Any) -> Iterator[list[Any]]:
    stop = threading.Event()
    with grpc.insecure_channel(address) as ch:
        calls = [half_open(ch, method, metadata, stop) for _ in range(n)]
        try:
            yield calls
        finally:
            stop.set()
            for c in calls:
                c.cancel()


def test_peer_host() -> None:
    assert peer_host("ipv4:10.0.0.5:4321") == "10.0.0.5"
    assert peer_host("ipv6:[::1]:4321") == "::1"
    assert peer_host("unix:/tmp/s") == "unix:/tmp/s"


def test_unauthenticated_calls_are_refused_unread_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="podscope.agent")
    with fake_agent(tmp_path / "a", token=TOKEN) as (address, traced):
        with held_open(address, 16, "Hello", ()) as calls:
            # Answered while the callers still hold the call open and never sent a message:
            # UNAUTHENTICATED, or the end of the connection for calls the client sent after
            # the door read the first call and hung up.
            codes = []
            for call in calls:
                with pytest.raises(grpc.RpcError) as err:
                    next(call)
                codes.append(err.value.code())
            assert grpc.StatusCode.UNAUTHENTICATED in codes
            assert set(codes) <= {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE}
            result = capture([Target(address)], opts(tmp_path))
        assert result.exit_code() == EXIT_OK and len(traced) == 1
    # One line per address and minute, however many calls it makes.
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and "127.0.0.1" in refusals[0] and "token" in refusals[0]


def test_a_token_holder_cannot_starve_hello_or_captures(tmp_path: Path) -> None:
    """From each of 4 other addresses: 64 half-open calls and 32 unread ``Fetch`` streams (as
    many as the agent admits). The collector's Hello and capture still answer at once."""
    root = tmp_path / "a"
    (root / "s").mkdir(parents=True)
    (root / "s" / "big.xplane.pb").write_bytes(os.urandom(24 << 20))
    with fake_agent(root, token=TOKEN) as (address, _), ExitStack() as stack:
        port = int(address.rsplit(":", 1)[1])
        refused = 0
        for i in range(4):
            other = stack.enter_context(from_address(f"127.0.2.{i + 1}", port))
            stack.enter_context(held_open(other, 64, "Fetch", GOOD))  # headers, no request
            slow = stack.enter_context(grpc.insecure_channel(other))
            unread = [  # requested, never read
                pb_grpc.TraceExportStub(slow).Fetch(
                    pb.FetchRequest(session="s", name="big.xplane.pb"), metadata=GOOD
                )
                for _ in range(32)
            ]
            for call in unread:
                stack.callback(call.cancel)
                try:
                    next(call)
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    refused += 1
        assert refused > 0  # the agent's limits were reached
        stub = pb_grpc.TraceExportStub(stack.enter_context(grpc.insecure_channel(address)))
        t = time.monotonic()
        assert stub.Hello(pb.HelloRequest(), metadata=GOOD, timeout=5).role == "worker"
        result = capture([Target(address)], opts(tmp_path))
        assert result.exit_code() == EXIT_OK, result.workers
        assert time.monotonic() - t < 8


def wait_for(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "state not reached"
        time.sleep(0.05)


def fetch_when_admitted(stub: pb_grpc.TraceExportStub, request: pb.FetchRequest) -> list[Any]:
    """The chunks of ``request`` once the agent admits it (waits for the state, 30 s at most)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return list(stub.Fetch(request, timeout=5))
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def test_idle_calls_are_cut_off_and_limits_recover(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="podscope.agent")
    root = tmp_path / "a"
    (root / "s").mkdir(parents=True)
    (root / "s" / "big.xplane.pb").write_bytes(os.urandom(48 << 20))
    (root / "s" / "w.xplane.pb").write_bytes(b"x" * 1000)
    server = serve(root, limits=Limits(max_streams_per_peer=2, idle_timeout_s=0.5))
    address = f"127.0.0.1:{server.port}"
    stub = pb_grpc.TraceExportStub(grpc.insecure_channel(address))
    small = pb.FetchRequest(session="s", name="w.xplane.pb")
    try:
        with held_open(address, 1, "Fetch", ()) as (idle,):
            with pytest.raises(grpc.RpcError) as err:  # no request: cut off after 0.5 s
                next(idle)
            assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        unread = [stub.Fetch(pb.FetchRequest(session="s", name="big.xplane.pb")) for _ in range(2)]
        for call in unread:  # both streams admitted: each sends its first chunk
            assert next(call).offset == 0
        with pytest.raises(grpc.RpcError) as err:  # a third transfer to this peer
            list(stub.Fetch(small, timeout=5))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # The agent gives up on a peer that takes no data for the idle timeout; the slot stays
        # taken until the call really ends (the peer reads its status or goes away), so a peer
        # never holds more unread data on the agent than its transfer slots.
        wait_for(lambda: any("took no data" in r.getMessage() for r in caplog.records))
        with pytest.raises(grpc.RpcError) as err:
            list(unread[0])
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        unread[1].cancel()
        assert b"".join(c.data for c in fetch_when_admitted(stub, small)) == b"x" * 1000
    finally:
        server.stop()


def test_slow_readers_hold_bounded_memory_and_leave_the_collector_its_transfer(
    tmp_path: Path,
) -> None:
    """32 ``Fetch`` streams from each of 4 addresses, each reading a chunk a second, against an
    agent in a training process: at most ``Limits.max_streams`` are admitted, the agent's
    memory grows by a bounded amount, and a capture is ok meanwhile."""
    root = tmp_path / "root"
    (root / "s").mkdir(parents=True)
    (root / "s" / "big.xplane.pb").write_bytes(os.urandom(64 << 20))
    stats = tmp_path / "stats.json"
    with loop_agent(root, TOKEN, stats) as (proc, port), ExitStack() as stack:
        before = rss_mib(proc.pid)
        admitted, refused, stop = [0], [0], threading.Event()

        def slow_reader(target: str) -> None:
            with grpc.insecure_channel(target) as ch:
                call = pb_grpc.TraceExportStub(ch).Fetch(
                    pb.FetchRequest(session="s", name="big.xplane.pb"), metadata=GOOD
                )
                try:
                    next(call)
                    admitted[0] += 1
                    while not stop.wait(1.0):
                        next(call)
                except grpc.RpcError as e:
                    refused[0] += e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                finally:
                    call.cancel()

        readers = []
        for i in range(4):
            other = stack.enter_context(from_address(f"127.0.8.{i + 1}", port))
            readers += [threading.Thread(target=slow_reader, args=(other,)) for _ in range(32)]
        for t in readers:
            t.start()
        wait_for(lambda: admitted[0] + refused[0] == len(readers), timeout_s=60)
        time.sleep(3)  # a few chunks taken by each
        grown = rss_mib(proc.pid) - before
        print(f"slow readers: {admitted[0]} admitted, {refused[0]} refused, {grown:.0f} MiB")
        result = capture([Target(f"127.0.0.1:{port}")], opts(tmp_path))
        stop.set()
        for t in readers:
            t.join()
    assert admitted[0] <= Limits().max_streams and refused[0] >= len(readers) - admitted[0]
    assert grown < 100, f"{grown:.0f} MiB for {admitted[0]} slow readers"
    assert result.exit_code() == EXIT_OK, result.workers


@pytest.mark.parametrize(
    ("session", "name", "duration_ms", "ahead_s", "code"),
    [
        ("../../y", "h.xplane.pb", 100, 0, grpc.StatusCode.PERMISSION_DENIED),
        ("s", "../h.xplane.pb", 100, 0, grpc.StatusCode.PERMISSION_DENIED),
        ("/tmp/x", "h.xplane.pb", 100, 0, grpc.StatusCode.PERMISSION_DENIED),
        ("s", "h.txt", 100, 0, grpc.StatusCode.INVALID_ARGUMENT),
        ("s", "h.xplane.pb", 0, 0, grpc.StatusCode.INVALID_ARGUMENT),
        ("s", "h.xplane.pb", 10**9, 0, grpc.StatusCode.INVALID_ARGUMENT),
        ("s", "h.xplane.pb", 100, 3600, grpc.StatusCode.INVALID_ARGUMENT),
        ("s", "h.xplane.pb", 100, 299, grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_hostile_trace_requests_write_nothing(
    tmp_path: Path, session: str, name: str, duration_ms: int, ahead_s: int, code: grpc.StatusCode
) -> None:
    root = tmp_path / "deep" / "er" / "root"
    with fake_agent(root, token=TOKEN) as (address, traced):
        stub = pb_grpc.TraceExportStub(grpc.insecure_channel(address))
        request = pb.TraceRequest(
            session=session,
            name=name,
            duration_ms=duration_ms,
            start_timestamp_ns=time.time_ns() + ahead_s * 10**9,
        )
        with pytest.raises(grpc.RpcError) as err:
            stub.Trace(request, metadata=GOOD, timeout=5)
    assert err.value.code() == code and not traced
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_trace_asked_for_far_ahead_leaves_the_captures_before_it_alone(tmp_path: Path) -> None:
    """A token holder's Trace 50 s ahead (within the limit) waits without the tracer: captures
    now are ok, and cancelling it leaves no trace."""
    with fake_agent(tmp_path / "root", token=TOKEN) as (address, traced):
        ch = grpc.insecure_channel(address)
        ahead = pb_grpc.TraceExportStub(ch).Trace.future(
            pb.TraceRequest(
                session="s",
                name="h.xplane.pb",
                duration_ms=60_000,
                start_timestamp_ns=time.time_ns() + 50 * 10**9,
            ),
            metadata=GOOD,
        )
        first = capture([Target(address)], opts(tmp_path))
        second = capture([Target(address)], opts(tmp_path))
        ahead.cancel()
        ch.close()
    assert first.exit_code() == EXIT_OK and second.exit_code() == EXIT_OK
    assert len(traced) == 2 and all(t.duration_ms == 100 for t in traced)


def test_tensorflow_profile_requests_are_not_served(tmp_path: Path) -> None:
    """TF's ProfileRequest, sent straight to the agent, with a path outside its folder."""
    with fake_agent(tmp_path / "root", token=TOKEN) as (address, traced):
        request = profile_request(tmp_path / "x", "../../y", "h", 8000, 0, TraceLevels())
        for metadata, code in (
            ((), grpc.StatusCode.UNAUTHENTICATED),
            (GOOD, grpc.StatusCode.UNIMPLEMENTED),
        ):
            # A connection each: the door ends a refused call's connection, and a call sent
            # on it before the client has seen it close is UNAVAILABLE. A channel each was not
            # enough: gRPC shares connections between channels (make test's run of 2992a4c).
            with own_channel(address) as ch:
                t = time.monotonic()
                with pytest.raises(grpc.RpcError) as err:
                    call_profile(ch, request, timeout_s=10, metadata=metadata)
                assert err.value.code() == code and time.monotonic() - t < 5
        result = capture([Target(address)], opts(tmp_path))  # not busy
    assert result.exit_code() == EXIT_OK and len(traced) == 1
    assert not (tmp_path / "y").exists() and not (tmp_path / "x").exists()


def test_collector_stops_reading_at_the_declared_size(tmp_path: Path) -> None:
    """An agent that streams without end: the collector reads one chunk past what it was told."""
    sent: list[int] = []

    def endless(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        offset = 0
        while context.is_active() and offset < 1 << 30:
            sent.append(offset)
            yield pb.Chunk(data=b"\0" * (1 << 20), offset=offset, total_size=1).SerializeToString()
            offset += 1 << 20

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "podscope.export.TraceExport",
                {"Fetch": grpc.unary_stream_rpc_method_handler(endless)},
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        result = WorkerResult("w", f"127.0.0.1:{port}")

        async def fetch() -> None:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                dest = tmp_path / "w.xplane.pb"
                await fetch_trace(ch, opts(tmp_path), result, "s", dest, 3 << 20)

        asyncio.run(fetch())
    finally:
        server.stop(0)
    assert result.status == Status.TRANSFER_FAILED and "more than" in result.reason
    assert not list(tmp_path.glob("w.*")) and len(sent) < 64


class FakeTf:
    """TensorFlow's profiler API as the agent uses it, recorded."""

    __version__ = "2.21.0"

    def __init__(self) -> None:
        self.started: list[int] = []
        outer = self

        class Server:
            @staticmethod
            def start(port: int) -> None:
                outer.started.append(port)

        class Experimental:
            server = Server

        class Profiler:
            experimental = Experimental

        self.profiler = Profiler


def test_tf_profiler_server_is_opt_in_and_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tf = FakeTf()
    a = agent.start(repository_root=tmp_path, tf=tf)
    a.stop()
    assert tf.started == [] and a.profiler_address == ""
    with caplog.at_level(logging.WARNING, logger="podscope.agent"):
        b = agent.start(repository_root=tmp_path, tf=tf, tf_profiler_port=6009)
        b.stop()
    assert tf.started == [6009] and b.profiler_address == "127.0.0.1:6009"
    assert "no authentication" in caplog.text and "every interface" in caplog.text


def test_in_process_tracer_refuses_a_plan_it_cannot_honour(tmp_path: Path) -> None:
    tracer = agent.TfTracer(FakeTf())
    with pytest.raises(agent.TracerError, match="host tracer"):
        tracer(tmp_path / "s" / "w.xplane.pb", 0, 100, TraceLevels(host=0, python=1))
