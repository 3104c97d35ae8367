"""The engine's PyTorch workload: DistributedDataParallel over gloo on local processes.

Each process is one rank of a ``torch.distributed`` job on loopback (gloo: CPUs, so it runs
here and in CI): an MLP wrapped in ``DistributedDataParallel``, its batches from a
``DataLoader``, SGD. Every rank starts the PodScope agent, as a user's job would, and is
captured through it (``torch.profiler``, chosen by the agent, started and stopped at the
loop's step boundaries: ``podscope.agent.step(n)`` after each step). ``launch`` starts the
ranks and returns, warm, with their agents' addresses; the caller captures them in one window
(``podscope cluster torch`` does, with ``collectors.capture``). The ranks keep training until
every one records (they agree each step, by an all-reduce of a flag), run the configured steps,
then idle until the window's end and mark one last boundary, which stops the profiler: the
trace holds the configured steps between two partial ones the analysis leaves out (the
agreement, and the idle wait).

Injected bottlenecks (``TorchConfig.scenario``), each with the verdict PodScope must give:

* ``baseline``: nothing; no culprit.
* ``slow-rank``: rank ``slow_task`` computes ``slow_ms`` more per step (matmuls before its
  forward pass, for that long): the culprit, by its CPU work; the others wait for it in DDP's
  all-reduce.
* ``slow-dataloader``: rank ``slow_task``'s DataLoader takes ``slow_ms`` more per batch (its
  dataset waits as on slow storage, ``num_workers=0``): the culprit, by its DataLoader.
* ``slow-allreduce``: every rank's gradient all-reduce moves more bytes (a DDP communication
  hook pads each bucket so that its all-reduce takes about ``slow_ms`` more, timed on this
  machine): no culprit; the job is communication-bound.

A host-sync scenario (``.item()`` / ``cudaStreamSynchronize`` idling the GPU) needs a GPU:
on CPUs a tensor's value is there when the op returns, and nothing waits.

    >>> with launch(TorchConfig(workers=2, steps=12, scenario="slow-rank"), run_dir) as job:
    ...     capture([Target(a, label=w) for w, a in job.targets],
    ...             CaptureOptions(logdir, duration_ms=job.window_ms()))
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podscope.reference_engine import processes
from podscope.reference_engine.config import EngineError
from podscope.reference_engine.processes import Job

SCENARIOS = ("baseline", "slow-rank", "slow-dataloader", "slow-allreduce")
#: The scenarios that slow one rank down (the others slow every rank or none).
ONE_RANK = frozenset({"slow-rank", "slow-dataloader"})
PREFIX = "rank-"


@dataclass(frozen=True)
class TorchConfig:
    """One PyTorch run.

    Attributes:
        workers: ranks (processes, one CPU thread of compute each).
        steps: steps captured (after ``warmup`` uncaptured ones).
        scenario: one of ``SCENARIOS``.
        slow_task: the rank a one-rank scenario slows down.
        slow_ms: the extra time per step.
        width: hidden size of the MLP (its cost per step).
        batch: per-rank batch.
    """

    workers: int = 2
    steps: int = 12
    warmup: int = 3
    scenario: str = "baseline"
    slow_task: int = 1
    slow_ms: float = 20.0
    width: int = 256
    batch: int = 64
    seed: int = 0

    def check(self) -> None:
        """Raises EngineError for an impossible run."""
        if self.scenario not in SCENARIOS:
            raise EngineError(f"unknown PyTorch scenario {self.scenario!r}; known: {SCENARIOS}")
        if self.workers < 2 or self.steps < 3:
            raise EngineError("a PyTorch DDP run needs at least 2 ranks and 3 steps")
        if self.scenario in ONE_RANK and not 0 <= self.slow_task < self.workers:
            raise EngineError(f"slow task {self.slow_task} is not a rank (0..{self.workers - 1})")
        if self.slow_ms < 0:
            raise EngineError("slow_ms must be ≥ 0")


@contextmanager
def launch(cfg: TorchConfig, run_dir: Path, timeout_s: float = 600.0) -> Iterator[Job]:
    """Starts ``cfg``'s ranks in ``run_dir`` (``reference_engine.processes.launch``) and yields
    once every one is warm and its agent listens.

    Raises:
        EngineError: a rank failed (with its last log lines), or the run timed out.
    """
    cfg.check()
    with processes.launch(__name__, "PyTorch", cfg, run_dir, PREFIX, timeout_s) as job:
        yield job


def _worker(work: Path, index: int, port: int) -> None:  # pragma: no cover (subprocess)
    settings, agent = processes.start_worker(work, index, "PyTorch")
    cfg = TorchConfig(**settings)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, Dataset

    from podscope.collectors import agent as podscope_agent

    torch.set_num_threads(1)  # ranks share this machine's cores, as GPUs would not
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=cfg.workers
    )
    torch.manual_seed(cfg.seed)
    w = cfg.width
    model = DistributedDataParallel(
        torch.nn.Sequential(
            torch.nn.Linear(w, w),
            torch.nn.ReLU(),
            torch.nn.Linear(w, w),
            torch.nn.ReLU(),
            torch.nn.Linear(w, 8),
        )
    )
    slowed = cfg.scenario in ONE_RANK and index == cfg.slow_task
    slow_loader = slowed and cfg.scenario == "slow-dataloader"

    class Batches(Dataset[tuple[Any, Any]]):
        """Item ``i`` is this rank's batch ``i``, made from the seed (slow storage: waits)."""

        def __len__(self) -> int:
            return 1 << 30

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            if slow_loader:
                time.sleep(cfg.slow_ms / 1000)
            g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 1000 * i + index)
            return torch.randn(cfg.batch, w, generator=g), torch.randn(cfg.batch, 8, generator=g)

    batches = iter(DataLoader(Batches(), batch_size=None, num_workers=0))
    # slow-rank: matmuls for slow_ms of wall time, not a count timed beforehand: timed with the
    # other ranks on the same cores (3 ranks, 2 cores), 38 ms of them took 11 in the steps
    burn_s = cfg.slow_ms / 1000 if slowed and cfg.scenario == "slow-rank" else 0.0
    burn_w = torch.randn(w, w) * (2 / w**0.5)  # a gain of 2 keeps tanh's outputs off denormals
    if cfg.scenario == "slow-allreduce":
        pad = _pad_elements(torch, dist, cfg.slow_ms)
        model.register_comm_hook(None, _padded_allreduce(torch, dist, pad, cfg.workers))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def one() -> Any:
        x, y = next(batches)
        v, until = x, time.perf_counter() + burn_s
        while time.perf_counter() < until:  # slow-rank: its extra work, before its forward
            v = torch.tanh(v @ burn_w)
        loss = torch.nn.functional.mse_loss(model(x + 0.0 * v), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    n, step_ms = 0, 0.0
    for n in range(cfg.warmup):  # noqa: B007 (the last one numbers the next steps)
        t = time.perf_counter()
        one()
        step_ms = (time.perf_counter() - t) * 1000
    processes.say_ready(work, index, agent.address, step_ms)
    # train until every rank records (each starts its profiler at one of these boundaries),
    # agreeing each step: the ranks must run the same steps, or DDP's all-reduces mismatch
    while True:
        podscope_agent.step(n)
        flag = torch.tensor([1.0 if podscope_agent.RECORDING.is_set() else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if flag.item() > 0:
            break
        n += 1
        one()
    podscope_agent.step(n)  # the agreement is a step of its own, the first, left out as partial
    for _ in range(cfg.steps):
        n += 1
        loss = one()
        podscope_agent.step(n)
    # no step after the configured ones: idle to the window's end, then the boundary that
    # stops the profiler (a stop waits for a boundary)
    while podscope_agent.RECORDING.is_set():
        time.sleep(max(0.01, (podscope_agent.RECORDING.until_ns - time.time_ns()) / 1e9))
        podscope_agent.step(n + 1)
    print(json.dumps({"event": "done", "loss": float(loss.detach())}), flush=True)
    processes.wait_done(work)  # the trace is brought home from this process
    agent.stop()
    dist.destroy_process_group()


def _pad_elements(torch: Any, dist: Any, ms: float) -> int:  # pragma: no cover (subprocess)
    """Float32 elements whose all-reduce over the ranks takes about ``ms`` here. Every rank
    times the same all-reduces and takes the slowest rank's time, so all choose alike."""

    def once(n: int) -> float:
        t = torch.zeros(n * 256)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        spent = torch.tensor([time.perf_counter() - t0])
        dist.all_reduce(spent, op=dist.ReduceOp.MAX)
        return float(spent.item())

    return 256 * processes.iterations_for(once, ms)


def _padded_allreduce(torch: Any, dist: Any, pad: int, world: int) -> Any:  # pragma: no cover
    """A DDP communication hook: each bucket all-reduced with ``pad`` more elements (zeros, in a
    buffer of its own made once: a copy of the padding each step was host work of its own)."""
    padded: dict[int, Any] = {}

    # DDP reads the hook's annotations and refuses any but GradBucket's (these would be text)
    def hook(state, bucket):
        grads = bucket.buffer()
        n = grads.numel()
        buf = padded.get(bucket.index())
        if buf is None or buf.numel() != n + pad:
            buf = padded[bucket.index()] = torch.zeros(n + pad, dtype=grads.dtype)
        buf[:n].copy_(grads)
        fut = dist.all_reduce(buf, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0][:n].div_(world))

    return hook


def main(argv: list[str] | None = None) -> None:  # pragma: no cover (subprocess)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("work", type=Path)
    ap.add_argument("index", type=int)
    ap.add_argument("port", type=int)
    a = ap.parse_args(argv)
    _worker(a.work, a.index, a.port)


if __name__ == "__main__":
    main()
