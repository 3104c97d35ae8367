"""A small training job of one framework with the PodScope agent started as a user would.

    python -m tests.collectors.framework_job FRAMEWORK ROOT [--no-step] [--rank R --world W --store FILE]

FRAMEWORK is ``tensorflow``, ``jax``, ``torch`` or ``none`` (a process that imports no
framework). Trains in its main thread, and after the first step prints one JSON line
``{"address": …, "modules": [frameworks imported]}``; it goes on training — a matmul step, ``podscope.agent.step(n)`` after it
unless ``--no-step`` (PyTorch then counts its optimizer's steps) — until its stdin closes.
With ``--world W`` (PyTorch) the ranks train under DistributedDataParallel over gloo on
loopback, meeting through the file ``--store``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from typing import Any

import podscope

FRAMEWORK_MODULES = ("tensorflow", "jax", "torch")


def _tensorflow() -> Callable[[int], None]:
    import tensorflow as tf

    w = tf.Variable(tf.random.normal((128, 128)))

    @tf.function
    def step() -> None:
        w.assign(tf.tanh(tf.matmul(w, w)) * 0.5)

    return lambda n: step()


def _jax() -> Callable[[int], None]:
    import jax
    import jax.numpy as jnp

    state = {"w": jnp.ones((128, 128)) * 0.01}

    @jax.jit
    def train_step(w: Any) -> Any:
        return jnp.tanh(w @ w) * 0.5

    def run(n: int) -> None:
        state["w"] = train_step(state["w"])
        state["w"].block_until_ready()

    return run


def _torch(args: argparse.Namespace) -> Callable[[int], None]:
    import torch

    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)
    )
    if args.world > 1:
        import torch.distributed as dist

        # a file store, not a port: a port chosen free can be taken by another test meanwhile
        dist.init_process_group(
            "gloo", init_method=f"file://{args.store}", rank=args.rank, world_size=args.world
        )
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 64), torch.randn(256, 1)

    def run(n: int) -> None:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("framework", choices=(*FRAMEWORK_MODULES, "none"))
    ap.add_argument("root")
    ap.add_argument("--no-step", action="store_true")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--store", default="")
    args = ap.parse_args()
    agent = podscope.agent.start(
        repository_root=args.root
    )  # before the framework: as early as a user may
    step: Callable[[int], None] = {
        "tensorflow": _tensorflow,
        "jax": _jax,
        "torch": lambda: _torch(args),
        "none": lambda: lambda n: sum(i * i for i in range(20_000)) and None,
    }[args.framework]()
    done = threading.Event()
    stop = _stopper(args, done)
    n = 0
    while not stop():
        step(n)
        if not args.no_step:
            podscope.agent.step(n)
        n += 1
        if n == 1:  # training is under way: the collector may come
            imported = sorted(m for m in FRAMEWORK_MODULES if m in sys.modules)
            print(json.dumps({"address": agent.address, "modules": imported}), flush=True)
            threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    agent.stop()
    imported = sorted(m for m in FRAMEWORK_MODULES if m in sys.modules)
    print(json.dumps({"steps": n, "modules": imported}), flush=True)


def _stopper(args: argparse.Namespace, done: threading.Event) -> Callable[[], bool]:
    """Whether to stop now: stdin closed; under DDP, on any rank (every rank stops at the same
    step, or the others would wait in the all-reduce for ever)."""
    if args.world == 1:
        return done.is_set
    import torch
    import torch.distributed as dist

    def stop() -> bool:
        flag = torch.tensor([1.0 if done.is_set() else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            dist.destroy_process_group()
            return True
        return False

    return stop


if __name__ == "__main__":
    main()
