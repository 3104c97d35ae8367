"""A watched job's history: one summary per capture, and what changed from one to the next.

    >>> entry = summarize(SessionAnalysis(load(folder)), "2026_12_04_09_00_00", label="…")
    >>> entry["culprits"], entry["top"]["rule_id"], entry["metrics"]["step_time (p50)"]
    >>> what_changed(previous_entry, entry)      # regression findings, largest first

A summary is a small JSON record (``app.history.HistoryIndex`` keeps one line per session in
``<logdir>/.podscope/history.jsonl``), so the History page reads a thousand captures without
opening one: the capture's time and reason (a watcher's trigger and heartbeat window), its
workers' statuses and step times, the culprit and its cause, the top finding, the step-time
categories and the ops' self time per step. ``what_changed`` is Compare, automated: a new (or
recovered) culprit with its cause, the step time's change, the category that grew most and
the op that grew most, and a new top finding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from podscope.analyzers.attribution import worker_causes
from podscope.analyzers.breakdown import CATEGORIES
from podscope.analyzers.compare import op_rates, step_metrics
from podscope.analyzers.session import SessionAnalysis

#: Ops kept per summary (by self time per step): what "the op that grew" is chosen from.
KEPT_OPS = 40
#: A change smaller than this share of the earlier step time is noise, not a finding.
MIN_SHARE = 0.05
#: Step time must change at least this much to be said.
MIN_STEP_CHANGE = 0.10
#: Summaries of this format; older lines are analysed again (4: each named worker's address,
#: so History names it as the pages do, and a small unexplained lateness names no culprit; 3:
#: a PyTorch session's metrics in its own categories, ``SessionAnalysis.own_pod``; 2: a
#: culprit's cause is read from its late steps' summed excess, ``worker_causes``; 1 said the
#: most common label, and a "cause changed" between the two would be the formula's, not the
#: job's).
SUMMARY_VERSION = 4


def _num(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else round(v, 4)


def summarize(
    analysis: SessionAnalysis,
    session: str,
    *,
    start_ns: int = 0,
    label: str = "",
    statuses: Mapping[str, str] | None = None,
    watch: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The history record of one session (JSON-ready; see the module docstring).

    Args:
        analysis: the session's analysis.
        session: its id.
        start_ns, label, statuses, watch: from its ``capture.json`` (the capture's common
            start, label, per-worker statuses and a watcher's reason): a session without
            one is dated by its trace.
    """
    watch = dict(watch or {})
    trigger = dict(watch.get("trigger") or {})
    pod = analysis.pod
    own, categories = analysis.own_pod()  # a PyTorch job's in its own categories
    # every worker's step time, its categories known or not (a Python-traced worker's too)
    per_worker = (
        pod.groupby(pod["worker"].astype(str))["step_time_ns"].median() / 1e6
        if len(pod)
        else pd.Series(dtype="float64")
    )
    roles = analysis.roles
    culprits = sorted(roles.loc[roles["role"] == "culprit", "worker"].astype(str))
    causes = worker_causes(analysis.slow_steps)
    findings = [f for f in analysis.findings if f.applies and f.severity != "none"]
    top = findings[0] if findings else None
    per = "step" if len(analysis.capture_steps) else "capture"
    ops = op_rates(analysis.op_table, analysis.capture_steps, per)
    ops = ops.sort_values("self_us", ascending=False).head(KEPT_OPS)
    return {
        "version": SUMMARY_VERSION,
        "session": session,
        # a trace's own clock is wall time only for some formats (XPlane: Unix ns)
        "start_unix_s": (start_ns or (analysis.start_ns if analysis.start_ns > 1e18 else 0)) / 1e9,
        "label": label,
        "reason": str(watch.get("reason") or "manual"),
        "detail": str(trigger.get("detail") or ""),
        "trigger_workers": list(trigger.get("workers") or []),
        # each step's heartbeat before the capture (a watcher's), at the steps' own resolution
        "beats": _beats(watch.get("heartbeats")),
        "window": [trigger["window_start_ns"], trigger["window_end_ns"]]
        if trigger.get("window_start_ns")
        else None,
        "statuses": dict(statuses or {}),
        "step_ms": {w: _num(v) for w, v in per_worker.items()},
        "metrics": {k: _num(v) for k, v in step_metrics(own, categories).items()},
        "culprits": culprits,
        # each worker's task as the capture names it (``worker:1``), where it does
        "tasks": {w: task for w, (task, _) in analysis.tasks.items()},
        "addresses": {w: address for w, (_, address) in analysis.tasks.items()},
        # the cause of each culprit's late steps (``worker_causes``; "" when it has none)
        "causes": {w: str(causes["cause"].get(w, "")) for w in culprits},
        "top": None
        if top is None
        else {"rule_id": top.rule_id, "title": top.title, "severity": str(top.severity)},
        "fired": [f.rule_id for f in findings],
        "ops": {f"{t}|{n}": _num(v) for (t, n), v in ops["self_us"].items()},
        "per": per,
    }


