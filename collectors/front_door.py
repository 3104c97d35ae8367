"""The agent's front door: every TCP connection to the agent's port passes here first.

The agent lives inside the user's training process, whose file descriptors and CPU it shares:
a peer that opens connections and sends nothing, or HTTP/2's preface and no call, must cost it
next to nothing. gRPC's server has no per-address connection limit and keeps such connections
open, so the port is held by this small relay, on the agent's own event loop, and the gRPC
server listens behind it on a unix socket in a folder only the training process's user can
enter (``private_socket``): no other local user can reach it past the door, and it holds no
TCP port for anyone to fill.

**The token is checked at the door.** A new connection is *pending*: the door answers the
client's HTTP/2 preface with an empty SETTINGS frame (a gRPC client sends its first call's
headers only after the server's SETTINGS), reads until the first call's header block and
decodes it (HPACK). With the right ``x-podscope-token`` the connection is relayed to the gRPC
server, bytes unchanged but for the client's acknowledgement of the door's SETTINGS, which the
server never sent. A wrong or missing token gets each call the client has sent answered
UNAUTHENTICATED (a trailers-only response, so the client reads why) and the connection ended;
no call within ``auth_s``, or bytes that are not HTTP/2, close it. Unauthenticated peers never
reach gRPC. A pending connection holds one descriptor and no task.

**Bounds, whatever peers do:**

* at most ``max_pending`` pending connections; when they are full, a new one closes the oldest
  pending connection of an untrusted peer (a flood cannot hold the door shut: a collector's
  call arrives a round trip behind its connection, long before hundreds more are accepted);
  *trusted* peers' pending connections are never closed for room: addresses in ``allow`` (the
  operator's collector networks) and addresses that presented the token within ``trust_s``;
* at most ``max_connections`` relayed connections (three descriptors each: the client's, the
  relay's to the server and the server's end) and ``max_connections_per_peer`` from one
  address, pending ones included;
* accepts are paced to ``max_accepts_per_s`` (the rest wait in the kernel's queue), so a flood
  costs the training process a bounded share of a core, and a new connection waits its turn
  (about 3 s behind 4,000 flooding ones, measured);
* a peer refused ``ban_after`` times within ``ban_window_s`` (a wrong token, no call in time,
  a connection over a limit or closed to make room) is banned for ``ban_s``: its connections
  are closed and the kernel drops its new ones before they exist (``collectors.syn_filter``),
  so a flood from a set of addresses soon costs nothing (never a trusted peer: a guesser on
  the dashboard's machine must not lock the collector out).

Refusals are logged at most once a minute per address (``Quiet``).

Without a token (a loopback-only agent) the door relays every connection within the bounds.

The gRPC server learns each call's real peer from ``peer_of``: the relay binds each of its
connections to the server to a name of its own in that folder (the server sees it as the
call's peer), and ``peer_of`` maps the name to the client's address, so the per-peer call
limits and the logs name the client, not the relay.

    >>> door = FrontDoor("0.0.0.0", 6010, "/tmp/podscope-agent-x/grpc.sock", DoorLimits(),
    ...                  token=b"s3cret")
    >>> await door.start()
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import os
import socket
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import hpack

from podscope.collectors.syn_filter import drop_sources

log = logging.getLogger("podscope.agent")

TOKEN_HEADER = "x-podscope-token"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: An empty HTTP/2 SETTINGS frame (length 0, type 4, no flags, stream 0).
SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HEADERS, _SETTINGS, _CONTINUATION = 1, 4, 9
_ACK, _END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
#: gRPC's UNAUTHENTICATED status code, and the reason the door gives with it.
UNAUTHENTICATED = 16
WRONG_TOKEN = "wrong or missing PodScope token"
#: The most one relayed connection reads at once (and so holds, per direction).
RELAY_BYTES = 256 << 10
#: Connections of banned addresses closed off the accept pace in one turn of the loop.
MAX_DRAINED = 4096
#: How often pending connections past ``DoorLimits.auth_s`` are closed.
SWEEP_S = 0.25
#: The most a pending connection may send before its first call's headers are complete.
MAX_FIRST_BYTES = 32 << 10
#: The largest first header block decoded (a gRPC call's, token included, is a few hundred
#: bytes), and the dynamic table size updates it may begin with (RFC 7541 allows two). The
#: block is decoded in Python on the training process's event loop: a 32 KiB block of size
#: updates cost about 40 ms, and 1,100 such connections took the loop from 795 to 65 steps/s.
MAX_HEADER_BLOCK, MAX_SIZE_UPDATES = 4 << 10, 2
#: Decoding time a peer may cost in ``DoorLimits.ban_window_s`` before it is banned, whatever
#: its count of refusals (slow blocks made each address only 1-2 refusals in 10 s). A gRPC
#: call's block decodes in about 0.1 ms, the costliest 4 KiB one in a few ms: a client's
#: thousands of connections never come near it; a flood of costly blocks soon does.
MAX_DECODE_S = 0.25


@dataclass(frozen=True)
class DoorLimits:
    """Connection limits of one agent port (module docstring). The defaults hold at most
    ``max_pending + 3 × max_connections`` = 320 descriptors, a third of a 1,024 limit.

    Attributes:
        allow: networks (``10.0.0.0/8``, ``192.168.1.7``) whose peers are always trusted;
            with ``allow_only``, the only ones let in.
    """

    max_pending: int = 128
    max_connections: int = 64
    max_connections_per_peer: int = 8
    auth_s: float = 3.0
    idle_s: float = 30.0
    max_accepts_per_s: float = 500.0
    ban_after: int = 20
    ban_window_s: float = 10.0
    ban_s: float = 60.0
    trust_s: float = 3600.0
    allow: tuple[str, ...] = ()
    allow_only: bool = False

    def networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        """``allow`` parsed.

        Raises:
            ValueError: an entry is not an address or network.
        """
        return [ipaddress.ip_network(a.strip(), strict=False) for a in self.allow if a.strip()]


@dataclass
class Quiet:
    """Refusals logged at most once per peer, kind and minute, and at most ``max_lines`` a
    minute in all, with counts of the rest (one per agent: a flood costs the log a few lines
    a minute, however many calls and addresses it uses)."""

    every_s: float = 60.0
    max_lines: int = 20
    last: dict[tuple[str, str], float] = field(default_factory=dict)
    held: Counter[tuple[str, str]] = field(default_factory=Counter)
    _window: float = -1e9
    _lines: int = 0
    _unlogged: int = 0
    _unlogged_peers: set[str] = field(default_factory=set)

    def warn(self, peer: str, kind: str, message: str, *args: object) -> None:
        """Logs ``message % args`` unless ``peer`` had a ``kind`` line within ``every_s``, or
        ``max_lines`` were logged in this minute."""
        now, key = time.monotonic(), (peer, kind)
        if now - self._window >= self.every_s:
            if self._unlogged:
                log.warning(
                    "PodScope agent: %d more refusals from %d addresses not logged in the "
                    "last minute",
                    self._unlogged,
                    len(self._unlogged_peers),
                )
            self._window, self._lines, self._unlogged = now, 0, 0
            self._unlogged_peers.clear()
        if now - self.last.get(key, -1e9) < self.every_s:
            self.held[key] += 1
            return
        if self._lines >= self.max_lines:
            self._unlogged += 1
            if len(self._unlogged_peers) < 100_000:
                self._unlogged_peers.add(peer)
            return
        self._lines += 1
        more = self.held.pop(key, 0)
        self.last[key] = now
        if len(self.last) > 4096:  # a flood of addresses: forget the oldest
            for old in sorted(self.last, key=self.last.__getitem__)[:1024]:
                del self.last[old]
                self.held.pop(old, None)
        suffix = (
            f" ({more} more from it not logged in the last minute)"
            if more
            else " (more from it are counted, and logged once a minute)"
        )
        log.warning(message + suffix, *args)


class NotHttp2(ValueError):
    """A pending connection's bytes are not an HTTP/2 client's; ``hostile``: nor any client's
    by mistake (a header block no gRPC client sends, built to be costly)."""

    def __init__(self, message: str, hostile: bool = False) -> None:
        super().__init__(message)
        self.hostile = hostile


@dataclass
class FirstCall:
    """What a pending connection has sent, once it holds the first call's header block."""

    headers: dict[str, str]
    stream_id: int
    #: the client's bytes with its acknowledgement of the door's SETTINGS taken out
    forward: bytes


