"""PodScope's reference training engine: real TF 2.4+ distributed workloads on a local cluster,
with scenarios that inject known bottlenecks (the ground truth for PodScope's diagnostics).

    $ podscope cluster up --workers 2 --workload mwms-loop --scenario input-bound --steps 50 --wait
    $ podscope cluster status && podscope cluster down

TensorFlow is imported only inside worker processes (``reference_engine.worker``), never by
the launcher, so ``podscope cluster`` starts in milliseconds.
"""
