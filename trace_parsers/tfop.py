"""TensorFlow op names: ``"model/dense/MatMul:MatMul"`` → op name and op type, as XProf does.

Rules follow XProf's ``ParseTfOpFullname``: ``<name>:<Type>`` where the name matches
``[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*`` and the type ``[A-Z_][A-Za-z0-9_]*``; tf.data iterator
events (``Iterator::…``) get type ``Dataset``; otherwise a JAX op ``<name>:<type>`` with a
lowercase type (``[a-z_][a-z0-9_]*``, ``[…]`` parameters dropped), and an empty type is derived
from the name's last scope without a numeric ``_N`` suffix (``jit(f)/jit(main)/add:`` → ``add``,
``model/dense/MatMul:`` → ``MatMul``). Parsing runs once per distinct string (on the
categories), never per row.

    >>> from podscope.trace_parsers.tfop import parse_tf_op
    >>> parse_tf_op("dense/MatMul:_MklMatMul"), parse_tf_op("ThreadpoolListener::Record")
    (('dense/MatMul', '_MklMatMul'), None)
    >>> parse_tf_op("jit(f)/jit(main)/reduce_sum:")
    ('jit(f)/jit(main)/reduce_sum', 'reduce_sum')
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas loads with split_tf_op's caller: parse_tf_op alone needs none
    import pandas as pd

_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_./>\-]*\Z")
_TYPE = re.compile(r"[A-Z_][A-Za-z0-9_]*\Z")
_JAX_TYPE = re.compile(r"[a-z_][a-z0-9_]*(?:\[.*\])?\Z", re.S)
DATASET_OP = "Dataset"


def parse_tf_op(fullname: str) -> tuple[str, str] | None:
    """``(op_name, op_type)`` of a TF or JAX op full name, or None if it is not an op."""
    name, sep, op_type = fullname.partition(":")
    if not sep:
        return None
    if name == "Iterator":
        return fullname, DATASET_OP
    if _NAME.match(name) and _TYPE.match(op_type):
        return name, op_type
    derived = op_type or _derive_type(name)
    if not derived:
        return None
    if _JAX_TYPE.match(derived):
        return name, derived.partition("[")[0]
    return (name, derived) if not op_type else None


def _derive_type(name: str) -> str:
    """The last name scope, without a numeric ``_N`` suffix (XProf's ``DeriveOpType``)."""
    last = name.rpartition("/")[2]
    head, sep, suffix = last.rpartition("_")
    return head if sep and suffix.lstrip("+-").isdigit() else last


def split_tf_op(
    tf_op: pd.Categorical, name: pd.Categorical
) -> tuple[pd.Categorical, pd.Categorical]:
    """Per event: op name and type from the ``tf_op`` stat, else from the event name.

    Args:
        tf_op: the events' ``tf_op`` stat (missing where the event has none).
        name: the events' names.

    Returns:
        ``(op_name, op_type)`` categoricals, missing for events that are not TF ops.
    """
    from podscope.trace_parsers._columns import cat

    names: list[str | None] = []
    types: list[str | None] = []
    for col in (tf_op, name):
        for c in col.categories:
            parsed = parse_tf_op(str(c))
            names.append(parsed[0] if parsed else None)
            types.append(parsed[1] if parsed else None)
    n_a = len(tf_op.categories)
    cb = np.asarray(name.codes)
    ca = np.asarray(tf_op.codes)
    if not n_a or (ca < 0).all():  # no tf_op stat (TF's host traces): one take per column
        return cat(cb, names[n_a:]), cat(cb, types[n_a:])
    is_op_a = np.array([n is not None for n in names[:n_a]] + [False], dtype=bool)
    from_stat = is_op_a[np.where(ca < 0, n_a, ca)]
    cb32 = cb.astype(np.int32)
    codes = np.where(from_stat, ca, np.where(cb32 < 0, -1, cb32 + n_a))
    return cat(codes, names), cat(codes, types)
