"""Entry point of one task process: ``python -m reference_engine.worker --config engine.json``.

Reads TF_CONFIG, starts a profiler server, reports readiness, runs the workload and writes
JSON lines (``ready``, ``model``, ``step``, ``done`` or ``error``) on stdout, which the
launcher redirects to the task's log file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from reference_engine.config import EngineConfig
from reference_engine.workloads import WORKLOADS, Task


def report(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--profiler-port", type=int, default=0, help="0: no separate profiler server")
    args = ap.parse_args()
    cfg = EngineConfig.load(args.config)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf-keras: see reference_engine.models
    task = Task.from_tf_config(args.config.parent)
    try:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        if args.profiler_port:
            tf.profiler.experimental.server.start(args.profiler_port)
        report("ready", role=task.role, index=task.index, pid=os.getpid())
        losses = WORKLOADS[cfg.workload](cfg, task, tf, report)
        report(
            "done",
            steps=len(losses),
            first_loss=losses[0] if losses else None,
            last_loss=losses[-1] if losses else None,
        )
    except Exception as e:  # the task's last word goes to its log, then it exits non-zero
        report("error", message=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        sys.exit(1)


if __name__ == "__main__":
    main()
