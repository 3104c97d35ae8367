"""Pattern tests on categorical columns (``analyzers._match``): the category-level answer mapped
to the rows in C equals pandas' own string test, for every width of codes and with missing
values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from podscope.analyzers import _match
from podscope.trace_parsers.nesting import _column_kernels as kernels


@pytest.mark.parametrize("categories", [5, 300, 40_000])  # int8, int16 and int32 codes
def test_matches_and_isin_equal_pandas_string_tests(categories: int) -> None:
    rng = np.random.default_rng(categories)
    names = np.array([f"op{i}" for i in range(categories)] + ["Iterator::Map", "MatMul"])
    col = pd.Series(pd.Categorical(rng.choice(names, 20_000), categories=names))
    col[::7] = np.nan
    assert col.cat.codes.dtype.itemsize == {5: 1, 300: 2, 40_000: 4}[categories]
    text, present = col.astype(str), col.notna().to_numpy()
    for pattern, how, expected in [
        ("^op1", "match", text.str.match("^op1")),
        ("Iterator::", "startswith", text.str.startswith("Iterator::")),
        ("Mat|op3$", "contains", text.str.contains("Mat|op3$")),
    ]:
        got = _match.matches(col, pattern, how=how)
        assert got.dtype == bool and (got == (expected.to_numpy() & present)).all(), pattern
    assert (_match.isin(col, {"MatMul", "op3"}) == col.isin(["MatMul", "op3"]).to_numpy()).all()
    empty = col.iloc[:0]
    assert _match.matches(empty, "op").shape == (0,)


def test_a_code_outside_the_table_is_an_error_not_a_read_past_it() -> None:
    out = np.empty(3, dtype=bool)
    with pytest.raises(ValueError, match="out of the table"):
        kernels.gather(np.zeros(2, dtype=bool), np.array([0, 1, 2], dtype=np.int16), out)
    kernels.gather(np.array([False, True]), np.array([1, -1, 0], dtype=np.int64), out)
    assert out.tolist() == [True, False, False]
