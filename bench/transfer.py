"""Trace transfer over loopback: PodScope's export service vs a local file copy (the ceiling)."""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from podscope.collectors.capture import CaptureOptions, WorkerResult, fetch_trace
from podscope.collectors.export_service import grpc_options, serve


def bench_transfer(size_mb: int = 200, repeat: int = 3) -> dict[str, Any]:
    """Median MB/s of fetching a ``size_mb`` trace through the export service, and of cp."""
    with tempfile.TemporaryDirectory(prefix="podscope-transfer-") as tmp:
        root = Path(tmp) / "root"
        (root / "s").mkdir(parents=True)
        src = root / "s" / "w_1.xplane.pb"
        with src.open("wb") as f:
            for _ in range(size_mb):
                f.write(os.urandom(1 << 20))
        server = serve(root)
        port = server.port
        grpc_runs, copy_runs = [], []
        try:
            for i in range(repeat):
                dest = Path(tmp) / f"got{i}.xplane.pb"
                result = WorkerResult("w_1", f"127.0.0.1:{port}")
                t = time.perf_counter()
                asyncio.run(_fetch(port, result, dest, src.stat().st_size, Path(tmp)))
                grpc_runs.append(size_mb / (time.perf_counter() - t))
                if result.status != "ok":
                    raise RuntimeError(result.reason)
                dest.unlink()
                t = time.perf_counter()
                shutil.copyfile(src, dest)
                copy_runs.append(size_mb / (time.perf_counter() - t))
                dest.unlink()
        finally:
            server.stop(0)
    return {"export_mb_s": statistics.median(grpc_runs), "copy_mb_s": statistics.median(copy_runs)}


async def _fetch(port: int, result: WorkerResult, dest: Path, size: int, logdir: Path) -> None:
    """One trace brought home as a capture does (``fetch_trace`` on a ``grpc.aio`` channel)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=grpc_options()) as ch:
        await fetch_trace(ch, CaptureOptions(logdir=logdir), result, "s", dest, size)


def report(r: dict[str, Any], size_mb: int) -> None:
    print(f"\n== Trace transfer, {size_mb} MB over loopback (checksum verified) ==")
    print(
        f"export service: {r['export_mb_s']:.0f} MB/s; local file copy: {r['copy_mb_s']:.0f} MB/s; "
        f"ratio {r['export_mb_s'] / r['copy_mb_s']:.2f}"
    )