#: Heartbeats kept per worker in a summary (a watcher records its last 120 before a capture).
MAX_BEATS = 1000


def _beats(heartbeats: Any) -> dict[str, list[list[float]]]:
    """A watched capture's heartbeats (``[seq, step, end_unix_ns, duration_ns]`` per worker,
    ``collectors.watch``) as ``[end_unix_s, step_ms]`` pairs, the last ``MAX_BEATS`` of each
    worker; none for a capture a person took, or beats that are not numbers."""
    out: dict[str, list[list[float]]] = {}
    if not isinstance(heartbeats, dict):
        return out
    for worker, beats in list(heartbeats.items())[:MAX_ITEMS]:
        if not isinstance(beats, list):
            continue
        pairs = [
            [b[2] / 1e9, b[3] / 1e6]
            for b in beats[-MAX_BEATS:]
            if isinstance(b, list)
            and len(b) == 4
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in b)
            and 0 < b[2] / 1e9 < MAX_START_S
            and b[3] > 0
        ]
        if pairs:
            out[str(worker)[:MAX_TEXT]] = pairs
    return out


#: What a summary line may hold: longest text, most items of a list or mapping.
MAX_TEXT, MAX_ITEMS = 4096, 100_000
#: The latest start a summary may say (Unix s; year 2286): a forged 10**30 broke the page.
MAX_START_S = 1e10


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not text")
    return value[:MAX_TEXT]


