"""PodScope collectors: capture every worker of a job over gRPC and bring the traces home.

    from podscope.collectors.capture import CaptureOptions, Target, capture
    result = capture([Target("10.0.0.1:6009"), Target("10.0.0.2:6009")], CaptureOptions(logdir="runs/x"))
    result.exit_code()  # 0 all ok, 3 partial (traces kept), 4 nothing captured

The agent (``collectors.agent``, inside training processes) traces TensorFlow, JAX and PyTorch
jobs; only its tracer modules (``tf_tracer``, ``jax_tracer``, ``torch_tracer``) import a
framework, lazily, when a trace starts.
"""
