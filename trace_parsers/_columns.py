"""Column builders shared by the parsers: categoricals from codes, all-missing columns, and a
gather that does not widen its index."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def cat(codes: np.ndarray, labels: Any) -> pd.Categorical:
    """A categorical from codes into ``labels``, which may repeat or hold None (→ missing).

    Labels are factorized once (their count, not the rows', sets the cost); code -1 is missing.
    """
    return cat_of(codes, *factorize_labels(labels))


def factorize_labels(labels: Any) -> tuple[np.ndarray, pd.Index]:
    """Per label its category code (-1 for None), and the categories (unique, ``str``)."""
    label_codes, uniques = pd.factorize(pd.Index(list(labels), dtype=object), use_na_sentinel=True)
    return label_codes, pd.Index(np.asarray(uniques, dtype=object).tolist(), dtype="str")


def cat_of(codes: np.ndarray, label_codes: np.ndarray, categories: pd.Index) -> pd.Categorical:
    """``cat`` with the labels already factorized (labels shared by several columns)."""
    codes = np.asarray(codes)
    if not len(label_codes):
        return pd.Categorical.from_codes(
            np.full(len(codes), -1, dtype=np.int8), categories=categories
        )
    # Appending -1 makes code -1 (and a -1 label code) read as missing.
    lookup = np.append(label_codes, -1).astype(code_dtype(len(categories)))
    return pd.Categorical.from_codes(gather(lookup, codes), categories=categories, validate=False)


def id_cat(codes: np.ndarray, ids: np.ndarray) -> pd.Categorical:
    """A categorical of the int64 values ``ids[codes]``; ``ids`` may repeat (one line id in two
    planes): they are uniqued once, so the cost is set by their count, not the rows'."""
    uniques, inverse = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
    lookup = inverse.astype(code_dtype(len(uniques)))
    return pd.Categorical.from_codes(
        gather(lookup, codes), categories=pd.Index(uniques, dtype="int64"), validate=False
    )


_GATHER_ROWS = 1 << 16


def gather(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``table[index]`` in blocks: numpy converts a narrower index to intp first, which for a
    column of a million int32 row numbers is an 8 MB temporary at the parse's memory peak.

    Raises:
        IndexError: an index is out of bounds.
    """
    index = np.asarray(index)
    out = np.empty(len(index), dtype=table.dtype)
    for i in range(0, len(index), _GATHER_ROWS):
        np.take(table, index[i : i + _GATHER_ROWS], out=out[i : i + _GATHER_ROWS])
    return out


def code_dtype(n: int) -> type[np.signedinteger]:
    """The narrowest code dtype for ``n`` categories (as pandas picks it)."""
    return np.int8 if n < 127 else np.int16 if n < 32_767 else np.int32


def missing(n: int, dtype: str) -> Any:
    """An all-missing column of ``n`` rows (zeros are calloc'd lazily, so this is cheap)."""
    if dtype == "category":
        return pd.Categorical.from_codes(
            np.full(n, -1, dtype=np.int8), categories=pd.Index([], dtype="str")
        )
    mask = np.ones(n, dtype=bool)
    if dtype == "boolean":
        return pd.arrays.BooleanArray(np.zeros(n, dtype=bool), mask)
    return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), mask)
