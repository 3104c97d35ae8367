"""Column builders shared by the parsers: categoricals from codes, all-missing columns, a
gather that does not widen its index, and columns given in parts (one per file of a batch)
joined end to end."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd


def cat(codes: np.ndarray, labels: Any) -> pd.Categorical:
    """A categorical from codes into ``labels``, which may repeat or hold None (→ missing).

    Labels are factorized once (their count, not the rows', sets the cost); code -1 is missing.
    """
    labels = list(labels)
    if len(labels) <= _FEW_LABELS:
        position: dict[Any, int] = {}
        label_codes = [-1 if x is None else position.setdefault(x, len(position)) for x in labels]
        return cat_of(codes, np.array(label_codes, dtype=np.int64), few_dtype(tuple(position)))
    return cat_of(codes, *factorize_labels(labels))


#: Up to this many labels are factorized by a dict (pandas' factorize costs ~60 µs more on
#: a few labels: a worker's name, its planes, per frame of every file), and their dtype
#: is built once per process (``few_dtype``).
_FEW_LABELS = 256


@functools.lru_cache(maxsize=1024)
def few_dtype(labels: tuple[Any, ...], ids: bool = False) -> pd.CategoricalDtype:
    """The categorical dtype of a few distinct ``str`` labels (int64 ``ids``), built once: a
    dtype checks its categories are distinct (~80 µs on Arrow-backed strings), and the same
    few (a worker, its planes, the kinds of a stat, no category) come in every frame of every
    file. Dtypes are immutable, so frames share them as pandas' own operations do."""
    return pd.CategoricalDtype(pd.Index(list(labels), dtype="int64" if ids else "str"))


def factorize_labels(labels: Any) -> tuple[np.ndarray, pd.Index]:
    """Per label its category code (-1 for None), and the categories (unique, ``str``, in the
    order they first come)."""
    label_codes, uniques = pd.factorize(pd.Index(list(labels), dtype=object), use_na_sentinel=True)
    return label_codes, pd.Index(np.asarray(uniques, dtype=object).tolist(), dtype="str")


def cat_of(
    codes: np.ndarray, label_codes: np.ndarray, categories: pd.Index | pd.CategoricalDtype
) -> pd.Categorical:
    """``cat`` with the labels already factorized (labels shared by several columns), into
    ``categories`` or a dtype of them."""
    dtype = (
        categories
        if isinstance(categories, pd.CategoricalDtype)
        else pd.CategoricalDtype(categories)
    )
    codes = np.asarray(codes)
    if not len(label_codes):
        return pd.Categorical.from_codes(np.full(len(codes), -1, dtype=np.int8), dtype=dtype)
    # Appending -1 makes code -1 (and a -1 label code) read as missing.
    lookup = np.append(label_codes, -1).astype(code_dtype(len(dtype.categories)))
    return pd.Categorical.from_codes(gather(lookup, codes), dtype=dtype, validate=False)


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
        return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), dtype=few_dtype(()))
    mask = np.ones(n, dtype=bool)
    if dtype == "boolean":
        return pd.arrays.BooleanArray(np.zeros(n, dtype=bool), mask)
    return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), mask)


class Labels(NamedTuple):
    """A categorical column's part: codes (-1: missing) into labels, which may repeat or be
    None (``str`` labels; int64 ids for an id column)."""

    codes: np.ndarray
    labels: Sequence[Any] | np.ndarray


class Masked(NamedTuple):
    """A nullable Int64 or Float64 column's part: values, and True where missing."""

    values: np.ndarray
    mask: np.ndarray


def sorted_codes(codes: np.ndarray, labels: Sequence[str], cut: int | None = None) -> Labels:
    """``labels[codes]`` (-1: missing), each label cut at ``cut`` characters, as
    ``pd.Categorical`` of the values would have them: codes into the labels used, sorted; in
    linear time."""
    used = np.flatnonzero(np.bincount(codes + 1, minlength=len(labels) + 1)[1:])
    texts = [labels[i][:cut] for i in used.tolist()]
    categories = sorted(set(texts))
    position = {t: i for i, t in enumerate(categories)}
    lookup = np.full(len(labels) + 1, -1, dtype=np.int64)
    lookup[used + 1] = [position[t] for t in texts]
    return Labels(lookup[codes + 1], categories)


def sorted_labels(values: Sequence[str | None]) -> Labels:
    """``values`` (None: missing) as ``pd.Categorical(values)`` has them: codes into the
    sorted distinct values."""
    position: dict[str, int] = {}
    codes = [-1 if v is None else position.setdefault(v, len(position)) for v in values]
    return sorted_codes(np.array(codes, dtype=np.int64), list(position))


def id_labels(codes: np.ndarray, ids: np.ndarray) -> Labels:
    """``ids[codes]`` as ``id_cat`` has them: codes into the sorted distinct ids."""
    uniques, inverse = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
    return Labels(np.append(inverse, -1)[codes], uniques)


def masked(values: Sequence[Any], dtype: Any) -> Masked:
    """A list with None (missing) as a ``Masked`` part of ``dtype`` values."""
    return Masked(
        np.array([0 if v is None else v for v in values], dtype=dtype),
        np.array([v is None for v in values], dtype=bool),
    )


def join_column(dtype: str, parts: Sequence[Any]) -> Any:
    """One column of a ``SCHEMA`` dtype from its parts end to end, as ``schema.concat_frames``
    of the parts' frames has it: a categorical's categories in the order they first come
    (``Labels``), nullable numbers from ``Masked`` parts, ``string`` from lists, other dtypes
    from arrays."""
    if dtype in ("category", "category[int64]"):
        first = len(parts[0].labels)
        offsets = np.cumsum([0, *(len(p.labels) for p in parts)])[:-1]
        codes = (
            np.asarray(parts[0].codes)
            if len(parts) == 1
            else np.concatenate(
                [
                    np.where(p.codes >= 0, p.codes + off, -1)
                    for p, off in zip(parts, offsets.tolist(), strict=True)
                ]
            )
        )
        if dtype == "category":
            return cat(codes, [x for p in parts for x in p.labels])
        ids = np.concatenate([np.asarray(p.labels, dtype=np.int64) for p in parts])
        label_codes, uniques = pd.factorize(ids) if len(parts) > 1 else (np.arange(first), ids)
        lookup = np.append(label_codes, -1).astype(code_dtype(len(uniques)))
        dtype = (
            few_dtype(tuple(uniques.tolist()), ids=True)
            if len(uniques) <= _FEW_LABELS
            else pd.CategoricalDtype(pd.Index(uniques, dtype="int64"))
        )
        return pd.Categorical.from_codes(gather(lookup, codes), dtype=dtype, validate=False)
    if dtype in ("Int64", "Float64"):
        values = np.concatenate([p.values for p in parts])
        mask = np.concatenate([p.mask for p in parts])
        if dtype == "Int64":
            return pd.arrays.IntegerArray(values.astype(np.int64, copy=False), mask)
        return pd.arrays.FloatingArray(values.astype(np.float64, copy=False), mask)
    if dtype == "string":
        return pd.array([x for p in parts for x in p], dtype="string")
    return (np.concatenate(parts) if len(parts) > 1 else parts[0]).astype(dtype, copy=False)
