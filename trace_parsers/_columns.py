"""Column builders shared by the parsers: categoricals from codes, nullable numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def cat(codes: np.ndarray, labels: Any) -> pd.Categorical:
    """A categorical from codes into ``labels``, which may repeat or hold None (→ missing).

    Labels are factorized once (their count, not the rows', sets the cost); code -1 is missing.
    """
    label_codes, uniques = pd.factorize(pd.Index(list(labels), dtype=object), use_na_sentinel=True)
    codes = np.asarray(codes, dtype=np.int64)
    if len(label_codes):
        mapped = np.where(codes >= 0, label_codes[np.clip(codes, 0, len(label_codes) - 1)], -1)
    else:
        mapped = np.full(len(codes), -1, dtype=np.int64)
    return pd.Categorical.from_codes(mapped, categories=pd.Index(uniques, dtype=object))
