"""One verdict per question: the measured quantity each question is decided by, defined once,
and the pairs of findings that would contradict each other.

A user asks a few questions of a session — does the step wait for input? can the input
pipeline keep up? is a worker late? are devices idle? are the collectives slow? — and several
rules touch each. Each question has one
*owner* rule whose number decides it; the other rules about it (*followers*) read the same
quantity and may not fire when the owner says no, so the report never says "IteratorGetNext is
slow" beside "Input-bound: 0.1 %".

    >>> input_share(analysis)                      # the input question's quantity, or None
    >>> contradictions(diagnose(analysis))         # [] on every session (a test checks)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from podscope.analyzers.diagnostics.base import Finding, Severity, Thresholds, Verdict, skip
from podscope.analyzers.session import SessionAnalysis


def input_share(inp: SessionAnalysis) -> float | None:
    """Input time (XProf's input category: waiting for input, host-to-device input copies,
    device waiting for the host) over step time, on the steps whose breakdown is known; None
    without such steps. The ``input_bound`` rule's value; every input rule reads it."""
    b = inp.split
    if b.empty or not b["step_time_ns"].sum():
        return None
    return float(b["input_ns"].astype(float).sum() / b["step_time_ns"].sum())


def input_gate(inp: SessionAnalysis, t: Thresholds) -> tuple[bool, dict[str, Any]] | Verdict:
    """For the input question's followers: whether input matters at all (its share of step
    time at or above the moderate threshold), with the number and threshold to show; the
    not-applicable verdict without steps whose breakdown is known."""
    share = input_share(inp)
    if share is None:
        return skip(
            "needs steps with a known breakdown: whether the input wait matters is decided by "
            "the input share of step time"
        )
    return share >= t.input[0], {
        "input_share_of_step": round(share, 4),
        "input_threshold_share": t.input[0],
    }


def quiet_because_input(share: dict[str, Any]) -> str:
    """The sentence a gated input finding shows instead of advice."""
    return (
        f"Input is {100 * share['input_share_of_step']:.2f} % of step time, under the "
        f"{100 * share['input_threshold_share']:.0f} % at which input counts as a bottleneck: "
        "the pipeline keeps up (prefetching hides this), so there is nothing to gain here."
    )


@dataclass(frozen=True)
class Question:
    """A question a user acts on, the rule whose number decides it and the rules about it."""

    text: str
    owner: str
    quantity: str
    followers: tuple[str, ...]


#: The questions, by id. A follower fires only when its owner does (``contradictions``).
QUESTIONS: dict[str, Question] = {
    "input": Question(
        "Does the step wait for input?",
        "input_bound",
        "input share of step time (input_share)",
        ("slow_iterator", "no_prefetch"),
    ),
    "pipeline": Question(
        "Can the input pipeline keep up?",
        "input_stage",
        "the busiest stage's work per batch over the step time (a synchronous job's workers "
        "wait for a late batch in the all-reduce, not in IteratorGetNext)",
        (),
    ),
    "late_worker": Question(
        "Is a worker late?",
        "straggler",
        "the culprit of attribution.roles: late by ≥ 10 % of the median step in ≥ 2/3 of its "
        "steps and in ≥ 2× as many as any other worker",
        ("straggler_cause",),
    ),
    "devices": Question(
        "Are devices idle?",
        "cpu_only",
        "device work events per device (SessionAnalysis.devices)",
        (),
    ),
    "collectives": Question(
        "Are the collectives slow?",
        "slow_collective",
        "time in collectives after the last participant arrived, share of step time",
        (),
    ),
}


def _fires(f: Finding | None) -> bool:
    return f is not None and f.applies and f.severity != Severity.NONE


def _quiet(f: Finding | None) -> bool:
    return f is not None and f.applies and f.severity == Severity.NONE


def _named(f: Finding | None, key: str) -> set[str]:
    if f is None or not f.applies:
        return set()
    value = f.evidence.get(key, [])
    return {value} if isinstance(value, str) else set(value)


@dataclass(frozen=True)
class Conflict:
    """Two rules' findings that must not be shown together, and why."""

    a: str
    b: str
    holds: Callable[[Finding | None, Finding | None], bool]
    why: str


def _follower(a: str, owner: str, question: str) -> Conflict:
    return Conflict(
        a,
        owner,
        lambda fa, fb: _fires(fa) and _quiet(fb),
        f"{a} fires while {owner}, which decides '{question}', says no",
    )


#: Pairs of findings that contradict each other, checked on every shared sample and engine
#: scenario (tests/analyzers/test_consistency.py).
CONFLICTS: tuple[Conflict, ...] = (
    *(_follower(f, q.owner, q.text) for q in QUESTIONS.values() for f in q.followers),
    Conflict(
        "straggler",
        "straggler_cause",
        lambda fa, fb: (
            fa is not None
            and fb is not None
            and fa.applies
            and fb.applies
            and _named(fa, "straggler") != (_named(fb, "culprit") if _fires(fb) else set())
            and bool(_named(fa, "straggler") | _named(fb, "culprit"))
        ),
        "the two straggler findings name different culprits",
    ),
    Conflict(
        "slow_collective",
        "straggler",
        lambda fa, fb: _fires(fa) and _fires(fb),
        "the collectives are slow 'not because of a late worker' while a worker is named late",
    ),
    Conflict(
        "launch_skew",
        "cpu_only",
        lambda fa, fb: fa is not None and fa.applies and fb is not None and (fb.value or 0) < 2,
        "launch skew between GPUs judged with fewer than two busy GPUs",
    ),
)


