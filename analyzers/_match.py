"""Pattern tests on categorical columns, evaluated once per category and mapped to rows; group
ids and sort keys over several columns at once."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import pandas as pd

from podscope.trace_parsers.nesting import _column_kernels as kernels

#: Per categories (an immutable Index, held here so that its id is not reused): the
#: category-level results of each (pattern, how). Every worker's rows of one frame share their
#: column's categories: a batch of workers (``analyzers.execution``) tests each pattern once,
#: not once per worker (0.6 ms a test on a pod's names).
_TABLES: OrderedDict[int, tuple[pd.Index, dict[tuple[str, str], np.ndarray]]] = OrderedDict()
_TABLES_KEPT = 32
_TABLES_LOCK = threading.Lock()


def _table(categories: pd.Index, pattern: str, how: str) -> np.ndarray:
    key = (pattern, how)
    with _TABLES_LOCK:
        held = _TABLES.get(id(categories))
        if held is not None and held[0] is categories and key in held[1]:
            _TABLES.move_to_end(id(categories))
            return held[1][key]
    cats = pd.Series(categories.astype(str), dtype="str")
    if how == "startswith":
        hit = cats.str.startswith(pattern)
    elif how == "match":
        hit = cats.str.match(pattern)
    else:
        hit = cats.str.contains(pattern, regex=True)
    table = np.append(hit.to_numpy(dtype=bool), False)  # code -1 (missing) → False
    with _TABLES_LOCK:
        held = _TABLES.get(id(categories))
        if held is None or held[0] is not categories:
            held = _TABLES[id(categories)] = (categories, {})
        held[1][key] = table
        while len(_TABLES) > _TABLES_KEPT:
            _TABLES.popitem(last=False)
    return table


def matches(col: pd.Series, pattern: str, *, how: str = "contains") -> np.ndarray:
    """Row mask: the categorical ``col`` matches the regex ``pattern`` (``how``: contains,
    match or startswith). Missing values never match."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    return _rows(_table(col.cat.categories, pattern, how), col)


def isin(col: pd.Series, values: set[str] | frozenset[str] | list[str]) -> np.ndarray:
    """Row mask: the categorical ``col`` is one of ``values``."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    return _rows(np.append(col.cat.categories.isin(list(values)), False), col)


def _rows(table: np.ndarray, col: pd.Series) -> np.ndarray:
    """``table[code]`` of each row of the categorical ``col`` (False where missing), in C:
    numpy's take widens the codes and checks each one, 3 ms on a batch's 1.2 M events, and
    a batch's rules test dozens of patterns."""
    codes = np.ascontiguousarray(col.cat.codes.to_numpy())
    out = np.empty(len(codes), dtype=bool)
    kernels.gather(np.ascontiguousarray(table, dtype=bool), codes, out)
    return out


def rows_by(col: pd.Series) -> dict[str, np.ndarray]:
    """Per value of the categorical ``col`` present in it: the positions of its rows, in
    order. One sort for every value: a mask per value (``isin(col, {value})``) was a pass
    over the whole column each, 64 passes over a batch of 64 workers' events."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    codes = col.cat.codes.to_numpy()
    order = np.argsort(codes, kind="stable")
    present, first = np.unique(codes[order], return_index=True)
    bounds = np.r_[first, len(order)]
    names = col.cat.categories.astype(str)
    return {
        str(names[c]): order[bounds[i] : bounds[i + 1]] for i, c in enumerate(present) if c >= 0
    }


def group_ids(frame: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Group id per row over the categorical or boolean ``keys`` (ids in order of first
    appearance, as ``groupby(sort=False)``; a missing value is a group of its own, as
    ``dropna=False``) and each group's first row. One int64 key mixes the category codes, so
    rows are hashed once instead of grouping on several categoricals."""
    codes, radix = [], []
    for k in keys:
        col = frame[k]
        if col.dtype == bool:
            codes.append(col.to_numpy().astype(np.int64))
            radix.append(2)
            continue
        if not isinstance(col.dtype, pd.CategoricalDtype):
            col = col.astype("category")
        codes.append(col.cat.codes.to_numpy().astype(np.int64) + 1)
        radix.append(len(col.cat.categories) + 1)
    if float(np.prod(np.array(radix, dtype=np.float64))) < 2.0**62:
        key = codes[0]
        for c, r in zip(codes[1:], radix[1:], strict=True):
            key = key * r + c
        gid = pd.factorize(key)[0]
    else:  # too many categories to mix into one int64
        gid = frame.groupby(keys, sort=False, observed=True, dropna=False).ngroup().to_numpy()
    seen = np.maximum.accumulate(np.r_[-1, gid[:-1]]) if len(gid) else gid
    return gid, np.flatnonzero(gid > seen)


def worker_time_keys(
    worker: np.ndarray, times: np.ndarray, step_worker: np.ndarray, step_times: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sort keys of (worker code, time) pairs, one int64 each, for every worker's searches
    at once (``np.searchsorted`` among a worker's own rows, as one search per worker would
    find them): the times are ranked first, as epoch nanoseconds times a worker code
    overflow. Returns the keys of ``(worker, times)`` and of ``(step_worker, step_times)``."""
    ranks = np.unique(np.concatenate([times, step_times]), return_inverse=True)[1]
    span = int(ranks.max()) + 1 if len(ranks) else 1
    return (
        worker.astype(np.int64) * span + ranks[: len(times)],
        step_worker.astype(np.int64) * span + ranks[len(times) :],
    )
