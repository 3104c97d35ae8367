"""Pattern tests on categorical columns, evaluated once per category and mapped to rows."""

from __future__ import annotations

import numpy as np
import pandas as pd


def matches(col: pd.Series, pattern: str, *, how: str = "contains") -> np.ndarray:
    """Row mask: the categorical ``col`` matches the regex ``pattern`` (``how``: contains,
    match or startswith). Missing values never match."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    cats = pd.Series(col.cat.categories.astype(str), dtype="str")
    if how == "startswith":
        hit = cats.str.startswith(pattern)
    elif how == "match":
        hit = cats.str.match(pattern)
    else:
        hit = cats.str.contains(pattern, regex=True)
    table = np.append(hit.to_numpy(dtype=bool), False)  # code -1 (missing) → False
    return table.take(col.cat.codes.to_numpy())  # take: about half the time of table[codes]


def isin(col: pd.Series, values: set[str] | frozenset[str] | list[str]) -> np.ndarray:
    """Row mask: the categorical ``col`` is one of ``values``."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        col = col.astype("category")
    table = np.append(col.cat.categories.isin(list(values)), False)
    return table.take(col.cat.codes.to_numpy())
