"""Traces a job wrote on this machine, brought into a session like a capture's.

A job that profiles itself (JAX's ``jax.profiler.start_trace``, the engine's JAX workload)
leaves one file per process in folders of its own; ``collect_local`` moves them into a new
session of the logdir under their workers' labels and writes its ``capture.json``, so every
page and command reads it as a capture.

    >>> session = collect_local({"jax-worker-0": p0, "jax-worker-1": p1}, logdir, label="jax")
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from podscope.trace_parsers import layout


def collect_local(
    files: Mapping[str, Path],
    logdir: Path,
    options: Mapping[str, Any] | None = None,
    label: str = "",
    note: str = "",
) -> Path:
    """Moves each worker's trace file into a new session folder of ``logdir`` as
    ``<worker>.xplane.pb`` and returns the folder.

    Raises:
        trace_parsers.layout.LayoutError: a worker label that is not a plain name, or a label
            or note that ``layout.check_label`` refuses.
        FileNotFoundError: a file is missing.
    """
    label = layout.check_label(label, layout.MAX_LABEL)
    names = {worker: layout.xplane_name(layout.check_plain_name(worker)) for worker in files}
    missing = [str(p) for p in files.values() if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"no trace file at {', '.join(missing)}")
    session = layout.new_session_dir(logdir)
    workers = []
    for index, (worker, path) in enumerate(files.items()):
        target = session / names[worker]
        shutil.move(str(path), target)
        workers.append(
            {
                "label": worker,
                "status": "ok",
                "file": target.name,
                "index": index,
                "bytes": target.stat().st_size,
            }
        )
    layout.write_manifest(
        session, session.name, time.time_ns(), options or {}, workers, label=label, note=note
    )
    return session
