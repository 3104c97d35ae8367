"""An agent inside a stand-in training loop, for attacks on the agent's process.

    python -m tests.collectors.loop_agent ROOT TOKEN STATS

Starts the agent (simulated tracer) on 127.0.0.1:0 and prints its port; the "training loop"
then opens and closes a file and does a little work, over and over, counting ``open()``
failures (``EMFILE``: descriptors used up). On stdin closing it writes ``STATS`` (JSON: loop
iterations, failures, the most descriptors the process held, log lines, the
CPU seconds of the agent's threads) and exits. It limits
itself to 1,024 descriptors, a training job's descriptor budget.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from podscope.collectors.export_service import TraceLevels, WorkerInfo, serve
from tests.collectors.fake_agent import xspace


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.lines += 1


def main(root: Path, token: str, stats: Path) -> None:
    # Set here, not by the test's preexec_fn: a fork that runs Python beside the test
    # process's gRPC threads can crash the child before it execs.
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    lines = _Count()
    logging.getLogger("podscope").addHandler(lines)

    def tracer(out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> None:
        time.sleep(max(0.0, (start_ns - time.time_ns()) / 1e9 + duration_ms / 1000))
        out.write_bytes(xspace(20))

    server = serve(root, token=token, info=WorkerInfo(role="worker"), tracer=tracer)
    print(server.port, flush=True)
    done = threading.Event()
    counts = {"iterations": 0, "open_failures": 0, "max_fds": 0}
    data = root / "batch.bin"
    data.write_bytes(b"\0" * 4096)

    def loop() -> None:
        while not done.is_set():
            try:
                with data.open("rb") as f:
                    f.read()
            except OSError:
                counts["open_failures"] += 1
            sum(i * i for i in range(2000))  # a step's Python work
            time.sleep(0.001)  # and its wait for the device
            counts["iterations"] += 1
            if counts["iterations"] % 50 == 0:
                counts["max_fds"] = max(counts["max_fds"], len(os.listdir("/proc/self/fd")))

    worker = threading.Thread(target=loop)
    worker.start()
    sys.stdin.read()  # until the test closes it
    done.set()
    worker.join()
    # The agent's CPU, while its threads live: every thread but the loop's and this one (the
    # agent's event loop and gRPC's threads).
    loop_threads = {worker.native_id, threading.get_native_id()}
    ticks = 0
    for task in Path("/proc/self/task").iterdir():
        if int(task.name) not in loop_threads:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    agent_cpu_s = ticks / os.sysconf("SC_CLK_TCK")
    server.stop()
    stats.write_text(json.dumps({**counts, "log_lines": lines.lines, "agent_cpu_s": agent_cpu_s}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))


@contextmanager
def loop_agent(root: Path, token: str, stats: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """Runs ``main`` in a process of its own (limited to 1,024 descriptors); yields
    (process, agent port). ``stats`` is written when the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.collectors.loop_agent", str(root), token, str(stats)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        yield proc, int(proc.stdout.readline())
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        proc.kill()


def rss_mib(pid: int) -> float:
    """The resident memory of process ``pid``, MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024
