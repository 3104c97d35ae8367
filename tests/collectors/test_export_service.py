"""The export service streams traces intact and refuses anything outside its root."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import grpc
import pytest

from podscope.collectors.export_service import TOKEN_HEADER, AgentServer, safe_path, serve
from podscope.collectors.proto import trace_export_pb2 as pb
from podscope.collectors.proto import trace_export_pb2_grpc as pb_grpc
from tests.collectors.fake_agent import own_channel


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "s1").mkdir(parents=True)
    (r / "s1" / "h_1.xplane.pb").write_bytes(os.urandom(9 << 20))  # > 2 chunks
    (tmp_path / "secret.xplane.pb").write_bytes(b"secret")
    (r / "s1" / "link.xplane.pb").symlink_to(tmp_path / "secret.xplane.pb")
    (r / "escape").symlink_to(tmp_path)
    return r


def stub_for(root: Path, token: str | None = None) -> tuple[AgentServer, pb_grpc.TraceExportStub]:
    server = serve(root, token=token)
    return server, pb_grpc.TraceExportStub(grpc.insecure_channel(f"127.0.0.1:{server.port}"))


def fetch(
    stub: pb_grpc.TraceExportStub, session: str, name: str, token: str | None = None
) -> bytes:
    md = ((TOKEN_HEADER, token),) if token else ()
    chunks = list(stub.Fetch(pb.FetchRequest(session=session, name=name), metadata=md, timeout=30))
    data = b"".join(c.data for c in chunks)
    assert hashlib.sha256(data).hexdigest() == chunks[-1].sha256
    return data


def test_list_and_fetch_round_trip(root: Path) -> None:
    server, stub = stub_for(root)
    try:
        names = [(f.session, f.name) for f in stub.List(pb.ListRequest(), timeout=10).files]
        # only what Fetch serves: no symlink out of the root, file or session folder
        assert names == [("s1", "h_1.xplane.pb")]
        assert fetch(stub, "s1", "h_1.xplane.pb") == (root / "s1" / "h_1.xplane.pb").read_bytes()
    finally:
        server.stop(0)


@pytest.mark.parametrize(
    ("session", "name", "code"),
    [
        ("..", "secret.xplane.pb", grpc.StatusCode.PERMISSION_DENIED),
        ("s1", "../../secret.xplane.pb", grpc.StatusCode.PERMISSION_DENIED),
        ("/etc", "passwd", grpc.StatusCode.PERMISSION_DENIED),
        ("s1", "link.xplane.pb", grpc.StatusCode.PERMISSION_DENIED),
        ("escape", "secret.xplane.pb", grpc.StatusCode.PERMISSION_DENIED),
        ("s1", "missing.xplane.pb", grpc.StatusCode.NOT_FOUND),
    ],
)
def test_refuses_paths_outside_the_root(
    root: Path, session: str, name: str, code: grpc.StatusCode
) -> None:
    server, stub = stub_for(root)
    try:
        with pytest.raises(grpc.RpcError) as err:
            fetch(stub, session, name)
        assert err.value.code() == code
    finally:
        server.stop(0)


def test_token_is_required_when_set(root: Path) -> None:
    server, stub = stub_for(root, token="s3cret")
    try:
        for wrong in (None, "nope"):
            # A connection each (``own_channel``): the door ends a refused call's connection.
            with (
                own_channel(f"127.0.0.1:{server.port}") as ch,
                pytest.raises(grpc.RpcError) as err,
            ):
                fetch(pb_grpc.TraceExportStub(ch), "s1", "h_1.xplane.pb", token=wrong)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert len(fetch(stub, "s1", "h_1.xplane.pb", token="s3cret")) == 9 << 20
    finally:
        server.stop(0)


def test_safe_path_rules(tmp_path: Path) -> None:
    assert safe_path(tmp_path, "a", "b.xplane.pb") == (tmp_path / "a" / "b.xplane.pb").resolve()
    for bad in ("", ".", "..", "a/b", "a\\b", "a\x00"):
        with pytest.raises(PermissionError):
            safe_path(tmp_path, bad, "x")


def test_an_agent_on_a_non_loopback_address_needs_a_token(tmp_path: Path) -> None:
    from podscope.collectors import agent

    for host in ("0.0.0.0", "::", "10.0.0.5", "trainer-1"):
        with pytest.raises(agent.AgentError, match="token"):
            agent.start(host=host, repository_root=tmp_path, tf=object())
    assert agent.is_loopback("127.0.0.1") and agent.is_loopback("::1")
    assert agent.is_loopback("localhost") and not agent.is_loopback("0.0.0.0")
    with pytest.raises(agent.AgentError, match="at least 16"):
        agent.start(host="0.0.0.0", token="s3cret", repository_root=tmp_path, tf=object())
    long = "s3cret-s3cret-s3cret"
    ok = agent.start(host="0.0.0.0", token=long, repository_root=tmp_path, tf=object())
    ok.stop()
    local = agent.start(repository_root=tmp_path, tf=object())  # loopback
    local.stop()
    # a path as a str, as the README's example writes it (it raised AttributeError: mkdir)
    as_text = agent.start(repository_root=str(tmp_path / "traces"), tf=object())
    as_text.stop()
    assert (tmp_path / "traces").is_dir()
    from podscope.collectors.capture import CaptureOptions

    assert CaptureOptions(logdir=str(tmp_path)).logdir == tmp_path  # type: ignore[arg-type]
