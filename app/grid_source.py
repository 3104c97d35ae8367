"""A grid's rows served a block at a time (AG Grid's infinite row model): the grid asks for
rows ``startRow`` to ``endRow`` with its sort and column filters, and this module answers
from the frame, so a page with a 6,000-row op table (or 50,000 on a big pod) ships the 100 rows
in view, not all of them.

    >>> frame = pd.DataFrame({"op": ["MatMul", "Conv2D", "MatMulGrad"], "self_ms": [3.0, 5.0, 1.0]})
    >>> block(frame, {"startRow": 0, "endRow": 2, "sortModel": [{"colId": "self_ms", "sort": "asc"}],
    ...               "filterModel": {"op": {"filterType": "text", "type": "contains", "filter": "matmul"}}})
    (           op  self_ms
    2  MatMulGrad      1.0
    0      MatMul      3.0, 2)

The filters are AG Grid's text and number filters, one condition or two joined by AND/OR;
the quick filter keeps rows that hold every word of it in one of their text columns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

#: Rows a grid asks for at a time (its ``cacheBlockSize``).
BLOCK = 100
#: AG Grid's number filter: value against ``filter`` (``inRange``: between ``filter`` and
#: ``filterTo``, both ends excluded, as the grid's own filter does; blanks pass none of them).
_NUMBER: dict[str, Callable[[pd.Series, float, float | None], pd.Series]] = {
    "equals": lambda x, v, _: x == v,
    "notEqual": lambda x, v, _: x != v,
    "lessThan": lambda x, v, _: x < v,
    "lessThanOrEqual": lambda x, v, _: x <= v,
    "greaterThan": lambda x, v, _: x > v,
    "greaterThanOrEqual": lambda x, v, _: x >= v,
    "inRange": lambda x, v, to: (x > v) & (x < (to if to is not None else v)),
}
#: AG Grid's text filter, case-insensitive.
_TEXT: dict[str, Callable[[pd.Series, str], pd.Series]] = {
    "contains": lambda s, v: s.str.contains(v, regex=False),
    "notContains": lambda s, v: ~s.str.contains(v, regex=False),
    "equals": lambda s, v: s == v,
    "notEqual": lambda s, v: s != v,
    "startsWith": lambda s, v: s.str.startswith(v),
    "endsWith": lambda s, v: s.str.endswith(v),
}


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A grid's ``rowData``: one dict per row, missing values as null (JSON has no NaN)."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


class FilterError(ValueError):
    """A filter the grid does not send: names the column and the filter."""


def _blank(column: pd.Series) -> pd.Series:
    return column.isna() | (column.astype("string").fillna("") == "")


def _condition(column: pd.Series, name: str, cond: dict[str, Any]) -> pd.Series:
    kind = cond.get("type")
    if kind == "blank":
        return _blank(column)
    if kind == "notBlank":
        return ~_blank(column)
    if cond.get("filterType") == "number" and kind in _NUMBER:
        values = pd.to_numeric(column, errors="coerce")
        to = cond.get("filterTo")
        mask = _NUMBER[kind](values, float(cond["filter"]), None if to is None else float(to))
        return mask.fillna(False).astype(bool) & values.notna()  # a blank is no number
    if cond.get("filterType") == "text" and kind in _TEXT:
        text = column.astype("string").fillna("").str.lower()
        return _TEXT[kind](text, str(cond.get("filter") or "").lower()).astype(bool)
    raise FilterError(f"column {name!r}: no {cond.get('filterType')!r} filter {kind!r}")


def _filtered(frame: pd.DataFrame, model: dict[str, Any]) -> pd.DataFrame:
    keep = pd.Series(True, index=frame.index)
    for name, spec in model.items():
        if name not in frame:
            raise FilterError(f"column {name!r}: not in this table")
        conds = spec.get("conditions") or [spec]
        masks = [_condition(frame[name], name, c) for c in conds]
        joined = masks[0]
        for m in masks[1:]:
            joined = (joined | m) if spec.get("operator") == "OR" else (joined & m)
        keep &= joined
    return frame[keep]


def quick_filtered(frame: pd.DataFrame, text: str | None) -> pd.DataFrame:
    """The rows that hold every word of ``text`` (case-insensitive) in one of their text
    columns (names, types, workers, devices)."""
    words = (text or "").lower().split()
    if not words or frame.empty:
        return frame
    columns = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    texts = [frame[c].astype("string").fillna("").str.lower() for c in columns]
    keep = pd.Series(True, index=frame.index)
    for word in words:
        hit = pd.Series(False, index=frame.index)
        for t in texts:
            hit |= t.str.contains(word, regex=False)
        keep &= hit
    return frame[keep]


def block(
    frame: pd.DataFrame, request: dict[str, Any], quick: str | None = None
) -> tuple[pd.DataFrame, int]:
    """The rows the grid asked for (``request``: its ``getRowsRequest``) after its filters,
    ``quick`` and its sort (stable: rows equal on the sort keys keep the frame's order), and
    how many rows pass the filters (the grid's row count).

    Raises:
        FilterError: a filter on a column the frame lacks, or of a kind the grid has not.
    """
    rows = quick_filtered(_filtered(frame, request.get("filterModel") or {}), quick)
    sort = [s for s in request.get("sortModel") or [] if s.get("colId") in rows]
    if sort:
        rows = rows.sort_values(
            [s["colId"] for s in sort],
            ascending=[s.get("sort") != "desc" for s in sort],
            kind="stable",
            na_position="last",
        )
    start = max(int(request.get("startRow") or 0), 0)
    end = max(int(request.get("endRow") or start), start)
    return rows.iloc[start:end], len(rows)


def column_filters(columns: list[dict[str, Any]], frame: pd.DataFrame) -> list[dict[str, Any]]:
    """``columns`` (grid column definitions) with the filter each column's values take: rows
    come a block at a time, so the grid cannot tell numbers from text itself. Link columns
    (a markdown cell) are neither sorted nor filtered."""
    out = []
    for col in columns:
        field = col["field"]
        if col.get("cellRenderer") == "markdown" or field not in frame:
            col = {**col, "sortable": False, "filter": False}
        elif pd.api.types.is_numeric_dtype(frame[field]):
            col = {**col, "filter": "agNumberColumnFilter"}
        else:
            col = {**col, "filter": "agTextColumnFilter"}
        out.append(col)
    return out
