"""PodScope analyzers: pure functions from parsed frames to derived frames (steps, step-time
breakdown, pod view, op stats, diagnostics). No plotting, printing or files here.

    from podscope.analyzers.steps import find_steps, align_steps
    from podscope.analyzers.breakdown import step_breakdown
    aligned, missing = align_steps(find_steps(frames.events))
    breakdown = step_breakdown(frames.events, aligned)
"""
