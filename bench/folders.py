"""Sessions of many files: the dashboard's start (session list and summaries), its health check,
and ``load`` of a folder, per file, at growing file counts. Linear means the time per file
stays flat; the ratio printed is the largest count's time per file over the smallest's.

Each file is a tiny valid XPlane (one event), so the time is the per-file overhead: listing,
labelling, opening, parsing. Before the one-listing scan, labelling listed the folder again
for every file: 4,000 empty files took 94 s to ``load`` and 25,000 took 7.9 s to list."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.synth import synth_xspace

COUNTS = (250, 1000, 4000)
#: The attack run's folder: /healthz and the session list with it in the logdir.
HUGE = 100_000


def _session(logdir: Path, name: str, n: int, data: bytes) -> Path:
    folder = logdir / "plugins" / "profile" / name
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"10.{i // 62500}.{i // 250 % 250}.{i % 250}_6000.xplane.pb").write_bytes(data)
    return folder


def _median_s(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_folders(repeat: int = 3) -> dict[str, Any]:
    """Seconds per file of the session list (a fresh store each time: the dashboard's start)
    and of ``load`` (no cache), per file count; /healthz with a 100,000-file session."""
    from podscope.app.main import create_app
    from podscope.app.settings import AppSettings
    from podscope.app.store import SessionStore
    from podscope.trace_parsers import load
    from podscope.trace_parsers.loader import max_session_files

    data = synth_xspace(1, ops_per_step=1, threads=1)
    out: dict[str, Any] = {"listing": {}, "load": {}}
    with tempfile.TemporaryDirectory(prefix="podscope-folders-") as tmp:
        for n in COUNTS:
            logdir = Path(tmp) / f"n{n}"
            folder = _session(logdir, "s", n, data)
            listed = _median_s(lambda: SessionStore(logdir).summaries(), repeat)  # noqa: B023
            read = min(n, max_session_files())
            loaded = _median_s(lambda: load(folder, cache=False), 1)  # noqa: B023
            out["listing"][n] = listed / n
            out["load"][n] = loaded / read
        logdir = Path(tmp) / "huge"
        _session(logdir, "s", HUGE, data)
        client = create_app(AppSettings(logdir=logdir, cache_dir=Path(tmp) / "cache"))
        client = client.server.test_client()
        out["healthz_s"] = _median_s(lambda: client.get("/healthz"), repeat)
        out["sessions_page_s"] = _median_s(lambda: client.get("/"), repeat)
    return out


def report(r: dict[str, Any]) -> None:
    print("\n== Sessions of many files (tiny XPlanes; per file, median) ==")
    for what, label in (("listing", "session list"), ("load", "load (no cache)")):
        per = r[what]
        cells = ", ".join(f"{n:,} files {s * 1e6:.0f} µs" for n, s in per.items())
        ratio = per[max(per)] / per[min(per)]
        print(f"{label}: {cells}; ratio largest/smallest per file {ratio:.2f} (1 = linear)")
    print(
        f"{HUGE:,}-file session: /healthz {r['healthz_s'] * 1e3:.0f} ms, "
        f"Sessions page {r['sessions_page_s'] * 1e3:.0f} ms"
    )