def contradictions(findings: list[Finding]) -> list[str]:
    """Every ``CONFLICTS`` pair that holds among ``findings``, as readable lines (empty when
    the findings agree)."""
    by_id = {f.rule_id: f for f in findings}
    return [f"{c.a} × {c.b}: {c.why}" for c in CONFLICTS if c.holds(by_id.get(c.a), by_id.get(c.b))]


#: Findings that are symptoms of others: when a cause fires, the symptom is ranked after it and
#: says so (``explained_by`` in its evidence). In a synchronous job every worker waits in the
#: all-reduce for whatever slows any worker, so time in collectives follows from each cause of
#: slowness; a late worker's gaps between its steps are its lateness (straggler_cause splits
#: them out); a slow link staggers the arrivals at the next collective, so waits there follow
#: from it; Python time inside steps follows from eager dispatch and tiny ops, and from a
#: straggler whose own in-step Python (callbacks) it mostly is.
SYMPTOM_OF: dict[str, tuple[str, ...]] = {
    "collectives": (
        "straggler",
        "slow_collective",
        "collective_wait",
        "input_bound",
        "input_stage",
        "step_gaps",
        "eager",
        "tiny_ops",
        "memory_leak",
        "ps_imbalance",
    ),
    "collective_wait": ("straggler", "slow_collective"),
    "straggler_cause": ("straggler",),
    "step_gaps": ("straggler",),
    "all_others": ("eager", "tiny_ops", "straggler"),
    "slow_iterator": ("input_bound", "input_stage"),
    "no_prefetch": ("input_bound", "input_stage"),
    "input_bound": ("input_stage",),
}


#: Symptoms that follow from a cause only on the worker the cause names (gaps between the
#: straggler's own steps are its lateness; gaps on another worker of a synchronous job are a
#: problem of their own; of an asynchronous one, its wait at the coordinator's join).
SAME_WORKER = frozenset({"step_gaps"})


#: The others' unattributed share is their wait for a straggler when it is its lateness
#: (a multiple of the step) within this fraction.
WAIT_MATCH = 0.25


def _explains(cause: Finding, symptom: Finding) -> bool:
    culprits = _named(cause, "straggler") | _named(cause, "culprit")
    if symptom.rule_id == "all_others" and cause.rule_id == "straggler":
        # a straggler's own Python in its step (Keras callbacks, a loop's work before the
        # call) is unattributed time on it: the finding follows when the culprit holds most;
        # or the others' wait for it, where they wait outside any op (a barrier the trace does
        # not name): then they hold it, as much of their step as the culprit is late
        shares = symptom.evidence.get("share_by_worker") or {}
        others = [float(v) for w, v in shares.items() if str(w) not in culprits]
        mine = [float(v) for w, v in shares.items() if str(w) in culprits]
        if mine and max(mine) > max(others, default=0.0):  # more than any other (not a tie)
            return True
        waited = statistics.median(others) if others else 0.0
        late = float(cause.value or 0.0)
        return (
            late > 0
            and abs(waited - late) <= WAIT_MATCH * late
            and (not mine or max(mine) < waited / 2)
        )
    if symptom.rule_id not in SAME_WORKER:
        return True
    if cause.rule_id == "straggler" and cause.evidence.get("mode") == "asynchronous":
        # a parameter-server job: the coordinator joins its scheduled steps, so the other
        # workers idle between steps while the culprit finishes its own (make verify, seed
        # 11: gaps of 64-68 % on the three others of a 29 ms straggler ranked above it)
        return bool(culprits)
    return str(symptom.evidence.get("worker")) in culprits


def rank(findings: list[Finding]) -> list[Finding]:
    """``findings`` (already ordered by severity and time at stake) with every firing symptom
    after its firing causes (``SYMPTOM_OF``, ``SAME_WORKER``), its causes named in its
    evidence (``explained_by``). A cause ranked below its symptom moves up to just before it:
    what explains a symptom's time is worth at least that time, so a chain keeps the rank of
    its highest member (moving the symptom down instead let a HIGH input-bound finding fall
    under unrelated step gaps, behind its MODERATE stage). Causes can be symptoms themselves
    (``input_bound`` of ``input_stage``), so causes move until each precedes its symptoms;
    the relation has no cycle, so that ends."""
    fired = {f.rule_id: f for f in findings if _fires(f)}
    causes = {
        f.rule_id: [
            c
            for c in SYMPTOM_OF.get(f.rule_id, ())
            if c in fired and c != f.rule_id and _explains(fired[c], f)
        ]
        for f in fired.values()
    }
    order = list(findings)
    for f in fired.values():
        if causes[f.rule_id]:
            f.evidence["explained_by"] = causes[f.rule_id]
    for _ in range(len(order)):
        moved = False
        for f in list(order):
            mine = causes.get(f.rule_id) if _fires(f) else None
            if not mine:
                continue
            at = order.index(f)
            below = [g for g in order[at + 1 :] if g.rule_id in mine]
            if below:
                for g in below:
                    order.remove(g)
                order[at:at] = below  # just before the symptom, in their own order
                moved = True
        if not moved:
            break
    return order
