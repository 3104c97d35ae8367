"""TFLite trace sections and ``benchmark_model`` op profiles.

TFLite (``debug.tflite.trace 1``) writes ATrace sections named ``<tag>@<a>/<b>``:
``invoke@-1/0`` (Interpreter::Invoke), ``Invoke@0/<subgraph>``, ``<OP>@<node>/<subgraph>``
(e.g. ``CONV_2D@31/0``), ``AllocateTensors@0/<subgraph>``, ``ModifyGraphWithDelegate@0/<subgraph>``,
and delegate kernels named after the delegate (``TfLiteXNNPackDelegate@…``).

    >>> section("CONV_2D@31/0")
    Section(tag='CONV_2D', node=31, subgraph=0, kind='op')
    >>> table = parse_benchmark_model(open("bench.txt").read())   # one row per op (node)
"""

from __future__ import annotations

import csv
import io
import re
from typing import NamedTuple

import pandas as pd

from podscope.trace_parsers.errors import TraceParseError

_INT = re.compile(r"-?\d+\Z")


class Section(NamedTuple):
    tag: str
    node: int
    subgraph: int
    kind: str


def section(name: str) -> Section | None:
    """The parts of a TFLite section name, or None if ``name`` is not one."""
    tag, sep, rest = name.rpartition("@")
    a, slash, b = rest.partition("/")
    if not sep or not tag or not slash or not _INT.match(a) or not _INT.match(b):
        return None
    kind = {
        "invoke": "invoke",
        "Invoke": "subgraph_invoke",
        "AllocateTensors": "allocate",
        "ModifyGraphWithDelegate": "delegate_setup",
    }.get(tag)
    if kind is None:
        kind = "delegate" if "Delegate" in tag else "op"
    return Section(tag, int(a), int(b), kind)


def sections(names: pd.Series) -> pd.DataFrame:
    """Per row of a categorical name column: ``tag, node, subgraph, kind`` (missing when the
    name is not a TFLite section). Parsed once per distinct name."""
    cats = names.cat.categories
    parsed = [section(str(c)) for c in cats]
    table = pd.DataFrame(
        [(p.tag, p.node, p.subgraph, p.kind) if p else (None, None, None, None) for p in parsed],
        columns=["tag", "node", "subgraph", "kind"],
        index=range(len(cats)),
    ).astype({"node": "Int64", "subgraph": "Int64"})
    codes = names.cat.codes.to_numpy()
    out = table.reindex(codes).reset_index(drop=True)
    out.index = names.index
    return out


PROFILE_HEADER = "Operator-wise Profiling Info for Regular Benchmark Runs"
BENCH_COLUMNS = [
    "node_type",
    "first_ms",
    "avg_ms",
    "percent",
    "cdf_percent",
    "mem_kb",
    "times_called",
    "name",
]


def parse_benchmark_model(text: str, source: str = "<text>") -> pd.DataFrame:
    """``benchmark_model --enable_op_profiling=true`` output → one row per op (Run Order table).

    Both text layouts (with and without the ``[start]`` column; tab-separated, right-aligned)
    and the CSV layout (``--op_profiling_output_mode=csv``). Node types may contain spaces
    and commas.

    Returns:
        Columns ``node_type, first_ms, avg_ms, percent, cdf_percent, mem_kb, times_called, name``.

    Raises:
        TraceParseError: no op-profiling table in the text.
    """
    start = text.find(PROFILE_HEADER)
    body = text[start:] if start >= 0 else text
    rows = (
        _csv_rows(body)
        if "node type" in body.lower() and "," in body.split("\n", 3)[-1][:200] and "\t" not in body
        else None
    )
    rows = rows if rows else _text_rows(body)
    if not rows:
        raise TraceParseError(source, "benchmark_model", "no 'Run Order' op-profiling table found")
    frame = pd.DataFrame(rows, columns=BENCH_COLUMNS)
    for col in BENCH_COLUMNS[1:-1]:
        frame[col] = pd.to_numeric(frame[col].astype(str).str.rstrip("%"), errors="coerce")
    return frame


def _text_rows(body: str) -> list[list[str]]:
    """Rows of the first ``Run Order`` table of the text layout."""
    rows: list[list[str]] = []
    header: list[str] | None = None
    in_table = False
    for line in body.splitlines():
        if "Run Order" in line and "=" in line:
            in_table, header = True, None
            continue
        if not in_table:
            continue
        if header is None:
            if "[node type]" in line:
                header = [
                    h.strip().strip("[]").lower()
                    for h in re.split(r"\t+", line.strip())
                    if h.strip()
                ]
            continue
        if not line.strip() or line.strip().startswith("="):
            if rows:
                break
            continue
        cells = [c.strip() for c in re.split(r"\t+", line.strip())]
        if len(cells) < len(header):
            continue
        get = dict(
            zip(
                header,
                [*cells[: len(header) - 1], "\t".join(cells[len(header) - 1 :])],
                strict=True,
            )
        )
        rows.append(
            [
                get.get("node type", ""),
                get.get("first", ""),
                get.get("avg ms", ""),
                get.get("%", ""),
                get.get("cdf%", ""),
                get.get("mem kb", ""),
                get.get("times called", ""),
                get.get("name", ""),
            ]
        )
    return rows


def _csv_rows(body: str) -> list[list[str]]:
    reader = csv.reader(io.StringIO(body))
    rows: list[list[str]] = []
    header: list[str] | None = None
    for row in reader:
        lowered = [c.strip().lower() for c in row]
        if "node type" in lowered:
            header = lowered
            continue
        if header is None or len(row) != len(header):
            if header is not None and rows:
                break
            continue
        get = dict(zip(header, [c.strip() for c in row], strict=True))
        rows.append(
            [
                get.get("node type", ""),
                get.get("first", ""),
                get.get("avg ms", get.get("avg_ms", "")),
                get.get("%", ""),
                get.get("cdf%", ""),
                get.get("mem kb", ""),
                get.get("times called", ""),
                get.get("name", ""),
            ]
        )
    return rows
