"""PodScope collectors: capture every worker of a TF job over gRPC and bring the traces home.

    from podscope.collectors.capture import CaptureOptions, Target, capture
    result = capture([Target("10.0.0.1:6009"), Target("10.0.0.2:6009")], CaptureOptions(logdir="runs/x"))
    result.exit_code()  # 0 all ok, 3 partial (traces kept), 4 nothing captured

Only ``collectors.agent`` (run inside training processes) imports TensorFlow, lazily.
"""
