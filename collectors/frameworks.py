"""Which framework's profiler traces this process: the one it has imported, or the one named.

    >>> tracer = FrameworkTracer()           # decides at each trace, from sys.modules
    >>> tracer.framework()                   # ("jax", "0.10.2") in a JAX job; ("", "") in none
    >>> FrameworkTracer("torch")             # framework= in podscope.agent.start

No framework is imported here: each profiler lives in a module of its own
(``collectors.tf_tracer``, ``collectors.jax_tracer``, ``collectors.torch_tracer``), imported
when its first trace starts, so starting the agent changes nothing in the job until a capture.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from podscope.collectors import heartbeat
from podscope.collectors.export_service import Traced, Tracer, TracerError
from podscope.collectors.tf_profiler import TraceLevels

#: Framework → (the module a process imports, the PodScope module of its tracer), in order of
#: precedence: when several are in use, the first wins (a JAX or PyTorch job often runs
#: TensorFlow for tf.data, whose profiler would then see none of its device work).
FRAMEWORKS: dict[str, tuple[str, str]] = {
    "torch": ("torch", "podscope.collectors.torch_tracer"),
    "jax": ("jax", "podscope.collectors.jax_tracer"),
    "tensorflow": ("tensorflow", "podscope.collectors.tf_tracer"),
}


def _attr(modules: Mapping[str, Any], module: str, *names: str) -> Any:
    value: Any = modules.get(module)
    for name in names:
        value = getattr(value, name, None)
    return value


def _jax_in_use(modules: Mapping[str, Any]) -> bool:
    """JAX has made a backend (it has run or placed something)."""
    return bool(_attr(modules, "jax._src.xla_bridge", "_backends"))


def _tf_in_use(modules: Mapping[str, Any]) -> bool:
    """TensorFlow's eager context exists (made at its first op or tf.function)."""
    return bool(_attr(modules, "tensorflow.python.eager.context", "_context", "_initialized"))


def _torch_in_use(modules: Mapping[str, Any]) -> bool:
    """PyTorch has a process group or a CUDA context (a CPU job without either counts as
    imported only)."""
    for module, name in (("torch.distributed", "is_initialized"), ("torch.cuda", "is_initialized")):
        probe = _attr(modules, module, name)
        try:
            if callable(probe) and probe():
                return True
        except Exception:  # a probe must never fail a trace: then it says nothing
            continue
    return False


#: Whether a framework the process imported is also running there. Importing is not enough:
#: TensorFlow 2.21's ``import tensorflow`` imports JAX when it is installed (through
#: ``tensorflow.lite``), and a JAX job may import torch for its DataLoader. Each probe reads
#: module state only, never imports.
IN_USE = {"torch": _torch_in_use, "jax": _jax_in_use, "tensorflow": _tf_in_use}

NO_FRAMEWORK = (
    "this process has imported none of TensorFlow, JAX or PyTorch, so no profiler can trace it: "
    "start the agent in the training process (after the framework is imported, or with "
    "podscope.agent.start(framework='tensorflow'|'jax'|'torch'))"
)


class UnknownFramework(ValueError):
    """``framework=`` names none of ``FRAMEWORKS``."""


def check_framework(name: str | None) -> str | None:
    """``name`` if it is one of ``FRAMEWORKS`` (or None).

    Raises:
        UnknownFramework: any other name, listing the known ones.
    """
    if name is not None and name not in FRAMEWORKS:
        raise UnknownFramework(f"unknown framework {name!r}: one of {', '.join(FRAMEWORKS)}")
    return name


def detect(modules: Mapping[str, ModuleType | None] | None = None) -> str | None:
    """The framework this process runs: the first of ``FRAMEWORKS`` that is in use
    (``IN_USE``), else the first it has imported, else None.

    Looks in ``sys.modules`` only: never imports a framework."""
    modules = sys.modules if modules is None else modules
    imported = [name for name, (mod, _) in FRAMEWORKS.items() if modules.get(mod)]
    running = [name for name in imported if IN_USE[name](modules)]
    return next(iter(running or imported), None)


class FrameworkTracer:
    """The agent's tracer: at each trace, the profiler of the framework named, or else of the
    one the process has imported (``detect``).

    Args:
        framework: one of ``FRAMEWORKS``; None decides at each trace.
        make: framework → its tracer (default: the tracer module's ``make_tracer()``); the
            agent's ``profiler_address`` and tests inject their own.
        modules: framework → its module, for a process that passes it in (``tf=``) rather
            than importing it; they count as imported.
    """

    def __init__(
        self,
        framework: str | None = None,
        make: Mapping[str, Callable[[], Tracer]] | None = None,
        modules: Mapping[str, Any] | None = None,
    ) -> None:
        self.forced = check_framework(framework)
        self._make = dict(make or {})
        self._modules = {FRAMEWORKS[k][0]: v for k, v in (modules or {}).items()}
        self._tracers: dict[str, Tracer] = {}

    def _chosen(self) -> str | None:
        return self.forced or detect({**sys.modules, **self._modules})

    def framework(self) -> tuple[str, str]:
        """(framework, version) a trace would use now; ("", "") when there is none."""
        name = self._chosen()
        if name is None:
            return "", ""
        mod = FRAMEWORKS[name][0]
        module = self._modules.get(mod) or sys.modules.get(mod)
        return name, str(getattr(module, "__version__", ""))

    def _tracer(self, name: str) -> Tracer:
        if name not in self._tracers:
            make = self._make.get(name)
            if make is None:
                make = import_module(FRAMEWORKS[name][1]).make_tracer
            self._tracers[name] = make()
        return self._tracers[name]

    def __call__(self, out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> Traced:
        """Traces with the framework's profiler.

        Raises:
            TracerError: no framework in this process (FAILED_PRECONDITION), its profiler
                cannot be imported, or the tracer's own error.
        """
        name = self._chosen()
        if name is None:
            raise TracerError(NO_FRAMEWORK)
        try:
            tracer = self._tracer(name)
        except ImportError as e:
            raise TracerError(f"{name}'s profiler cannot be loaded in this process: {e}") from None
        traced = tracer(out, start_ns, duration_ms, levels) or Traced(out)
        return Traced(traced.path, name)


def record_xspace(
    out: Path,
    start_ns: int,
    duration_ms: int,
    start: Callable[[Path], None],
    stop: Callable[[], None],
) -> None:
    """A TSL profiler session in this process (TensorFlow's or JAX's, which both write
    ``<folder>/plugins/profile/<run>/<host>.xplane.pb``), from ``start_ns`` for
    ``duration_ms``, its file moved to ``out``; ``heartbeat.RECORDING`` is set meanwhile.

    Args:
        start: starts the session writing into the folder it is given (raising the tracer's
            errors, ``TracerBusy`` when another profiler runs).
        stop: ends it (it writes its file then).
    """
    time.sleep(max(0.0, (start_ns - time.time_ns()) / 1e9))
    work = Path(tempfile.mkdtemp(prefix=".tracing-", dir=out.parent))
    try:
        start(work)
        heartbeat.RECORDING.start(start_ns + duration_ms * 1_000_000)
        try:
            time.sleep(duration_ms / 1000)
        finally:
            heartbeat.RECORDING.clear()
            stop()
        written = sorted(work.glob("plugins/profile/*/*.xplane.pb"))
        if written:
            written[0].replace(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
