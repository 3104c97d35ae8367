"""Deny by default: the agent's token check before any message is read, and its call limits.

    >>> server = grpc.aio.server(interceptors=[TokenInterceptor("s3cret")])
    >>> gate = Gate(Limits())          # then, in each handler:
    >>> async with gate.admit(context, "Fetch"): ...

The token is checked by an interceptor on the call's metadata: a call without it is answered
UNAUTHENTICATED by a handler that never reads the request (a half-open call costs nothing).
Calls that pass are admitted by a ``Gate``: a total and a per-peer limit on calls at once, a
smaller per-peer limit on ``Fetch`` streams, and an idle timeout on every read and write, so
idle or slow clients cannot starve ``Hello`` and captures. Every refusal is logged once,
with the peer's address.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc

TOKEN_HEADER = "x-podscope-token"
log = logging.getLogger("podscope.agent")
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """How much one agent serves at once.

    Attributes:
        max_calls: calls in progress, all peers together.
        max_calls_per_peer: calls in progress from one peer address (ports ignored).
        max_streams_per_peer: ``Fetch`` streams in progress to one peer address (each holds
            at most one 2 MiB chunk in memory while the peer is slow).
        idle_timeout_s: the longest wait for a request message or for the peer to take a chunk.
    """

    max_calls: int = 256
    max_calls_per_peer: int = 64
    max_streams_per_peer: int = 32
    idle_timeout_s: float = 10.0


def peer_host(peer: str) -> str:
    """The address of a gRPC peer string without its port: ``ipv4:10.0.0.5:4321`` → ``10.0.0.5``,
    ``ipv6:[::1]:4321`` → ``::1``."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1 : rest.find("]")]
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    return peer


async def refuse(
    context: grpc.aio.ServicerContext[Any, Any], method: str, code: grpc.StatusCode, reason: str
) -> NoReturn:
    """Logs the refusal once, with the peer's address, and ends the call with ``code``."""
    log.warning("refused %s from %s: %s", method, context.peer(), reason)
    await context.abort(code, reason)
    raise AssertionError("unreachable: abort raises")


def _method_name(full: str) -> str:
    return full.rsplit("/", 1)[-1] or full


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Answers every call without the shared token UNAUTHENTICATED, unknown methods included,
    before any request message is read."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    def _authentic(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> bool:
        sent = dict(metadata or ()).get(TOKEN_HEADER, "")
        sent_b = sent if isinstance(sent, bytes) else sent.encode()
        return hmac.compare_digest(sent_b, self._token)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        if self._authentic(handler_call_details.invocation_metadata):
            return await continuation(handler_call_details)
        method = _method_name(handler_call_details.method)

        async def unauthenticated(requests: object, context: grpc.aio.ServicerContext) -> None:
            await refuse(
                context, method, grpc.StatusCode.UNAUTHENTICATED, "wrong or missing PodScope token"
            )

        # A stream-request handler: gRPC hands it the call without waiting for a message.
        return grpc.stream_unary_rpc_method_handler(unauthenticated)


class Gate:
    """Admits calls within ``Limits`` and bounds each read and write by the idle timeout.

    Used from the server's one event loop only, so its counters need no lock.
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._calls: Counter[str] = Counter()
        self._streams: Counter[str] = Counter()

    @asynccontextmanager
    async def admit(
        self, context: grpc.aio.ServicerContext[Any, Any], method: str
    ) -> AsyncIterator[None]:
        """Holds one call slot of the peer for the ``with`` block.

        Raises (through ``context.abort``): RESOURCE_EXHAUSTED over a limit.
        """
        peer, lim = peer_host(context.peer()), self.limits
        if sum(self._calls.values()) >= lim.max_calls:
            await refuse(context, method, grpc.StatusCode.RESOURCE_EXHAUSTED, "agent busy")
        reason = f"{lim.max_calls_per_peer} calls from {peer} in progress"
        async with self._slot(self._calls, peer, lim.max_calls_per_peer, context, method, reason):
            yield

    @asynccontextmanager
    async def stream(
        self, context: grpc.aio.ServicerContext[Any, Any], method: str
    ) -> AsyncIterator[None]:
        """Holds one transfer slot of the peer (taken once its request has arrived: a call
        that never sends one holds only a call slot, until the idle timeout)."""
        peer, lim = peer_host(context.peer()), self.limits
        reason = f"{lim.max_streams_per_peer} transfers to {peer} in progress"
        async with self._slot(
            self._streams, peer, lim.max_streams_per_peer, context, method, reason
        ):
            yield

    @asynccontextmanager
    async def _slot(
        self,
        counts: Counter[str],
        peer: str,
        limit: int,
        context: grpc.aio.ServicerContext[Any, Any],
        method: str,
        reason: str,
    ) -> AsyncIterator[None]:
        """One of ``peer``'s ``limit`` slots in ``counts`` for the ``with`` block, or a refusal."""
        if counts[peer] >= limit:
            await refuse(context, method, grpc.StatusCode.RESOURCE_EXHAUSTED, reason)
        counts[peer] += 1
        try:
            yield
        finally:
            counts[peer] -= 1
            if not counts[peer]:  # peers come and go: keep no zero counts
                del counts[peer]

    async def read(self, context: grpc.aio.ServicerContext[Any, Any], method: str) -> Any:
        """The call's one request message, waited for at most the idle timeout."""
        try:
            message = await asyncio.wait_for(context.read(), self.limits.idle_timeout_s)
        except asyncio.TimeoutError:
            await refuse(
                context,
                method,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no request within {self.limits.idle_timeout_s:g} s",
            )
        if message is grpc.aio.EOF:
            await refuse(context, method, grpc.StatusCode.INVALID_ARGUMENT, "no request message")
        return message

    async def write(
        self, context: grpc.aio.ServicerContext[Any, Any], method: str, message: Any
    ) -> None:
        """Sends one message. A peer that takes none within the idle timeout is told
        DEADLINE_EXCEEDED; the call, and the caller's slots, end when the peer reads that
        status or goes away (the status queues behind the unread data), so a peer never holds
        more unread data here than its transfer slots."""
        try:
            await asyncio.wait_for(context.write(message), self.limits.idle_timeout_s)
        except asyncio.TimeoutError:
            await refuse(
                context,
                method,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the peer took no data for {self.limits.idle_timeout_s:g} s",
            )