class Opening:
    """A client's first bytes, read frame by frame as they arrive (each byte once)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self._pos = 0
        self._ack: tuple[int, int] | None = None
        self._block = bytearray()
        self._stream_id = 0
        self._headers_done = False
        #: every call (HEADERS frame) opened so far, by stream id
        self.streams: list[int] = []

    def feed(self, chunk: bytes) -> None:
        """Adds ``chunk`` and reads the frames it completes.

        Raises:
            NotHttp2: not a client preface, a malformed frame, or more than
                ``MAX_FIRST_BYTES`` in all.
        """
        self.data += chunk
        if len(self.data) > MAX_FIRST_BYTES:
            raise NotHttp2(f"{len(self.data)} bytes and no call")
        if self._pos == 0:
            if not PREFACE.startswith(bytes(self.data[: len(PREFACE)])):
                raise NotHttp2("not an HTTP/2 client preface")
            if len(self.data) < len(PREFACE):
                return
            self._pos = len(PREFACE)
        data = self.data
        while self._pos + 9 <= len(data):
            pos = self._pos
            length = int.from_bytes(data[pos : pos + 3], "big")
            kind, flags = data[pos + 3], data[pos + 4]
            end = pos + 9 + length
            if end > len(data):
                return
            self._pos = end
            payload = bytes(data[pos + 9 : end])
            stream_id = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
            if kind == _SETTINGS and flags & _ACK and self._ack is None:
                if length:
                    raise NotHttp2("a SETTINGS acknowledgement with a payload")
                self._ack = (pos, end)
            elif kind == _HEADERS:
                self.streams.append(stream_id)
                if len(self.streams) == 1:
                    self._stream_id = stream_id
                    self._block += _header_fragment(payload, flags)
                    self._headers_done = bool(flags & _END_HEADERS)
            elif kind == _CONTINUATION and len(self.streams) == 1 and not self._headers_done:
                self._block += payload
                self._headers_done = bool(flags & _END_HEADERS)

    def first_call(self) -> FirstCall | None:
        """The first call, once its header block and the SETTINGS acknowledgement are in.

        Raises:
            NotHttp2: the header block does not decode.
        """
        if self._ack is None or not self._headers_done:
            return None
        block = bytes(self._block)
        if len(block) > MAX_HEADER_BLOCK:
            raise NotHttp2(f"a first header block of {len(block)} bytes", hostile=True)
        if _size_updates(block) > MAX_SIZE_UPDATES:
            raise NotHttp2("a header block of dynamic table size updates", hostile=True)
        try:
            decoder = hpack.Decoder(max_header_list_size=MAX_FIRST_BYTES)
            decoded = decoder.decode(block, raw=True)
        except (hpack.HPACKError, ValueError, IndexError) as e:
            raise NotHttp2(f"bad header block: {e}") from None
        headers = {bytes(k).decode("latin-1"): bytes(v).decode("latin-1") for k, v in decoded}
        a, b = self._ack
        return FirstCall(headers, self._stream_id, bytes(self.data[:a] + self.data[b:]))


def _size_updates(block: bytes) -> int:
    """The dynamic table size updates (``001xxxxx``, RFC 7541 §6.3) a header block begins with,
    counted without decoding it (up to one past ``MAX_SIZE_UPDATES``)."""
    count, pos = 0, 0
    while pos < len(block) and block[pos] & 0xE0 == 0x20 and count <= MAX_SIZE_UPDATES:
        count += 1
        if block[pos] & 0x1F == 0x1F:  # the value goes on in 7-bit groups
            pos += 1
            while pos < len(block) and block[pos] & 0x80:
                pos += 1
        pos += 1
    return count


def refusal(encoder: hpack.Encoder, stream_id: int, code: int, message: str) -> bytes:
    """An HTTP/2 frame that ends call ``stream_id`` with gRPC status ``code`` (a trailers-only
    response): the client reads the reason, not a reset. ``encoder``: the connection's."""
    block = encoder.encode(
        [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", str(code)),
            ("grpc-message", message),
        ]
    )
    return _frame(_HEADERS, _END_HEADERS | _END_STREAM, stream_id, block)


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes([kind, flags])
        + stream_id.to_bytes(4, "big")
        + payload
    )


