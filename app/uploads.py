"""A viewer's upload is read in a process of its own, within a memory and CPU budget.

Only a file that parses becomes a session, so each uploaded file is parsed once on arrival.
Parsed on the request threads, a worst-case file held the server's GIL (every page and
``/healthz`` waited on it) and its memory was the server's: eight 4 MB gzip bombs at once
took the server to 2.7 GB. Now the files are written to the upload's staging folder and a
process started from the analysis's fork server (``analyzers.execution``: warm, no imports
to pay) parses them there, at a lower priority than the server, with:

* ``memory_mb`` of the budget's ``total_memory_mb`` (split between the ``at_once`` uploads
  read at once, so all of them together stay within it) as its data limit (``RLIMIT_DATA``:
  its heap and private mappings, the fork server's own included): a file that needs more is
  refused, saying so;
* ``cpu_s`` seconds of CPU (``RLIMIT_CPU``), and twice that of wall time: a file still being
  read then is refused, and the process killed.

The process sends one verdict per file as it goes, so a file that exhausts the budget costs
only itself and the files after it. The server reads back tuples of strings, nothing else.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podscope.trace_parsers import TraceParseError
from podscope.trace_parsers.loader import format_of, worker_label

#: How far below the server the reading process runs (``os.nice``).
UPLOAD_NICE = 10


@dataclass(frozen=True)
class UploadBudget:
    """What the uploads being read at once may use together.

    Attributes:
        total_memory_mb: data memory of every upload being read at once, together.
        at_once: uploads read at once (one more is told to send again).
        cpu_s: CPU seconds one upload's reading may take.
    """

    total_memory_mb: int = 2048
    at_once: int = 2
    cpu_s: int = 120

    @property
    def memory_mb(self) -> int:
        """One upload's share of ``total_memory_mb``."""
        return self.total_memory_mb // self.at_once


@dataclass(frozen=True)
class Verdict:
    """One uploaded file's: its format's suffixes, or why it was refused."""

    name: str
    suffixes: tuple[str, ...] = ()
    reason: str = ""


def read_uploads(
    folder: Path, files: Sequence[tuple[str, str]], budget: UploadBudget
) -> list[Verdict]:
    """Parses each of ``files`` (name in ``folder``, name as uploaded) in a process of its own
    within ``budget``; one verdict per file, in order."""
    from podscope.analyzers.execution import fork_server_context

    ctx = fork_server_context()
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_read, args=(theirs, str(folder), list(files), budget), daemon=True)
    proc.start()
    theirs.close()
    found: dict[str, Verdict] = {}
    deadline = time.monotonic() + 2 * budget.cpu_s
    try:
        while len(found) < len(files):
            left = deadline - time.monotonic()
            if left <= 0 or not ours.poll(left):
                break
            try:
                name, suffixes, reason = ours.recv()
            except EOFError:  # the process ended (killed for its CPU, or it died)
                break
            found[str(name)] = Verdict(str(name), tuple(map(str, suffixes)), str(reason))
    finally:
        ours.close()
        if proc.is_alive():
            proc.kill()
        proc.join()
    why = _ended(proc.exitcode, budget)
    return [found.get(name) or Verdict(name, (), why) for name, _ in files]


def _ended(exitcode: int | None, budget: UploadBudget) -> str:
    """Why the files left without a verdict got none."""
    if exitcode in (-signal.SIGXCPU, -signal.SIGKILL, None):
        return f"reading it took more than the {budget.cpu_s} s of CPU an upload may use"
    return f"the process reading it ended (exit code {exitcode}) before it was read"


def _read(conn: Any, folder: str, files: list[tuple[str, str]], budget: UploadBudget) -> None:
    """In the reading process: the limits, then one verdict per file, sent as it is made."""
    limit = budget.memory_mb << 20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (budget.cpu_s, budget.cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU would dump one
    os.nice(UPLOAD_NICE)
    for name, uploaded in files:
        path, data = Path(folder) / name, b""
        try:
            data = path.read_bytes()
            fmt = format_of(path, data[:65536])
            fmt.parse(data, worker=worker_label(path), source=uploaded)
            verdict: tuple[str, tuple[str, ...], str] = (name, tuple(fmt.suffixes), "")
        except TraceParseError as e:
            verdict = (name, (), e.reason)
        except OSError as e:
            verdict = (name, (), f"cannot be read back: {e.strerror or e}")
        except MemoryError:
            verdict = (
                name,
                (),
                f"reading it needs more than the {budget.memory_mb} MiB an upload may use: "
                "copy it into the logdir instead",
            )
        del data
        conn.send(verdict)
    conn.close()


__all__ = ["UploadBudget", "Verdict", "read_uploads"]
