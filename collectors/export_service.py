"""PodScope's trace export service (gRPC): lists and streams trace files under one root.

No TensorFlow here: the agent (``collectors.agent``) runs it inside training processes, and
tests run it alone. It serves only files below its repository root: names are single path
components, and the resolved path (symlinks followed) must stay inside the root. An optional
shared token is checked on every call (metadata ``x-podscope-token``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from collectors.proto import trace_export_pb2 as pb
from collectors.proto import trace_export_pb2_grpc as pb_grpc
from trace_parsers import layout

TOKEN_HEADER = "x-podscope-token"
#: Below gRPC's default 4 MiB receive limit, so any client can read the stream.
CHUNK_BYTES = 2 << 20
#: gRPC message limit for both ends (a chunk plus headroom).
MAX_MESSAGE_BYTES = 16 << 20


@dataclass(frozen=True)
class WorkerInfo:
    """What the agent tells collectors about its process (``Hello``)."""

    role: str = ""
    index: int = 0
    strategy: str = ""
    tf_version: str = ""
    profiler_address: str = ""


def safe_path(root: Path, session: str, name: str) -> Path:
    """``root/session/name`` if both are plain names and it resolves inside ``root``.

    Raises:
        PermissionError: a path separator, ``..``, an absolute name, or a symlink leading out.
    """
    try:
        return layout.confined(root, session, name)
    except layout.LayoutError as e:
        raise PermissionError(str(e)) from None


class TraceExportServicer(pb_grpc.TraceExportServicer):
    """Serves ``Hello``, ``List`` and ``Fetch`` for one repository root."""

    def __init__(self, root: Path, info: WorkerInfo, token: str | None = None) -> None:
        self.root = root
        self.info = info
        self.token = token

    def _check_token(self, context: grpc.ServicerContext) -> None:
        if self.token is None:
            return
        sent = dict(context.invocation_metadata()).get(TOKEN_HEADER, "")
        if not hmac.compare_digest(str(sent), self.token):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong or missing PodScope token")

    def Hello(self, request: pb.HelloRequest, context: grpc.ServicerContext) -> pb.HelloResponse:
        self._check_token(context)
        i = self.info
        return pb.HelloResponse(
            host=socket.gethostname(),
            pid=os.getpid(),
            role=i.role,
            index=i.index,
            strategy=i.strategy,
            repository_root=str(self.root),
            tf_version=i.tf_version,
            profiler_address=i.profiler_address,
        )

    def List(self, request: pb.ListRequest, context: grpc.ServicerContext) -> pb.ListResponse:
        self._check_token(context)
        files = []
        if self.root.is_dir():
            for session in sorted(p for p in self.root.iterdir() if p.is_dir()):
                for f in sorted(session.iterdir()):
                    if f.is_file() and f.name.endswith(layout.XPLANE_SUFFIXES):
                        files.append(
                            pb.TraceFile(session=session.name, name=f.name, size=f.stat().st_size)
                        )
        return pb.ListResponse(files=files)

    def Fetch(self, request: pb.FetchRequest, context: grpc.ServicerContext) -> Iterator[pb.Chunk]:
        self._check_token(context)
        try:
            path = safe_path(self.root, request.session, request.name)
        except PermissionError as e:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))
        if not path.is_file():
            context.abort(grpc.StatusCode.NOT_FOUND, f"no trace {request.session}/{request.name}")
        size = path.stat().st_size
        digest = hashlib.sha256()
        offset = 0
        with path.open("rb") as f:
            while True:
                data = f.read(CHUNK_BYTES)
                digest.update(data)
                last = offset + len(data) >= size or not data
                yield pb.Chunk(
                    data=data,
                    offset=offset,
                    total_size=size,
                    sha256=digest.hexdigest() if last else "",
                )
                offset += len(data)
                if last:
                    return


def grpc_options() -> list[tuple[str, Any]]:
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]


def serve(
    root: Path,
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    token: str | None = None,
    info: WorkerInfo | None = None,
    extra_handlers: Callable[[grpc.Server], None] | None = None,
) -> tuple[grpc.Server, int]:
    """Starts the export service (plus ``extra_handlers``) and returns (server, bound port).

    Raises:
        OSError: the port could not be bound.
    """
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=grpc_options())
    pb_grpc.add_TraceExportServicer_to_server(
        TraceExportServicer(root, info or WorkerInfo(), token), server
    )
    if extra_handlers:
        extra_handlers(server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if not bound:
        raise OSError(f"cannot bind the PodScope export service to {host}:{port}")
    server.start()
    return server, bound
