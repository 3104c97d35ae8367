"""TF and JAX op full names → (op name, op type), XProf's ParseTfOpFullname rules."""

from __future__ import annotations

import pytest

from podscope.trace_parsers.tfop import parse_tf_op


@pytest.mark.parametrize(
    ("fullname", "expected"),
    [
        ("model/dense/MatMul:MatMul", ("model/dense/MatMul", "MatMul")),
        ("dense/MatMul:_MklMatMul", ("dense/MatMul", "_MklMatMul")),
        ("Iterator::Root::Prefetch", ("Iterator::Root::Prefetch", "Dataset")),
        # JAX: a lowercase type, its [parameters] dropped; an empty type from the last scope
        ("jit(f)/jit(main)/add:", ("jit(f)/jit(main)/add", "add")),
        (
            "pmap(f)/gather[ dims=(1,) ]:gather[ dims=(1,) ]",
            ("pmap(f)/gather[ dims=(1,) ]", "gather"),
        ),
        ("model/conv/Conv2D_1:", ("model/conv/Conv2D_1", "Conv2D")),  # TF, type derived
        ("XlaModule:", ("XlaModule", "XlaModule")),
        # not ops
        ("ExecutorState::Process", None),
        ("EagerLocalExecute: MatMul", None),
        ("ThreadpoolListener::Record", None),
        ("MemcpyHtoD", None),
        (":", None),
    ],
)
def test_parse_tf_op(fullname: str, expected: tuple[str, str] | None) -> None:
    assert parse_tf_op(fullname) == expected
