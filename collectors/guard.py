"""Deny by default: the agent's token check before any message is read, and its call limits.

    >>> server = grpc.aio.server(interceptors=[TokenInterceptor("s3cret")])
    >>> gate = Gate(Limits())          # then, in each handler:
    >>> async with gate.admit(context, "Fetch"): ...

The token is checked by an interceptor on the call's metadata: a call without it is answered
UNAUTHENTICATED by a handler that never reads the request (a half-open call costs nothing).
Calls that pass are admitted by a ``Gate``: a total and a per-peer limit on calls at once, a
smaller per-peer limit on ``Fetch`` streams, and an idle timeout on every read and write, so
idle or slow clients cannot starve ``Hello`` and captures. Refusals are logged with the
peer's address, at most once a minute per address (``collectors.front_door.Quiet``).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc

from podscope.collectors.front_door import TOKEN_HEADER, FrontDoor, Quiet

log = logging.getLogger("podscope.agent")
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """How much one agent serves at once.

    Attributes:
        max_calls: calls in progress, all peers together.
        max_calls_per_peer: calls in progress from one peer address (ports ignored).
        max_streams: ``Fetch`` streams in progress, all peers together (each holds one chunk
            here and gRPC's buffers while its peer is slow: about 1 MiB, measured).
        max_streams_per_peer: ``Fetch`` streams in progress to one peer address.
        idle_timeout_s: the longest wait for a request message or for the peer to take a chunk.
        reserved: of ``max_calls`` and of ``max_streams``, the last slots, which only a peer
            holding at most one call (one stream) may take: a collector's own calls get one
            whatever a token holder does from a few addresses.
    """

    max_calls: int = 256
    max_calls_per_peer: int = 64
    max_streams: int = 32
    max_streams_per_peer: int = 8
    idle_timeout_s: float = 10.0
    reserved: int = 8


def peer_host(peer: str) -> str:
    """The address of a gRPC peer string without its port: ``ipv4:10.0.0.5:4321`` → ``10.0.0.5``,
    ``ipv6:[::1]:4321`` → ``::1``."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1 : rest.find("]")]
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    return peer


class Peers:
    """Who a call's peer is, and what the front door learns from its calls.

    Behind the front door (``collectors.front_door``) every call comes from the relay, over a
    unix socket it names: ``of`` maps that name to the client's address. ``refused`` counts a refused
    call toward the peer's ban (wrong tokens only: a collector told the agent is busy is never
    banned for it)."""

    def __init__(self) -> None:
        self._door: FrontDoor | None = None
        self.quiet = Quiet()

    def bind(self, door: FrontDoor) -> None:
        """Names peers through the front door that relays them (set when it starts)."""
        self._door = door
        self.quiet = door.quiet

    def of(self, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        raw = context.peer()
        kind, _, name = raw.partition(":")
        found = self._door.peer_of(name) if self._door is not None and kind == "unix" else None
        return found if found is not None else peer_host(raw)

    def refused(self, peer: str) -> None:
        if self._door is not None:
            self._door.refused(peer)


async def refuse(
    context: grpc.aio.ServicerContext[Any, Any],
    method: str,
    code: grpc.StatusCode,
    reason: str,
    peers: Peers | None = None,
) -> NoReturn:
    """Logs the refusal (at most once a minute per peer, with a count of the rest) with the
    peer's address, counts a wrong token toward the peer's ban, and ends the call with ``code``."""
    peers = peers or Peers()
    peer = peers.of(context)
    kind = f"{method} {re.sub(r'[0-9.]+', '#', reason)}"  # one line a minute per kind of refusal
    peers.quiet.warn(peer, kind, "refused %s from %s: %s", method, peer, reason)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        peers.refused(peer)
    await context.abort(code, reason)
    raise AssertionError("unreachable: abort raises")


def _method_name(full: str) -> str:
    return full.rsplit("/", 1)[-1] or full


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Answers every call without the shared token UNAUTHENTICATED, unknown methods included,
    before any request message is read."""

    def __init__(self, token: str, peers: Peers | None = None) -> None:
        self._token = token.encode()
        self._peers = peers

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
                context,
                method,
                grpc.StatusCode.UNAUTHENTICATED,
                "wrong or missing PodScope token",
                self._peers,
            )

        # A stream-request handler: gRPC hands it the call without waiting for a message.
        return grpc.stream_unary_rpc_method_handler(unauthenticated)


class Gate:
    """Admits calls within ``Limits`` and bounds each read and write by the idle timeout.

    Used from the server's one event loop only, so its counters need no lock.

    The last ``reserved`` slots of each total go only to peers that hold at most one already:
    a token holder that fills the agent with calls from a few addresses still leaves a
    collector its ``Hello``, ``Trace`` and ``Fetch``.
    """

    def __init__(self, limits: Limits, peers: Peers | None = None) -> None:
        self.limits = limits
        self.peers = peers or Peers()
        self._calls: Counter[str] = Counter()
        self._streams: Counter[str] = Counter()

    async def refuse(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        method: str,
        code: grpc.StatusCode,
        reason: str,
    ) -> NoReturn:
        await refuse(context, method, code, reason, self.peers)

    @asynccontextmanager
    async def admit(
        self, context: grpc.aio.ServicerContext[Any, Any], method: str
    ) -> AsyncIterator[None]:
        """Holds one call slot of the peer for the ``with`` block.

        Raises (through ``context.abort``): RESOURCE_EXHAUSTED over a limit.
        """
        lim = self.limits
        async with self._slot(
            self._calls, lim.max_calls, lim.max_calls_per_peer, context, method, "calls from"
        ):
            yield

    @asynccontextmanager
    async def stream(
        self, context: grpc.aio.ServicerContext[Any, Any], method: str
    ) -> AsyncIterator[None]:
        """Holds one transfer slot of the peer (taken once its request has arrived: a call
        that never sends one holds only a call slot, until the idle timeout)."""
        lim = self.limits
        async with self._slot(
            self._streams,
            lim.max_streams,
            lim.max_streams_per_peer,
            context,
            method,
            "transfers to",
        ):
            yield

    @asynccontextmanager
    async def _slot(
        self,
        counts: Counter[str],
        total: int,
        per_peer: int,
        context: grpc.aio.ServicerContext[Any, Any],
        method: str,
        what: str,
    ) -> AsyncIterator[None]:
        """One of the peer's ``per_peer`` slots in ``counts`` for the ``with`` block (within
        ``total``, the last ``reserved`` of it for peers holding at most one), or a refusal."""
        peer = self.peers.of(context)
        busy, held = sum(counts.values()), counts[peer]
        if busy >= total or (busy >= total - self.limits.reserved and held > 1):
            await self.refuse(context, method, grpc.StatusCode.RESOURCE_EXHAUSTED, "agent busy")
        if held >= per_peer:
            reason = f"{per_peer} {what} {peer} in progress"
            await self.refuse(context, method, grpc.StatusCode.RESOURCE_EXHAUSTED, reason)
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
            await self.refuse(
                context,
                method,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no request within {self.limits.idle_timeout_s:g} s",
            )
        if message is grpc.aio.EOF:
            await self.refuse(
                context, method, grpc.StatusCode.INVALID_ARGUMENT, "no request message"
            )
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
            await self.refuse(
                context,
                method,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the peer took no data for {self.limits.idle_timeout_s:g} s",
            )
