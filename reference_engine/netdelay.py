"""A TCP proxy that delays every chunk it forwards: the ``slow-allreduce`` scenario's slow
network path to one worker.

The other workers reach that worker's TF server through the proxy (their TF_CONFIG lists the
proxy's port for it); the worker itself listens on its own port. Each chunk read from either
side is written to the other ``delay_ms`` later, in order: latency is added, throughput is
not limited, as on a long or congested link. It runs as a daemon thread of the slowed
worker's own task process, so it lives exactly as long as that worker.

    >>> proxy = DelayProxy(listen_port=40001, target_port=40000, delay_ms=5.0).start()
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

HOST = "127.0.0.1"
#: The env var the launcher sets on the slowed task: ``LISTEN_PORT:TARGET_PORT:DELAY_MS``.
ENV = "PODSCOPE_NET_DELAY"


@dataclass(frozen=True)
class DelayProxy:
    """Forwards ``HOST:listen_port`` to ``HOST:target_port``, each chunk ``delay_ms`` late."""

    listen_port: int
    target_port: int
    delay_ms: float

    @classmethod
    def from_env(cls, value: str) -> DelayProxy:
        """From ``ENV``'s value.

        Raises:
            ValueError: not ``LISTEN_PORT:TARGET_PORT:DELAY_MS``.
        """
        listen, target, delay = value.split(":")
        return cls(int(listen), int(target), float(delay))

    def start(self) -> DelayProxy:
        """Serves in a daemon thread; returns once the port is bound.

        Raises:
            OSError: the port could not be bound.
        """
        bound = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(self._serve(bound))
            except BaseException as e:  # reported to start() when binding failed
                failed.append(e)
                bound.set()

        threading.Thread(target=run, name="podscope-netdelay", daemon=True).start()
        bound.wait(30)
        if failed:
            raise OSError(f"delay proxy on {HOST}:{self.listen_port}: {failed[0]}")
        return self

    async def _serve(self, bound: threading.Event) -> None:
        server = await asyncio.start_server(self._connection, HOST, self.listen_port)
        bound.set()
        async with server:
            await server.serve_forever()

    async def _connection(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        try:
            target_r, target_w = await asyncio.open_connection(HOST, self.target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(
            self._pipe(client_r, target_w), self._pipe(target_r, client_w), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Reads chunks as they come; a second task writes each at its arrival + delay."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        delay = self.delay_ms / 1000.0

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while chunk := await reader.read(65536):
                await queue.put((time.monotonic() + delay, chunk))
        finally:
            await queue.put((0.0, b""))
            await asyncio.gather(sender, return_exceptions=True)
            writer.close()
