"""Connection floods from many loopback addresses, as an attacker on the network makes them.

``Flood`` holds ``preface`` connections that send HTTP/2's client preface and a SETTINGS frame
(or another ``opening``: ``COSTLY``, a first header block that is costly to decode) and then
nothing, and ``bare`` TCP connections that send nothing, spread over ``addresses``
source addresses (127.0.1.1, 127.0.1.2, …: every 127/8 address is this machine's). Each one
is opened again as soon as the server closes it, for as long as the flood runs. The loop runs
in a thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def thread_cpu_s(native_id: int) -> float:
    """CPU seconds (user + system) of a live thread of this process."""
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def address(i: int) -> str:
    """The ``i``-th flood source address (never 127.0.0.1, the collector's)."""
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


@dataclass
class FloodStats:
    opened: int = 0
    refused: int = 0
    held_max: int = 0
    held: int = 0
    lifetimes: list[float] = field(default_factory=list)


#: The attack run's costly opening: the preface, the acknowledgement of the server's SETTINGS,
#: and a first HEADERS frame of 32 KB of HPACK dynamic table size updates.
COSTLY = (
    PREFACE
    + bytes([0, 0, 0, 4, 1, 0, 0, 0, 0])
    + (32_000).to_bytes(3, "big")
    + bytes([1, 0x4, 0, 0, 0, 1])
    + b"\x3f\xe1\x1f" * 10_666
    + b"\x3f\xe1"
)


class Flood:
    def __init__(
        self, port: int, addresses: int, preface: int, bare: int, opening: bytes = PREFACE
    ) -> None:
        self.port, self.addresses, self.preface, self.bare = port, addresses, preface, bare
        self.opening = opening
        self.stats = FloodStats()
        self._stop: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._run(),))
        self._started = threading.Event()

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        self._started.set()
        slots = [(i, True) for i in range(self.preface)] + [
            (self.preface + i, False) for i in range(self.bare)
        ]
        tasks = [asyncio.create_task(self._slot(i, send)) for i, send in slots]
        await self._stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _slot(self, i: int, send: bool) -> None:
        source = address(i % self.addresses)
        loop = asyncio.get_running_loop()
        while True:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.bind((source, 0))
                await loop.sock_connect(sock, ("127.0.0.1", self.port))
            except OSError:
                sock.close()
                self.stats.refused += 1
                await asyncio.sleep(0.05)
                continue
            self.stats.opened += 1
            self.stats.held += 1
            self.stats.held_max = max(self.stats.held_max, self.stats.held)
            t0 = loop.time()
            try:
                if send:
                    await loop.sock_sendall(sock, self.opening)
                while await loop.sock_recv(sock, 1 << 16):
                    pass  # the server's SETTINGS, GOAWAY…: read until it closes
            except OSError:
                pass
            finally:
                sock.close()
                self.stats.held -= 1
                self.stats.lifetimes.append(loop.time() - t0)

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def cpu_s(self) -> float:
        """The CPU seconds the flood has cost this machine so far (its thread: it makes every
        connection), the attacker's side of the cost."""
        assert self._thread.native_id is not None
        return thread_cpu_s(self._thread.native_id)

    def stop(self) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
        with contextlib.suppress(Exception):
            self._loop.close()


@contextmanager
def flood(
    port: int, addresses: int, preface: int, bare: int, opening: bytes = PREFACE
) -> Iterator[Flood]:
    f = Flood(port, addresses, preface, bare, opening)
    f.start()
    try:
        yield f
    finally:
        f.stop()


@contextmanager
def from_address(source: str, port: int) -> Iterator[str]:
    """An address whose connections reach ``127.0.0.1:port`` from ``source`` (a loopback
    address other than 127.0.0.1): a gRPC client seen by the agent as another machine."""
    loop = asyncio.new_event_loop()
    handlers: set[asyncio.Task[None]] = set()
    ready: list[str] = []
    started = threading.Event()

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await src.read(1 << 16):
                dst.write(data)
                await dst.drain()
        dst.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            up_reader, up = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(pump(reader, up), pump(up_reader, writer))
        finally:
            handlers.discard(task)

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ready.append(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        started.set()
        await stop.wait()
        server.close()
        for t in list(handlers):
            t.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    started.wait()
    try:
        yield ready[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(5)
