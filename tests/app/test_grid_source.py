"""A grid's rows a block at a time: AG Grid's filters, the quick filter, sort and slices."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from podscope.app.grid_source import (
    FilterError,
    block,
    column_filters,
    quick_filtered,
    rows_response,
)


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "op_name": ["dense/MatMul", "conv/Conv2D", "dense_1/MatMul", "relu/Relu", ""],
            "op_type": ["MatMul", "Conv2D", "MatMul", "Relu", "Idle"],
            "self_ms": [3.0, 5.0, 1.0, np.nan, 2.0],
            "worker": ["w_1", "w_1", "w_2", "w_2", "w_1"],
        }
    )


def rows(frame: pd.DataFrame, **request: object) -> list[str]:
    part, _ = block(frame, {"startRow": 0, "endRow": 100, **request})
    return part["op_name"].tolist()


def text(kind: str, value: str = "") -> dict[str, object]:
    return {"filterType": "text", "type": kind, "filter": value}


def number(kind: str, value: float, to: float | None = None) -> dict[str, object]:
    return {"filterType": "number", "type": kind, "filter": value, "filterTo": to}


@pytest.mark.parametrize(
    ("cond", "expected"),
    [
        (text("contains", "MATMUL"), ["dense/MatMul", "dense_1/MatMul"]),  # case-insensitive
        (text("notContains", "matmul"), ["conv/Conv2D", "relu/Relu", ""]),
        (text("equals", "relu/relu"), ["relu/Relu"]),
        (text("notEqual", "relu/relu"), ["dense/MatMul", "conv/Conv2D", "dense_1/MatMul", ""]),
        (text("startsWith", "dense"), ["dense/MatMul", "dense_1/MatMul"]),
        (text("endsWith", "2d"), ["conv/Conv2D"]),
        ({"filterType": "text", "type": "blank"}, [""]),
        (
            {"filterType": "text", "type": "notBlank"},
            ["dense/MatMul", "conv/Conv2D", "dense_1/MatMul", "relu/Relu"],
        ),
    ],
)
def test_text_filters_are_the_grids(frame: pd.DataFrame, cond: dict, expected: list[str]) -> None:
    assert rows(frame, filterModel={"op_name": cond}) == expected


@pytest.mark.parametrize(
    ("cond", "expected"),
    [
        (number("equals", 3), ["dense/MatMul"]),
        (number("notEqual", 3), ["conv/Conv2D", "dense_1/MatMul", ""]),  # NaN matches nothing
        (number("lessThan", 3), ["dense_1/MatMul", ""]),
        (number("lessThanOrEqual", 3), ["dense/MatMul", "dense_1/MatMul", ""]),
        (number("greaterThan", 3), ["conv/Conv2D"]),
        (number("greaterThanOrEqual", 3), ["dense/MatMul", "conv/Conv2D"]),
        (number("inRange", 1, 3), [""]),  # both ends excluded, as in the grid
        ({"filterType": "number", "type": "blank"}, ["relu/Relu"]),
    ],
)
def test_number_filters_are_the_grids(frame: pd.DataFrame, cond: dict, expected: list[str]) -> None:
    assert rows(frame, filterModel={"self_ms": cond}) == expected


def test_two_conditions_join_with_and_or_or_and_columns_with_and(frame: pd.DataFrame) -> None:
    either = {"operator": "OR", "conditions": [text("equals", "relu"), text("equals", "conv2d")]}
    assert rows(frame, filterModel={"op_type": either}) == ["conv/Conv2D", "relu/Relu"]
    both = {"operator": "AND", "conditions": [number("greaterThan", 1), number("lessThan", 4)]}
    assert rows(frame, filterModel={"self_ms": both}) == ["dense/MatMul", ""]
    model = {"op_type": text("equals", "matmul"), "worker": text("equals", "w_2")}
    assert rows(frame, filterModel=model) == ["dense_1/MatMul"]


def test_sort_is_stable_multi_key_with_missing_values_last(frame: pd.DataFrame) -> None:
    up = [{"colId": "self_ms", "sort": "asc"}]
    assert rows(frame, sortModel=up) == [
        "dense_1/MatMul",
        "",
        "dense/MatMul",
        "conv/Conv2D",
        "relu/Relu",
    ]
    down = [{"colId": "self_ms", "sort": "desc"}]
    assert rows(frame, sortModel=down)[-1] == "relu/Relu"
    by_worker = [{"colId": "worker", "sort": "desc"}, {"colId": "self_ms", "sort": "desc"}]
    assert rows(frame, sortModel=by_worker) == [
        "dense_1/MatMul", "relu/Relu", "conv/Conv2D", "dense/MatMul", "",
    ]  # fmt: skip
    assert rows(frame, sortModel=[{"colId": "worker", "sort": "asc"}]) == [
        "dense/MatMul", "conv/Conv2D", "", "dense_1/MatMul", "relu/Relu",
    ]  # fmt: skip  # equal keys keep the frame's order
    assert rows(frame, sortModel=[{"colId": "timeline", "sort": "asc"}]) == rows(frame)


def test_block_is_the_slice_asked_for_and_counts_every_row_that_passes(
    frame: pd.DataFrame,
) -> None:
    big = pd.concat([frame] * 60, ignore_index=True)  # 300 rows
    part, count = block(big, {"startRow": 100, "endRow": 200})
    assert count == 300 and len(part) == 100 and part.index[0] == 100
    part, count = block(
        big, {"startRow": 200, "endRow": 300, "filterModel": {"op_type": text("equals", "matmul")}}
    )
    assert count == 120 and part.empty
    part, count = block(
        big, {"startRow": 100, "endRow": 200, "filterModel": {"op_type": text("equals", "matmul")}}
    )
    assert count == 120 and len(part) == 20
    assert block(big, {"startRow": 5, "endRow": 2})[0].empty
    assert len(block(big, {})[0]) == 0  # no range asked: no rows


def test_quick_filter_needs_every_word_in_some_text_column(frame: pd.DataFrame) -> None:
    assert quick_filtered(frame, "matmul w_2")["op_name"].tolist() == ["dense_1/MatMul"]
    assert quick_filtered(frame, "  ").equals(frame)
    assert quick_filtered(frame, "3.0").empty  # numbers are not searched
    part, count = block(frame, {"startRow": 0, "endRow": 1}, quick="MATMUL")
    assert count == 2 and part["op_name"].tolist() == ["dense/MatMul"]


def test_a_filter_the_grid_does_not_send_is_a_typed_error(frame: pd.DataFrame) -> None:
    with pytest.raises(FilterError, match="'gone'"):
        block(frame, {"filterModel": {"gone": text("contains", "x")}})
    with pytest.raises(FilterError, match=r"'op_name'.*'regex'"):
        block(frame, {"filterModel": {"op_name": text("regex", "x")}})


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        ({"startRow": "abc", "endRow": 100}, "startRow is a row number"),
        ({"startRow": -1, "endRow": 100}, "startRow is a row number"),
        ({"startRow": 0, "endRow": 10**9}, "at most 1000 rows"),
        ({"startRow": 0, "endRow": 1, "sortModel": [{"colId": "x"}] * 20_000}, "sort model"),
        ({"startRow": 0, "endRow": 1, "sortModel": "op_name"}, "sort model"),
        ({"startRow": 0, "endRow": 1, "filterModel": ["op_name"]}, "filter model"),
        ({"filterModel": {f"c{i}": text("contains") for i in range(100)}}, "filter model"),
        ({"filterModel": {"op_name": text("contains", "x" * 10_000)}}, "over 200 characters"),
        ({"filterModel": {"op_name": {"conditions": [text("contains")] * 50}}}, "two conditions"),
        ({"filterModel": {"self_ms": number("equals", "many")}}, "without a number"),  # type: ignore[arg-type]
        ({"filterModel": {"op_name": "x"}}, "a filter is an object"),
        ([1, 2], "an object"),
    ],
)
def test_a_request_past_what_a_grid_sends_is_refused_at_once(
    frame: pd.DataFrame, request_: object, why: str
) -> None:
    """A viewer's crafted request: refused by its size before any work, never a 500 (the
    page answers no rows)."""
    with pytest.raises(FilterError, match=why):
        block(frame, request_)
    assert rows_response(frame, request_) == {"rowData": [], "rowCount": 0}


def test_the_quick_filter_is_bounded(frame: pd.DataFrame) -> None:
    with pytest.raises(FilterError, match="at most 16 words"):
        block(frame, {"startRow": 0, "endRow": 1}, quick=" ".join(["w"] * 4000))
    assert rows_response(frame, {"startRow": 0, "endRow": 1}, quick="matmul") == {
        "rowData": [
            {"op_name": "dense/MatMul", "op_type": "MatMul", "self_ms": 3.0, "worker": "w_1"}
        ],
        "rowCount": 2,
    }


def test_column_filters_follow_the_values_and_links_are_neither_sorted_nor_filtered(
    frame: pd.DataFrame,
) -> None:
    columns = [
        {"field": "op_name"},
        {"field": "self_ms"},
        {"field": "timeline", "cellRenderer": "markdown"},
    ]
    out = {c["field"]: c for c in column_filters(columns, frame)}
    assert out["op_name"]["filter"] == "agTextColumnFilter"
    assert out["self_ms"]["filter"] == "agNumberColumnFilter"
    assert out["timeline"]["filter"] is False and out["timeline"]["sortable"] is False
    assert "filter" not in columns[0]  # the definitions given are left as they were
