"""The profiler agent for training processes: ``podscope.agent.start(...)`` in every worker,
and ``podscope.agent.step(n)`` after each training step for watched jobs.

Light on purpose: it imports grpcio and protobuf (and the profiler of TensorFlow, JAX or
PyTorch only when a trace starts, in a process that has imported that framework), never
pandas, the dashboard or a compiled extension of PodScope's, so the base
``pip install podscope`` is all a training image needs. See ``podscope.collectors.agent``
and ``podscope.collectors.heartbeat``.
"""

from podscope.collectors.agent import FRAMEWORKS, Agent, AgentError, keras_callback, start
from podscope.collectors.heartbeat import RECORDING, jax_step, step

__all__ = [
    "FRAMEWORKS",
    "RECORDING",
    "Agent",
    "AgentError",
    "jax_step",
    "keras_callback",
    "start",
    "step",
]
