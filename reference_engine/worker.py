"""Entry point of one task process: ``python -m reference_engine.worker --config engine.json``.

Reads TF_CONFIG, starts the PodScope agent (in-process tracing on request and the trace
export service, see ``collectors.agent``), reports readiness, runs the workload and writes JSON lines (``ready``,
``model``, ``step``, ``done`` or ``error``) on stdout, which the launcher redirects to the
task's log file.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported in main, after stop_on_signals: numpy starts threads on import
    from podscope.collectors import agent
    from podscope.reference_engine.config import EngineConfig
    from podscope.reference_engine.workloads import Task


def report(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def stop_on_signals(say: Callable[..., None] = report) -> None:
    """``cluster down``'s SIGINT or SIGTERM ends this task at once, whatever its main thread
    is doing: both are blocked in every thread (call this first, before TensorFlow starts its
    threads, which inherit the mask) and taken by one thread that waits for them, says so and
    leaves without the interpreter's teardown. A KeyboardInterrupt in the main thread waited
    for the TF op it was in, then for TF's exit handlers (the coordination service's shutdown
    barrier with tasks that were stopping too), so every task outlived the grace period and was
    SIGKILLed."""
    signals = {signal.SIGINT, signal.SIGTERM}  # in the main thread before any other starts
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)

    def wait() -> None:
        got = signal.sigwait(signals)
        say("stopped", signal=signal.Signals(got).name)
        sys.stdout.flush()
        os._exit(0)

    threading.Thread(target=wait, name="podscope-stop", daemon=True).start()


def main() -> None:
    stop_on_signals()  # first: every thread started after it leaves the signals to its thread
    from podscope.reference_engine import netdelay
    from podscope.reference_engine.config import EngineConfig
    from podscope.reference_engine.workloads import WORKLOADS, Task

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--agent-port", type=int, required=True, help="port of the PodScope agent")
    ap.add_argument(
        "--agent-host",
        default="127.0.0.1",
        help="interface of the agent (0.0.0.0 on a real cluster)",
    )
    args = ap.parse_args()
    token = os.environ.get("PODSCOPE_TOKEN") or None  # required when the agent host is not loopback
    cfg = EngineConfig.load(args.config)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf-keras: see reference_engine.models
    tf_config = json.loads(os.environ["TF_CONFIG"])  # the process's edge: read once, passed in
    task = Task.from_tf_config(args.config.parent, tf_config)
    if os.environ.get(netdelay.ENV):  # slow-allreduce: the others reach this task through it
        netdelay.DelayProxy.from_env(os.environ[netdelay.ENV]).start()
    try:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        podscope = _start_agent(cfg, task, tf_config, args.agent_host, args.agent_port, tf, token)
        report(
            "ready",
            role=task.role,
            index=task.index,
            pid=os.getpid(),
            agent=podscope.address,
        )
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


def _start_agent(
    cfg: EngineConfig,
    task: Task,
    tf_config: Mapping[str, Any],
    host: str,
    port: int,
    tf: Any,
    token: str | None = None,
) -> agent.Agent:
    """The agent traces this task through the tf.distribute server it already runs on its
    TF_CONFIG port (a PS job's chief has none: in-process); it opens no TF port of its own."""
    from podscope.collectors import agent
    from podscope.reference_engine.cluster import serves_tf

    strategy = "ParameterServerStrategy" if cfg.workload == "ps" else "MultiWorkerMirroredStrategy"
    own_server = serves_tf(cfg.workload, task.role)
    return agent.start(
        host=host,
        port=port,
        repository_root=Path.cwd() / "traces",
        token=token,
        strategy=strategy,
        task=(task.role, task.index),
        profiler_address=tf_config["cluster"][task.role][task.index] if own_server else None,
        tf=tf,
    )


if __name__ == "__main__":
    main()
