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
#: The most a request may ask, past what any grid of these pages sends: rows at a time,
#: column filters (a condition pair each), sort keys, characters of a filter's text, and
#: words of the quick filter. A viewer's filter of 4,000 words took 6.3 s on 34 rows, and a
#: sort model of 20,000 entries 9.3 s.
MAX_BLOCK, MAX_FILTERS, MAX_SORTS, MAX_FILTER_CHARS, MAX_WORDS = 1000, 64, 16, 200, 16
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


def _condition(column: pd.Series, name: str, cond: Any) -> pd.Series:
    if not isinstance(cond, dict):
        raise FilterError(f"column {name!r}: a filter condition is not an object")
    text = cond.get("filter")
    if isinstance(text, str) and len(text) > MAX_FILTER_CHARS:
        raise FilterError(f"column {name!r}: a filter over {MAX_FILTER_CHARS} characters")
    kind = cond.get("type")
    if kind == "blank":
        return _blank(column)
    if kind == "notBlank":
        return ~_blank(column)
    if cond.get("filterType") == "number" and kind in _NUMBER:
        values = pd.to_numeric(column, errors="coerce")
        to = cond.get("filterTo")
        try:
            bounds = float(cond["filter"]), None if to is None else float(to)
        except (KeyError, TypeError, ValueError):
            raise FilterError(f"column {name!r}: a number filter without a number") from None
        mask = _NUMBER[kind](values, *bounds)
        return mask.fillna(False).astype(bool) & values.notna()  # a blank is no number
    if cond.get("filterType") == "text" and kind in _TEXT:
        text = column.astype("string").fillna("").str.lower()
        return _TEXT[kind](text, str(cond.get("filter") or "").lower()).astype(bool)
    raise FilterError(f"column {name!r}: no {cond.get('filterType')!r} filter {kind!r}")


def _filtered(frame: pd.DataFrame, model: Any) -> pd.DataFrame:
    if not isinstance(model, dict) or len(model) > MAX_FILTERS:
        raise FilterError(f"a filter model is an object of at most {MAX_FILTERS} columns")
    keep = pd.Series(True, index=frame.index)
    for name, spec in model.items():
        if name not in frame:
            raise FilterError(f"column {name!r}: not in this table")
        if not isinstance(spec, dict):
            raise FilterError(f"column {name!r}: a filter is an object")
        conds = spec.get("conditions") or [spec]
        if not isinstance(conds, list) or len(conds) > 2:
            raise FilterError(f"column {name!r}: at most two conditions")
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
    if len(words) > MAX_WORDS or len(text or "") > MAX_FILTER_CHARS:
        raise FilterError(
            f"the filter box takes at most {MAX_WORDS} words and {MAX_FILTER_CHARS} characters"
        )
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


def block(frame: pd.DataFrame, request: Any, quick: str | None = None) -> tuple[pd.DataFrame, int]:
    """The rows the grid asked for (``request``: its ``getRowsRequest``) after its filters,
    ``quick`` and its sort (stable: rows equal on the sort keys keep the frame's order), and
    how many rows pass the filters (the grid's row count).

    Raises:
        FilterError: a filter on a column the frame lacks, or of a kind the grid has not, or
            a request past the bounds (``MAX_BLOCK`` …) or of the wrong types.
    """
    if not isinstance(request, dict):
        raise FilterError("a rows request is an object")
    start = _row(request, "startRow") or 0
    asked = _row(request, "endRow")
    end = start if asked is None else max(asked, start)
    if end - start > MAX_BLOCK:
        raise FilterError(f"at most {MAX_BLOCK} rows at a time")
    model = request.get("sortModel") or []
    if not isinstance(model, list) or len(model) > MAX_SORTS:
        raise FilterError(f"a sort model is a list of at most {MAX_SORTS} columns")
    rows = quick_filtered(_filtered(frame, request.get("filterModel") or {}), quick)
    sort: dict[str, bool] = {}  # column → ascending; a column once, as the grid sends it
    for s in model:
        if isinstance(s, dict) and isinstance(s.get("colId"), str) and s["colId"] in rows:
            sort.setdefault(s["colId"], s.get("sort") != "desc")
    if sort:
        rows = rows.sort_values(
            list(sort), ascending=list(sort.values()), kind="stable", na_position="last"
        )
    return rows.iloc[start:end], len(rows)


def _row(request: dict[str, Any], key: str) -> int | None:
    value = request.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FilterError(f"{key} is a row number, not {str(value)[:20]!r}")
    return value


def rows_response(
    frame: pd.DataFrame,
    request: Any,
    rows: Callable[[pd.DataFrame], list[dict[str, Any]]] | None = None,
    quick: str | None = None,
) -> dict[str, Any]:
    """The grid's ``getRowsResponse`` for ``request`` (``block``): the block's rows as
    ``rows`` makes them (default ``records``) and the row count. A request no grid of these
    pages sends (a filter, sort or row range past the bounds above, or of the wrong types)
    gets no rows, not a 500."""
    try:
        part, count = block(frame, request, quick)
    except FilterError:
        return {"rowData": [], "rowCount": 0}
    return {"rowData": (rows or records)(part), "rowCount": count}


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
