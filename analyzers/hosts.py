"""A pod of hundreds of hosts, made readable: hosts picked by name or pattern, grouped by a
prefix of their names (slice, rack) or by a user's mapping, a host × step matrix of one
metric, each category's distribution across hosts, and the hosts that matter with their cause.

Pure functions of a ``SessionAnalysis``'s frames (``pod``, ``lateness``, ``slow_steps``,
``stragglers``, ``roles``); the Pod Viewer and the other pages call them.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from podscope.analyzers.attribution import worker_causes
from podscope.analyzers.breakdown import CATEGORIES

#: What a host × step matrix can show: step time, lateness, or one category's time.
METRICS = ("step_time", "lateness", *CATEGORIES)
#: Separators between the parts of a host name (``s0-r03-h017``, ``host.rack.dc``).
_SEP = re.compile(r"[-._]")


def host_name(worker: str) -> str:
    """A worker label without its port (``s0-r03-h017_8470`` → ``s0-r03-h017``)."""
    head, _, tail = str(worker).rpartition("_")
    return head if head and tail.isdigit() else str(worker)


def name_levels(workers: Iterable[str]) -> int:
    """How many prefix levels the host names have (parts split at ``-``, ``.``, ``_``) that
    group them: levels where the hosts fall into more than one group and fewer than all."""
    names = [host_name(w) for w in workers]
    if not names:
        return 0
    parts = [_SEP.split(n) for n in names]
    depth = max(len(p) for p in parts)
    useful = 0
    for level in range(1, depth):
        n = len({tuple(p[:level]) for p in parts})
        if 1 < n < len(names):
            useful = level
    return useful


def group_of(
    workers: Iterable[str], level: int | None = None, mapping: Mapping[str, str] | None = None
) -> pd.Series:
    """Each worker's group: its host name's first ``level`` parts (``s0-r03`` at level 2), or
    the group ``mapping`` gives its host (or worker) name, "(unmapped)" where it gives none;
    with neither, every worker is its own group. Indexed by worker."""
    workers = [str(w) for w in workers]
    if mapping is not None:
        groups = [mapping.get(host_name(w), mapping.get(w, "(unmapped)")) for w in workers]
    elif level:
        groups = [_prefix(host_name(w), level) for w in workers]
    else:
        groups = workers
    return pd.Series(groups, index=workers, name="group", dtype="string")


def _prefix(name: str, level: int) -> str:
    """``name`` up to its ``level``-th separator (``s0-r03-h017``, 2 → ``s0-r03``)."""
    cuts = [m.start() for m in _SEP.finditer(name)]
    return name[: cuts[level - 1]] if len(cuts) >= level else name


#: The most hosts a mapping names (a pod of 2,048 hosts is far from it), and the longest name.
MAX_MAPPED_HOSTS, MAX_NAME_CHARS = 100_000, 255


def parse_mapping(text: str) -> dict[str, str]:
    """A mapping file's ``host,group`` lines (CSV or whitespace separated; ``#`` comments and a
    ``host,group`` header skipped) → {host: group}.

    Raises:
        ValueError: a line without two fields, or a name over ``MAX_NAME_CHARS`` (names the
            line), or more than ``MAX_MAPPED_HOSTS`` hosts.
    """
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if len(out) >= MAX_MAPPED_HOSTS:
            raise ValueError(f"more than {MAX_MAPPED_HOSTS:,} hosts")
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = [f.strip() for f in re.split(r"[,\t ]+", line, maxsplit=1)]
        if len(fields) != 2 or not all(fields):
            raise ValueError(f"line {number}: expected 'host,group', got {raw.strip()!r}")
        if number == 1 and fields == ["host", "group"]:
            continue
        if max(map(len, fields)) > MAX_NAME_CHARS:
            raise ValueError(f"line {number}: a name over {MAX_NAME_CHARS} characters")
        out[fields[0]] = fields[1]
    return out


def select_hosts(workers: Iterable[str], query: str | None) -> list[str]:
    """The workers whose name matches ``query``: a glob pattern (``s1-*``, ``*-h00?``) where it
    has ``*``, ``?`` or ``[``, else a case-insensitive substring; several separated by commas
    or spaces (any of them). Empty: every worker. Sorted."""
    workers = sorted(str(w) for w in workers)
    terms = [t for t in re.split(r"[,\s]+", (query or "").strip()) if t]
    if not terms:
        return workers

    def hit(worker: str) -> bool:
        for term in terms:
            if any(c in term for c in "*?["):
                if fnmatch.fnmatchcase(worker, term) or fnmatch.fnmatchcase(
                    host_name(worker), term
                ):
                    return True
            elif term.lower() in worker.lower():
                return True
        return False

    return [w for w in workers if hit(w)]


def host_step_matrix(pod: pd.DataFrame, lateness: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Worker × step matrix of ``metric`` in ms (``METRICS``): step time and the categories
    from ``pod`` (one row per worker and step), lateness from ``lateness``."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    if metric == "lateness":
        frame, column = lateness, "lateness_ns"
    else:
        frame, column = pod, "step_time_ns" if metric == "step_time" else f"{metric}_ns"
    if frame.empty:
        return pd.DataFrame()
    values = frame.assign(worker=frame["worker"].astype(str), _v=frame[column].astype(float))
    grid = values.pivot_table(index="worker", columns="step", values="_v", aggfunc="mean")
    return grid / 1e6


def grouped_matrix(grid: pd.DataFrame, groups: pd.Series) -> pd.DataFrame:
    """The rows of ``grid`` averaged per group (a group's row: its hosts' mean per step)."""
    if grid.empty:
        return grid
    return grid.groupby(groups.reindex(grid.index).fillna("(unmapped)").to_numpy()).mean()


def category_distribution(pod: pd.DataFrame) -> pd.DataFrame:
    """Per category (and step time), its per-host mean's spread across hosts: ``p5, p25,
    median, p75, p95, max`` in ms, and the host with the maximum. Categories no host spends
    time in are left out."""
    if pod.empty:
        return pd.DataFrame()
    means = _host_means(pod)
    rows = []
    for name in means.columns:
        v = means[name].dropna()
        if v.empty or (name != "step_time" and not (v > 0).any()):
            continue
        q = np.percentile(v.to_numpy(), [5, 25, 50, 75, 95])
        rows.append(
            {
                "category": name,
                "p5_ms": q[0],
                "p25_ms": q[1],
                "median_ms": q[2],
                "p75_ms": q[3],
                "p95_ms": q[4],
                "max_ms": float(v.max()),
                "max_host": str(v.idxmax()),
            }
        )
    return pd.DataFrame(rows)


def _host_means(pod: pd.DataFrame) -> pd.DataFrame:
    """Per worker, its mean step time and category times over its steps, in ms."""
    cols = {"step_time": "step_time_ns", **{c: f"{c}_ns" for c in CATEGORIES}}
    means = (
        pod.assign(worker=pod["worker"].astype(str)).groupby("worker")[list(cols.values())].mean()
    )
    return means.astype(float).set_axis(list(cols), axis=1) / 1e6


def _category_excess(pod: pd.DataFrame) -> pd.Series:
    """Per worker, the category it spends the most more time in than the median host, as
    ``host_compute +0.150 ms`` ("" where none is above the median)."""
    if pod.empty:
        return pd.Series(dtype="string")
    cats = _host_means(pod).drop(columns="step_time").fillna(0.0)
    over = (cats - cats.median()).to_numpy()
    col = over.argmax(axis=1)  # the first largest, as ``idxmax``
    most = over[np.arange(len(over)), col]
    names = cats.columns.to_numpy()[col]
    return pd.Series(
        [f"{c} +{v:.3f} ms" if v > 0 else "" for c, v in zip(names, most, strict=True)],
        index=cats.index,
        dtype="string",
    )


def outliers(
    pod: pd.DataFrame,
    stragglers: pd.DataFrame,
    roles: pd.DataFrame,
    slow_steps: pd.DataFrame,
    top: int = 10,
) -> pd.DataFrame:
    """The hosts that matter, worst first: per host its lateness (the straggler analysis'
    ``late_ms``: mean arrival after the others' median, or step time over theirs), its mean
    step against the median host's, its role (culprit, victim), its slow steps, their cause
    (``worker_causes``) and the ops that grew most often (``slow_steps``); the hosts late by
    more than 5 % of the median step, or named culprits, and at most ``top`` of them."""
    if stragglers.empty:
        return pd.DataFrame()
    s = stragglers.assign(worker=stragglers["worker"].astype(str)).set_index("worker")
    median_step = float(s["mean_step_time_ns"].median()) / 1e6
    out = pd.DataFrame(
        {
            "late_ms": s["late_ms"].astype(float),
            "step_ms": s["mean_step_time_ns"].astype(float) / 1e6,
        }
    )
    out["vs_median"] = out["step_ms"] / median_step if median_step > 0 else np.nan
    if len(roles):
        r = roles.assign(worker=roles["worker"].astype(str)).set_index("worker")
        out["role"] = r["role"].reindex(out.index).fillna("")
    else:
        out["role"] = ""
    out["slow_steps"], out["cause"], out["ops"] = 0, "", ""
    if len(slow_steps):
        causes = worker_causes(slow_steps, ("late", "outlier")).reindex(out.index).dropna()
        out.loc[causes.index, "slow_steps"] = causes["steps"].astype("int64")
        out.loc[causes.index, "cause"] = causes["cause"]
        ops = slow_steps["ops"].astype(str)
        ops = ops[slow_steps["worker"].astype(str).isin(causes.index).to_numpy()]
        common = ops.groupby(slow_steps["worker"].astype(str)).agg(lambda g: g.mode().iloc[0])
        out.loc[causes.index, "ops"] = common.reindex(causes.index)
    # no slow step of its own (a synchronous job's late host keeps the common step time): the
    # category it spends more time in than the median host
    excess = _category_excess(pod)
    blank = (out["cause"] == "") & out.index.isin(excess.index)
    out.loc[blank, "cause"] = excess.reindex(out.index[blank])
    keep = (out["role"] == "culprit") | (out["late_ms"] > 0.05 * median_step)
    out = out[keep].sort_values(["late_ms", "step_ms"], ascending=False).head(top)
    return out.reset_index(names="worker")
