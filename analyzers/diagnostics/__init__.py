"""Diagnostics that follow TensorFlow's GPU performance guide: a registry of rules, each a pure
function (``SessionAnalysis``, thresholds) → ``Finding`` with its evidence.

    >>> from podscope.analyzers.diagnostics import diagnose, prepare
    >>> findings = diagnose(prepare(frames))
    >>> [(f.rule_id, f.severity) for f in findings if f.severity != "none"]

Each finding carries ``expression``: one line of Python (pandas over the frames) that
reproduces its main number, so users can check it: ``eval(f.expression, {"frames": frames,
"prepare": prepare, "np": np, "pd": pd})``.
"""

from __future__ import annotations

from podscope.analyzers.diagnostics.base import (
    RULES,
    Finding,
    Need,
    Severity,
    Thresholds,
    Verdict,
    diagnose,
    prepare,
    rule,
)

__all__ = [
    "RULES",
    "Finding",
    "Need",
    "Severity",
    "Thresholds",
    "Verdict",
    "diagnose",
    "prepare",
    "rule",
]

# Rules register themselves in RULES on import; this order is the report's order among equals.
from podscope.analyzers.diagnostics import rules_steps  # noqa: F401, I001
from podscope.analyzers.diagnostics import rules_gpu, rules_host, rules_workers, rules_xla  # noqa: F401
