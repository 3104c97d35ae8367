"""Step heartbeats: one line in a training loop tells the agent when each step ended.

    import podscope
    agent = podscope.agent.start(port=6010)
    for n, batch in enumerate(data):
        train_step(batch)
        podscope.agent.step(n)                  # Keras: callbacks=[podscope.agent.keras_callback()]
                                                # JAX: podscope.agent.jax_step(n, loss)

Beats go into a process-wide ring buffer of the latest ``CAPACITY`` steps (one per process:
a process is one worker); the agent's ``Steps`` call serves them to a watcher
(``collectors.watch``), which polls with the last ``seq`` it has seen. A beat costs two clock
reads, an uncontended lock and a deque append (``make bench``: ``bench.heartbeat``); nothing is
sent from the training thread. Standard library only (``jax_step`` waits through
``collectors.jax_tracer``).
"""

from __future__ import annotations

import operator
import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any, NamedTuple

#: Beats an agent keeps: at one step a second, more than an hour; a watcher polls every few
#: seconds and asks only for what it has not seen.
CAPACITY = 4096


class Beat(NamedTuple):
    """One step's end: ``seq`` counts beats in this process (1, 2, …), ``step`` is the number
    the loop gave (``seq`` when it gave none), ``duration_ns`` the time since the previous beat
    (0 for the first one)."""

    seq: int
    step: int
    end_unix_ns: int
    duration_ns: int


class Beats:
    """The ring buffer of one process's beats (``BEATS``; tests make their own, with a clock
    of their own: a callable returning (wall ns, monotonic ns))."""

    def __init__(
        self,
        capacity: int = CAPACITY,
        clock: Callable[[], tuple[int, int]] = lambda: (time.time_ns(), time.monotonic_ns()),
    ) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._buffer: deque[Beat] = deque(maxlen=capacity)
        self._seq = 0
        self._last_ns: int | None = None

    def record(self, n: object = None) -> None:
        """A step ended now (``n``: its number; anything but an int64-sized whole number, a
        NaN or a string say, is ignored and the beat numbered by its seq: never raises into
        the training loop)."""
        number = step_number(n)
        wall, mono = self.clock()
        with self._lock:
            self._seq += 1
            duration = mono - self._last_ns if self._last_ns is not None else 0
            self._last_ns = mono
            self._buffer.append(
                Beat(self._seq, self._seq if number is None else number, wall, duration)
            )

    def count(self) -> int:
        """Beats recorded so far (the newest seq)."""
        with self._lock:
            return self._seq

    def pause(self) -> None:
        """The loop stopped on purpose (evaluation, a checkpoint): the next beat's duration
        starts from it, not from the last step."""
        with self._lock:
            self._last_ns = None

    def since(self, after_seq: int) -> tuple[list[Beat], int, int]:
        """(beats after ``after_seq``, oldest first; the newest seq; how many beats after
        ``after_seq`` already left the buffer)."""
        with self._lock:
            if not self._buffer or after_seq >= self._seq:  # nothing newer (any uint64 asks)
                return [], self._seq, 0
            first = self._buffer[0].seq  # seqs in the buffer are consecutive
            start = max(0, after_seq - first + 1)
            beats = list(islice(self._buffer, start, None))
            dropped = max(0, first - after_seq - 1) if after_seq else 0
            return beats, self._seq, dropped


def step_number(n: object) -> int | None:
    """``n`` as a step number: a whole number within int64 (an int, a NumPy integer, an
    integral float), else None."""
    if n is None or isinstance(n, bool):
        return None
    try:
        value = operator.index(n)  # type: ignore[arg-type]
    except TypeError:
        if not isinstance(n, float) or not n.is_integer():
            return None
        value = int(n)
    return value if -(2**63) <= value < 2**63 else None


#: This process's beats: what ``step`` records and the agent's ``Steps`` call serves.
BEATS = Beats()


class Recording(threading.Event):
    """Set while a capture's profiler records this process; ``until_ns``: when its window ends
    (epoch ns; a PyTorch trace stops at the first step boundary from then on)."""

    until_ns: int = 0

    def start(self, until_ns: int) -> None:
        self.until_ns = until_ns
        self.set()


#: Set while a capture's profiler records this process (from the moment TensorFlow's, JAX's or
#: PyTorch's profiler has started in-process until it stops): a job that must put known work
#: inside the window, as the reference engine does, waits for it, and a PyTorch job that must
#: end the window with a step boundary and no step after, as the engine's does, reads when.
RECORDING = Recording()

#: Called with the step's number after every beat, in the training thread, while a PyTorch
#: trace waits for step boundaries (``collectors.torch_tracer``); None otherwise.
_step_hook: Callable[[int | None], None] | None = None


def set_step_hook(hook: Callable[[int | None], None] | None) -> None:
    """Installs (or, with None, removes) the one step hook of this process."""
    global _step_hook
    _step_hook = hook


def _beat(n: object) -> None:
    BEATS.record(n)
    hook = _step_hook
    if hook is not None:
        hook(step_number(n))


def step(n: int | None = None) -> None:
    """Records that a training step ended now; call it once per step, after the step.

    Args:
        n: the step's number (the loop's counter); None numbers beats 1, 2, ….
    """
    _beat(n)


def jax_step(n: int | None, *outputs: Any) -> None:
    """``step`` for JAX: waits for the step's ``outputs`` (JAX dispatches asynchronously, so a
    step has ended only when its results exist), then records the beat."""
    if outputs:
        from podscope.collectors.jax_tracer import block_until_ready

        block_until_ready(outputs)
    _beat(n)


def keras_callback(base: type) -> Any:
    """A Keras callback that records a beat after every training batch.

    Args:
        base: the ``Callback`` class of the Keras the model uses
            (``tf.keras.callbacks.Callback``, ``tf_keras.callbacks.Callback`` or
            ``keras.callbacks.Callback``; ``podscope.agent.keras_callback()`` picks TF's).
    """

    class PodScopeHeartbeat(base):
        """Records a PodScope step heartbeat after every training batch."""

        def __init__(self) -> None:
            super().__init__()
            self.steps = 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            _beat(self.steps)
            self.steps += 1

        def on_test_begin(self, logs: Any = None) -> None:
            BEATS.pause()  # evaluation between epochs is not a slow step

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            BEATS.pause()  # nor are the epoch's callbacks (checkpoints, logging)

    return PodScopeHeartbeat()
