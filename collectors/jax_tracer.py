"""JAX's profiler, for an agent in a JAX process: the one collectors module that imports JAX,
lazily, when a trace starts (or a JAX step heartbeat waits for its outputs).

    >>> JaxTracer()(out, start_ns, 2000, TraceLevels())   # writes ``out`` (an .xplane.pb)

``jax.profiler.start_trace`` records every thread of the process and the devices (it is the
same TSL profiler session TensorFlow uses), so the agent's own thread may start and stop it.
It writes ``<dir>/plugins/profile/<time>/<host>.xplane.pb``; the tracer moves that file to
``out``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from podscope.collectors.export_service import TracerBusy, TracerError
from podscope.collectors.frameworks import record_xspace
from podscope.collectors.tf_profiler import TraceLevels


def jax_profiler() -> Any:
    """``jax.profiler`` (imported here: the seam tests replace with ``JaxTracer(profiler=)``)."""
    import jax.profiler

    return jax.profiler


def block_until_ready(outputs: Any) -> None:
    """Waits for JAX arrays (asynchronous dispatch: a step has ended when its results exist)."""
    import jax

    jax.block_until_ready(outputs)


def _options(profiler: Any, levels: TraceLevels) -> Any:
    """``jax.profiler.ProfileOptions`` with the plan's tracer levels; None on a JAX without
    them (before 0.5), whose profiler takes its defaults."""
    make = getattr(profiler, "ProfileOptions", None)
    if make is None:
        return None
    options = make()
    options.host_tracer_level = levels.host
    options.python_tracer_level = levels.python
    return options


class JaxTracer:
    """Traces this process with ``jax.profiler`` (in-process)."""

    def __init__(self, profiler: Any = None) -> None:
        self.profiler = profiler

    def __call__(self, out: Path, start_ns: int, duration_ms: int, levels: TraceLevels) -> None:
        """Records ``duration_ms`` from ``start_ns`` into ``out``.

        Raises:
            TracerBusy: a profile is already running in this process (the job's own
                ``jax.profiler.start_trace``, or TensorBoard's).
            TracerError: JAX's profiler refused to start for another reason.
        """
        profiler = self.profiler if self.profiler is not None else jax_profiler()
        options = _options(profiler, levels)

        def start(folder: Path) -> None:
            try:
                if options is None:
                    profiler.start_trace(str(folder))
                else:
                    profiler.start_trace(str(folder), profiler_options=options)
            except RuntimeError as e:
                if "already" in str(e).lower():
                    raise TracerBusy(f"another profile is running in this process ({e})") from None
                raise TracerError(f"jax.profiler did not start: {e}") from None

        record_xspace(out, start_ns, duration_ms, start, profiler.stop_trace)


def make_tracer() -> JaxTracer:
    """The agent's tracer for a JAX process (``collectors.frameworks``)."""
    return JaxTracer()
