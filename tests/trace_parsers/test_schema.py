"""``concat_frames``, the merge's column work, against pandas' own concatenation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pandas.api.types import union_categoricals

from podscope.trace_parsers.schema import SCHEMA, concat_frames, empty_frame


def _lines(rng: np.random.Generator, n: int, names: list[str | None]) -> pd.DataFrame:
    """A ``lines`` frame of ``n`` rows whose categoricals draw from ``names``."""
    pick = rng.integers(0, len(names), n)
    frame = empty_frame("lines")
    cols = {}
    for col, dtype in SCHEMA["lines"].items():
        if dtype == "category":  # categories of str, as parsers give them
            values = [names[i] for i in pick]
            used = sorted({v for v in values if v is not None})
            cols[col] = pd.Categorical(values, categories=pd.Index(used, dtype="str"))
        else:
            cols[col] = rng.integers(0, 1000, n).astype(frame[col].dtype)
    return pd.DataFrame(cols)


def _reference(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """What ``concat_frames`` gave before its fast paths: pandas' union and concat."""
    cols = {}
    for col in frames[0].columns:
        if isinstance(frames[0][col].dtype, pd.CategoricalDtype):
            cols[col] = union_categoricals([f[col].array for f in frames], ignore_order=True)
        else:
            cols[col] = pd.concat([f[col] for f in frames], ignore_index=True)
    return pd.DataFrame(cols)


@pytest.mark.parametrize("seed", range(6))
def test_concat_frames_equals_pandas_union(seed: int) -> None:
    """Shared categories, other categories (new ones, other orders, missing values) and
    empty frames among them: the same values, categories in the same order, the same codes."""
    rng = np.random.default_rng(seed)
    pools = [["a", "b", "c"], ["c", "a", None], ["d", "b"], ["a", "b", "c"]]
    frames = [
        _lines(rng, int(rng.integers(0, 5)) if i % 3 == 2 else int(rng.integers(1, 40)), pool)
        for i, pool in enumerate(pools * 2)
    ]
    frames = [f if len(f) else empty_frame("lines") for f in frames]
    got = concat_frames("lines", frames)
    want = _reference([f for f in frames if len(f)])
    pd.testing.assert_frame_equal(got, want, check_categorical=True, check_exact=True)
    for col in ("worker", "plane", "line"):
        assert got[col].cat.categories.tolist() == want[col].cat.categories.tolist()
        assert (got[col].cat.codes.to_numpy() == want[col].cat.codes.to_numpy()).all()


def test_concat_frames_keeps_a_lone_frame_and_shifts_rows() -> None:
    """One non-empty frame is the result as it is; event rows are shifted by each frame's
    offset, -1 (none) kept."""
    rng = np.random.default_rng(0)
    one = _lines(rng, 7, ["x", "y"])
    got = concat_frames("lines", [empty_frame("lines"), one, empty_frame("lines")])
    pd.testing.assert_frame_equal(got, one)
    stats = pd.DataFrame(
        {
            c: (
                pd.Categorical(["k"] * 3)
                if t == "category"
                else pd.array([1, None, 3], dtype=t)
                if t[0].isupper()
                else np.array([0, -1, 2], dtype=t)
            )
            for c, t in SCHEMA["stats"].items()
        }
    )
    shifted = concat_frames("stats", [empty_frame("stats"), stats, stats], [0, 5, 10])
    assert shifted["event_row"].tolist() == [5, -1, 7, 10, -1, 12]
    assert concat_frames("stats", [empty_frame("stats")] * 2, [0, 0]).equals(empty_frame("stats"))