def _texts(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise TypeError("not a list of text")
    return [_text(v) for v in value]


def _mapping(value: Any, of: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or len(value) > MAX_ITEMS:
        raise TypeError("not a mapping")
    return {_text(k): of(v) for k, v in value.items()}


def _pairs(value: Any) -> list[list[float]]:
    """A worker's ``[end_unix_s, step_ms]`` beats, each a finite number within bounds."""
    if not isinstance(value, list) or len(value) > MAX_BEATS:
        raise TypeError("not a list of beats")
    out = []
    for pair in value:
        if not isinstance(pair, list) or len(pair) != 2:
            raise TypeError("not a beat")
        t, ms = _number(pair[0]), _number(pair[1])
        if t is None or ms is None or not 0 < t < MAX_START_S:
            raise ValueError("a beat out of bounds")
        out.append([t, ms])
    return out


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("not a number")
    v = float(value)
    return v if math.isfinite(v) else None


def checked_summary(entry: Any) -> dict[str, Any] | None:
    """``entry`` (a line of the history index, parsed) as ``summarize`` writes it, every field
    of the type the History page reads; None when it is not one (another version, a field
    missing or of another type, a start no capture can have). Text and collections are
    bounded. The index is a file anyone who can write the logdir can edit: one bad line must
    not break the page for everyone."""
    if not isinstance(entry, dict) or entry.get("version") != SUMMARY_VERSION:
        return None
    try:
        start = _number(entry["start_unix_s"])
        if start is None or not 0 <= start < MAX_START_S:
            return None
        window = entry.get("window")
        if window is not None:
            if not isinstance(window, list) or len(window) != 2:
                return None
            window = [int(_number(w) or 0) for w in window]
        top = entry.get("top")
        if top is not None:
            if not isinstance(top, dict):
                return None
            top = {k: _text(top.get(k, "")) for k in ("rule_id", "title", "severity")}
        per = entry.get("per")
        return {
            "version": SUMMARY_VERSION,
            "session": _text(entry["session"]),
            "start_unix_s": start,
            "label": _text(entry.get("label", "")),
            "reason": _text(entry.get("reason", "manual")),
            "detail": _text(entry.get("detail", "")),
            "trigger_workers": _texts(entry.get("trigger_workers", [])),
            "beats": _mapping(entry.get("beats", {}), _pairs),
            "window": window,
            "statuses": _mapping(entry.get("statuses", {}), _text),
            "step_ms": _mapping(entry.get("step_ms", {}), _number),
            "metrics": _mapping(entry.get("metrics", {}), _number),
            "culprits": _texts(entry.get("culprits", [])),
            "tasks": _mapping(entry.get("tasks", {}), _text),
            "addresses": _mapping(entry.get("addresses", {}), _text),
            "causes": _mapping(entry.get("causes", {}), _text),
            "top": top,
            "fired": _texts(entry.get("fired", [])),
            "ops": _mapping(entry.get("ops", {}), _number),
            "per": per if per in ("step", "capture") else "capture",
        }
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


@dataclass(frozen=True)
class Change:
    """One regression finding between two consecutive captures.

    Attributes:
        kind: ``culprit``, ``recovered``, ``step_time``, ``category``, ``op`` or ``finding``.
        title: one line for people.
        severity: ``high``, ``moderate`` or ``none`` (an improvement).
        delta_ms: its size in ms per step (0 where it has none: a culprit, a finding).
    """

    kind: str
    title: str
    severity: str
    delta_ms: float = 0.0


def task_of(entry: Mapping[str, Any], worker: str) -> str:
    """The worker's task in a ``summarize`` record (``worker:1``), else its label."""
    return str((entry.get("tasks") or {}).get(worker) or worker)


def named(entry: Mapping[str, Any], worker: str) -> str:
    """A worker of a ``summarize`` record as pages and findings name it: ``worker:1
    (127.0.0.1:6001)`` (its label in the address's place in records written before
    addresses were kept), or its label where the capture named no task."""
    task = (entry.get("tasks") or {}).get(worker)
    address = (entry.get("addresses") or {}).get(worker) or worker
    return f"{task} ({address})" if task else worker


def what_changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """Regression findings from ``before`` to ``after`` (two ``summarize`` records), the most
    severe and largest first; empty when nothing changed beyond noise."""
    out: list[Change] = []
    base_step = (before.get("metrics") or {}).get("step_time (p50)") or 0.0
    new_step = (after.get("metrics") or {}).get("step_time (p50)") or 0.0
    floor = max(base_step * MIN_SHARE, 0.1)
    # a culprit is the same one when its task is (a restarted job's workers get new ports)
    was = {task_of(before, w): w for w in before.get("culprits", [])}
    now = {task_of(after, w): w for w in after.get("culprits", [])}
    for key in sorted(set(now) - set(was)):
        cause = (after.get("causes") or {}).get(now[key]) or "cause unknown"
        out.append(Change("culprit", f"New straggler {named(after, now[key])}: {cause}", "high"))
    for key in sorted(set(was) - set(now)):
        out.append(
            Change("recovered", f"{named(before, was[key])} is no longer a straggler", "none")
        )
    if base_step > 0 and new_step > 0:
        change = new_step / base_step - 1
        if abs(change) >= MIN_STEP_CHANGE:
            rose = change > 0
            out.append(
                Change(
                    "step_time",
                    f"Step time {'rose' if rose else 'fell'} {abs(change):.0%} "
                    f"({base_step:.1f} → {new_step:.1f} ms)",
                    ("high" if change >= 0.25 else "moderate") if rose else "none",
                    new_step - base_step,
                )
            )
    grown = _largest_growth(
        {c: (before.get("metrics") or {}).get(c) for c in CATEGORIES},
        {c: (after.get("metrics") or {}).get(c) for c in CATEGORIES},
    )
    if grown is not None and grown[1] >= floor:
        name, delta, a, b = grown
        out.append(
            Change(
                "category",
                f"{name.replace('_', ' ')} grew {delta:.1f} ms per step ({a:.1f} → {b:.1f} ms)",
                "moderate",
                delta,
            )
        )
    ops_grown = _largest_growth(
        {k: v / 1000 for k, v in (before.get("ops") or {}).items() if v is not None},
        {k: v / 1000 for k, v in (after.get("ops") or {}).items() if v is not None},
    )
    if ops_grown is not None and ops_grown[1] >= floor and before.get("per") == after.get("per"):
        name, delta, a, b = ops_grown
        op_type, _, op_name = name.partition("|")
        shown = op_name if op_name and op_name != op_type else op_type
        out.append(
            Change(
                "op",
                f"op {shown} grew {delta:.2f} ms per {after.get('per')} ({a:.2f} → {b:.2f} ms)",
                "moderate",
                delta,
            )
        )
    before_top = (before.get("top") or {}).get("rule_id")
    after_top = after.get("top") or {}
    if after_top and after_top.get("rule_id") != before_top:
        out.append(Change("finding", f"New top finding: {after_top.get('title')}", "moderate"))
    rank = {"high": 0, "moderate": 1, "none": 2}
    return sorted(out, key=lambda c: (rank[c.severity], ORDER.index(c.kind), -abs(c.delta_ms)))


#: Within a severity, who is slow comes before by how much and where.
ORDER = ("culprit", "step_time", "category", "op", "finding", "recovered")


def _largest_growth(
    before: Mapping[str, float | None], after: Mapping[str, float | None]
) -> tuple[str, float, float, float] | None:
    """(name, growth, before, after) of the item that grew most, None when none grew."""
    best = None
    for name in set(before) | set(after):
        a, b = before.get(name) or 0.0, after.get(name) or 0.0
        if b - a > 0 and (best is None or b - a > best[1]):
            best = (name, b - a, a, b)
    return best


def with_changes(
    entries: Sequence[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any], list[Change]]]:
    """Each entry with what changed since the one before it (none for the first)."""
    return [(e, what_changed(entries[i - 1], e) if i else []) for i, e in enumerate(entries)]
