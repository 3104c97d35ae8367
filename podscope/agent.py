"""The profiler agent for training processes: ``podscope.agent.start(...)`` in every worker.

Light on purpose: it imports grpcio and protobuf (and TensorFlow or JAX only when the process
already has them), never pandas, the dashboard or a compiled extension of PodScope's, so the
base ``pip install podscope`` is all a training image needs. See ``podscope.collectors.agent``.
"""

from podscope.collectors.agent import Agent, AgentError, start

__all__ = ["Agent", "AgentError", "start"]