def _header_fragment(payload: bytes, flags: int) -> bytes:
    start, end = 0, len(payload)
    if flags & _PADDED:
        if not payload:
            raise NotHttp2("padded HEADERS without a pad length")
        start, end = 1, len(payload) - payload[0]
    if flags & _PRIORITY:
        start += 5
    if end < start:
        raise NotHttp2("HEADERS padding longer than the frame")
    return payload[start:end]


@dataclass(eq=False)
class _Pending:
    sock: socket.socket
    peer: str
    trusted: bool
    opened: float
    opening: Opening = field(default_factory=Opening)


class FrontDoor:
    """Holds the agent's port and relays authenticated connections to its gRPC server
    (module docstring)."""

    def __init__(
        self,
        host: str,
        port: int,
        upstream: str,
        limits: DoorLimits,
        token: bytes | None = None,
    ) -> None:
        self.host, self.port, self.upstream, self.limits = host, port, upstream, limits
        self.token = token
        self.quiet = Quiet()
        self._networks = limits.networks()
        self._pending: dict[int, _Pending] = {}  # by descriptor, oldest first
        self._held: Counter[str] = Counter()  # pending and relayed connections per peer
        self._relayed = 0
        self._writers: dict[str, set[asyncio.StreamWriter]] = {}
        self._by_name: dict[str, str] = {}  # the relay's socket names → client addresses
        self._relays = 0  # relayed connections made so far (each names its socket)
        self._trusted_until: dict[str, float] = {}
        self._failures: dict[str, deque[float]] = {}
        #: per peer: (when, CPU seconds) its bytes cost to read and decode (``_charge``)
        self._spent: dict[str, deque[tuple[float, float]]] = {}
        self._banned: dict[str, float] = {}
        self._listener: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._allowance, self._allowance_at = limits.max_accepts_per_s, time.monotonic()
        self._paused = False
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self) -> int:
        """Binds ``host:port`` and serves; returns the port bound (``port`` 0: any).

        Raises:
            OSError: the address cannot be bound.
        """
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._listener = socket.create_server(
            (self.host, self.port), family=family, backlog=1024, reuse_port=False
        )
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        loop = asyncio.get_running_loop()
        loop.add_reader(self._listener.fileno(), self._accept)
        self._sweeper = loop.call_later(SWEEP_S, self._sweep)
        return self.port

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        if self._listener is not None:
            if not self._paused:
                loop.remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        if self._sweeper is not None:
            self._sweeper.cancel()
        for p in list(self._pending.values()):
            self._drop(p)
        for writers in list(self._writers.values()):
            for w in list(writers):
                w.close()
        for t in list(self._tasks):
            t.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), 2)

    # -- what the gRPC server asks the door ------------------------------------------------

    def peer_of(self, relay_name: str) -> str | None:
        """The client whose connection the relay makes from the socket named ``relay_name``."""
        return self._by_name.get(relay_name)

    def trusted(self, peer: str) -> bool:
        """An address in ``allow``, or one that presented the token within ``trust_s``."""
        if self._trusted_until.get(peer, 0.0) > time.monotonic():
            return True
        if not self._networks:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in n for n in self._networks)

    def connections(self) -> tuple[int, int]:
        """(pending, relayed) connections now."""
        return len(self._pending), self._relayed

    # -- accepting ---------------------------------------------------------------------------

    def _accept(self) -> None:
        """Accepts what the pace allows (the rest wait in the kernel's queue)."""
        assert self._listener is not None
        lim, now = self.limits, time.monotonic()
        self._allowance = min(
            lim.max_accepts_per_s / 10,
            self._allowance + (now - self._allowance_at) * lim.max_accepts_per_s,
        )
        self._allowance_at = now
        drained = 0
        while self._allowance >= 1:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # EMFILE and the like: wait, never spin
                log.warning("PodScope agent: accept failed (%s): pausing 0.1 s", e)
                self._pause(0.1)
                return
            peer = str(addr[0])
            if peer in self._banned and drained < MAX_DRAINED:
                # queued before its ban (the kernel drops its new ones): closed at once, off the
                # pace, so a collector queued behind a flood is reached in milliseconds
                sock.close()
                drained += 1
                continue
            self._allowance -= 1
            self._admit(sock, peer)
        self._pause(1 / lim.max_accepts_per_s)

    def _pause(self, seconds: float) -> None:
        if self._listener is None or self._paused:
            return
        loop = asyncio.get_running_loop()
        loop.remove_reader(self._listener.fileno())
        self._paused = True

        def resume() -> None:
            self._paused = False
            if self._listener is not None:
                loop.add_reader(self._listener.fileno(), self._accept)

        loop.call_later(seconds, resume)

    def _admit(self, sock: socket.socket, peer: str) -> None:
        why = self._refusal(peer)
        if why is not None:
            sock.close()
            self.quiet.warn(peer, why, "PodScope agent: connection from %s closed: %s", peer, why)
            self.refused(peer)
            return
        sock.setblocking(False)
        if self.token is None:
            self._relay(sock, peer, b"")
            return
        p = _Pending(sock, peer, self.trusted(peer), time.monotonic())
        try:
            sock.send(SETTINGS)
        except OSError:
            sock.close()
            return
        self._pending[sock.fileno()] = p
        self._held[peer] += 1
        asyncio.get_running_loop().add_reader(sock.fileno(), self._read, p)

    def _refusal(self, peer: str) -> str | None:
        """Why ``peer``'s new connection is closed at once, or None (after making room)."""
        lim = self.limits
        if peer in self._banned:  # an IPv6 peer, or one banned a moment ago
            return "refused repeatedly"
        trusted = self.trusted(peer)
        if lim.allow_only and not trusted:
            return "not in the agent's allowed networks"
        if self._held[peer] >= lim.max_connections_per_peer:
            # its oldest connection still waiting for a first call makes room: one address
            # (a NAT's) holding idle openings cannot lock out a collector behind the same one
            oldest = next((p for p in self._pending.values() if p.peer == peer), None)
            if oldest is None:
                return f"{lim.max_connections_per_peer} connections from it open"
            self._drop(oldest)
            self.refused(peer)
        if self.token is None:
            full = self._relayed >= lim.max_connections
            return f"{self._relayed} connections open" if full else None
        if len(self._pending) < lim.max_pending:
            return None
        # the oldest untrusted one (a dict keeps the order they came in)
        victim = next((p for p in self._pending.values() if not p.trusted), None)
        if victim is None:
            return f"{len(self._pending)} connections waiting for their first call"
        self._drop(victim)
        self.refused(victim.peer)
        return None

    # -- pending connections -------------------------------------------------------------------

    def _read(self, p: _Pending) -> None:
        try:
            data = p.sock.recv(MAX_FIRST_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(p)
            return
        if not data:
            self._drop(p)
            return
        try:
            p.opening.feed(data)
            started = time.thread_time()
            try:
                call = p.opening.first_call()  # the header block's decoding: what costs
            finally:
                self._charge(p.peer, time.thread_time() - started)
        except NotHttp2 as e:
            self._fail(p, str(e))
            if e.hostile:  # no gRPC client sends it: banned at once, not after 20
                self._ban(p.peer, f"sent {e}")
            return
        if call is None:
            return
        sent = call.headers.get(TOKEN_HEADER, "").encode("latin-1")
        assert self.token is not None
        if not hmac.compare_digest(sent, self.token):
            path = call.headers.get(":path", "?")
            self.quiet.warn(
                p.peer, "token", "PodScope agent: refused %s from %s: %s", path, p.peer, WRONG_TOKEN
            )
            self._refuse_calls(p)
            self._hang_up(p)
            for _ in p.opening.streams:  # counted once hung up: a ban drops pending
                self.refused(p.peer)  # connections, and this one must still read why
            return
        self._release(p)
        self._held[p.peer] += 1  # _release let go of it as pending; it stays held, relayed
        self._trusted_until[p.peer] = time.monotonic() + self.limits.trust_s
        if len(self._trusted_until) > 4096:
            now = time.monotonic()
            for old in [k for k, t in self._trusted_until.items() if t < now]:
                del self._trusted_until[old]
        if self._relayed >= self.limits.max_connections:
            self._unhold(p.peer)
            p.sock.close()
            self.quiet.warn(p.peer, "busy", "PodScope agent: %s closed: agent busy", p.peer)
            return
        self._relay(p.sock, p.peer, call.forward)

    def _refuse_calls(self, p: _Pending) -> None:
        """Answers every call ``p`` has opened UNAUTHENTICATED."""
        encoder = hpack.Encoder()
        frames = b"".join(
            refusal(encoder, stream_id, UNAUTHENTICATED, WRONG_TOKEN)
            for stream_id in p.opening.streams
        )
        with contextlib.suppress(OSError):
            p.sock.send(frames)

    def _hang_up(self, p: _Pending) -> None:
        """Ends a refused connection: the client reads the refusals, then the end of the
        connection (its next call opens a new one; calls it had sent but the door had not
        read end UNAVAILABLE); the socket closes a little later, as closing with the client's
        bytes unread would reset the connection before the refusals are read."""
        self._release(p)
        with contextlib.suppress(OSError):
            p.sock.shutdown(socket.SHUT_WR)
        asyncio.get_running_loop().call_later(0.5, p.sock.close)

    def _sweep(self) -> None:
        """Closes the pending connections older than ``auth_s`` (the oldest come first) and
        ends the bans that are over."""
        self._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)
        now = time.monotonic()
        if self._banned:
            self._unban(now)
        cutoff = now - self.limits.auth_s
        why = f"no call within {self.limits.auth_s:g} s"
        while self._pending:
            p = next(iter(self._pending.values()))
            if p.opened > cutoff:
                return
            self._drop(p)
            self.quiet.warn(
                p.peer, "expired", "PodScope agent: closed %s's connection: %s", p.peer, why
            )
            self.refused(p.peer)

    def _fail(self, p: _Pending, why: str) -> None:
        self._drop(p)
        self.quiet.warn(
            p.peer, "http2", "PodScope agent: refused a connection from %s: %s", p.peer, why
        )
        self.refused(p.peer)

    def _release(self, p: _Pending) -> None:
        """Stops watching ``p`` (its socket stays open)."""
        if self._pending.pop(p.sock.fileno(), None) is not None:
            asyncio.get_running_loop().remove_reader(p.sock.fileno())
            self._unhold(p.peer)

    def _drop(self, p: _Pending) -> None:
        self._release(p)
        p.sock.close()

    def _charge(self, peer: str, seconds: float) -> None:
        """Counts the CPU ``peer``'s bytes cost this thread; past ``MAX_DECODE_S`` in
        ``ban_window_s``, a refusal's worth each time until it is banned (the ban counts cost,
        not only refusals)."""
        if seconds <= 0 or self.trusted(peer):
            return
        now = time.monotonic()
        spent = self._spent.setdefault(peer, deque())
        spent.append((now, seconds))
        while spent and now - spent[0][0] > self.limits.ban_window_s:
            spent.popleft()
        if sum(s for _, s in spent) > MAX_DECODE_S:
            spent.clear()
            self._ban(peer, f"cost over {MAX_DECODE_S * 1000:.0f} ms of CPU to decode")
        if len(self._spent) > 4096:
            for old in [k for k, t in self._spent.items() if not t]:
                del self._spent[old]

    def refused(self, peer: str) -> None:
        """Counts a failure of ``peer`` (a refused call or connection); past ``ban_after`` in
        ``ban_window_s``, bans it: closes its connections and has the kernel drop its new
        ones (``collectors.syn_filter``)."""
        lim, now = self.limits, time.monotonic()
        times = self._failures.setdefault(peer, deque())
        times.append(now)
        while times and now - times[0] > lim.ban_window_s:
            times.popleft()
        if len(times) >= lim.ban_after:
            self._ban(peer, f"refused {len(times)} times in {lim.ban_window_s:g} s")
        if len(self._failures) > 4096:
            stale = [
                k for k, t in self._failures.items() if not t or now - t[-1] > lim.ban_window_s
            ]
            for old in stale:
                del self._failures[old]

    def _ban(self, peer: str, why: str) -> None:
        """Bans ``peer`` (unless it is trusted or banned already): closes its connections and
        has the kernel drop its new ones (``collectors.syn_filter``) for ``ban_s``."""
        if peer in self._banned or self.trusted(peer):
            return
        self._banned[peer] = time.monotonic() + self.limits.ban_s
        self.quiet.warn(
            peer,
            "ban",
            "PodScope agent: %s %s: its connections are dropped for %g s",
            peer,
            why,
            self.limits.ban_s,
        )
        for w in list(self._writers.get(peer, ())):
            w.close()
        for p in [p for p in self._pending.values() if p.peer == peer]:
            self._drop(p)
        self._refilter()

    def _refilter(self) -> None:
        """The kernel's drop list: the banned addresses, the latest bans first."""
        if self._listener is not None:
            latest = sorted(self._banned, key=self._banned.__getitem__, reverse=True)
            drop_sources(self._listener, latest)

    def _unban(self, now: float) -> None:
        ended = [peer for peer, until in self._banned.items() if until <= now]
        for peer in ended:
            del self._banned[peer]
        if ended:
            self._refilter()

    # -- relayed connections -----------------------------------------------------------------

    def _unhold(self, peer: str) -> None:
        self._held[peer] -= 1
        if self._held[peer] <= 0:
            del self._held[peer]

    def _relay(self, sock: socket.socket, peer: str, first: bytes) -> None:
        """Relays ``sock`` to the gRPC server (``peer``'s connection is held until it ends)."""
        if self.token is None:
            self._held[peer] += 1
        self._relayed += 1
        task = asyncio.get_running_loop().create_task(self._pipe(sock, peer, first))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _pipe(self, sock: socket.socket, peer: str, first: bytes) -> None:
        writers = self._writers.setdefault(peer, set())
        writer: asyncio.StreamWriter | None = None
        upstream: asyncio.StreamWriter | None = None
        self._relays += 1
        name = os.path.join(os.path.dirname(self.upstream), f"relay-{self._relays}")
        try:
            reader, writer = await asyncio.open_connection(sock=sock)
            writers.add(writer)
            relay = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                relay.setblocking(False)
                relay.bind(name)  # the name the server sees as this connection's peer
                self._by_name[name] = peer
                await asyncio.get_running_loop().sock_connect(relay, self.upstream)
            except BaseException:
                relay.close()
                raise
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(name)  # the connection keeps its name; the folder keeps no file
            up_reader, upstream = await asyncio.open_unix_connection(sock=relay)
            if first:
                upstream.write(first)
            await asyncio.gather(_pump(reader, upstream), _pump(up_reader, writer))
        except (ConnectionError, OSError):
            pass
        finally:
            if writer is None:
                sock.close()
            for w in (writer, upstream):
                if w is not None:
                    w.close()
            self._by_name.pop(name, None)
            if writer is not None:
                writers.discard(writer)
            if not writers:
                self._writers.pop(peer, None)
            self._relayed -= 1
            self._unhold(peer)


def private_socket() -> str:
    """A path for the gRPC server's unix socket in a new folder only this user may enter
    (``mkdtemp``: mode 0700), short enough for a socket's name (108 bytes on Linux, the
    relay's names included) wherever ``TMPDIR`` points; remove it with ``remove_private``."""
    base = tempfile.gettempdir()
    folder = tempfile.mkdtemp(prefix="podscope-agent-", dir=base if len(base) < 60 else "/tmp")
    return os.path.join(folder, "grpc.sock")


def remove_private(upstream: str) -> None:
    """Removes ``private_socket``'s folder and what is left in it."""
    folder = os.path.dirname(upstream)
    for name in os.listdir(folder):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, name))
    with contextlib.suppress(OSError):
        os.rmdir(folder)


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copies ``src`` to ``dst`` until either end closes; closes ``dst`` then (so the other
    direction ends too). ``drain`` bounds what is held here by the transport's buffer."""
    try:
        while data := await src.read(RELAY_BYTES):
            dst.write(data)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        dst.close()
