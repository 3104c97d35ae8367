"""An XLA program as a reader looks at it around one op: its module's HLO text with the op's
line marked, and the graph of instructions within a few hops of it (its operands and users),
fusions opened on request to their fused computations, as XProf's graph viewer draws it.

    >>> modules = modules_of("host.xplane.pb")              # program id -> Module
    >>> lines = module_text(modules[15], "fusion.3")         # [(text, is the op)]
    >>> g = neighbourhood(modules[15], "fusion.3", hops=2, expand={"fusion.3"})
    >>> g.nodes[["name", "opcode", "layer", "inside"]]

Both are bounded: the text by the module (whose size the capture's budget charged), the graph
by ``MAX_NODES`` (an instruction with thousands of users shows the first ones and says how
many it left out).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from podscope.trace_parsers.budget import Budget
from podscope.trace_parsers.errors import TraceParseError
from podscope.trace_parsers.hlo import hlo_protos
from podscope.trace_parsers.hlo_module import (
    Instruction,
    Module,
    category,
    decode_module,
    expression,
)

FORMAT = "xplane"
#: Nodes a graph holds at most; past it, the farthest are left out (``Graph.left_out``).
MAX_NODES = 120
MAX_HOPS = 4
NODE_COLUMNS = ["name", "opcode", "category", "shape", "layer", "row", "inside", "is_op", "fusion"]


class Graph(NamedTuple):
    """Nodes (``NODE_COLUMNS``: ``layer`` is the column in data-flow order, ``row`` the place
    in it, ``inside`` the fusion whose computation holds the node, ``fusion`` whether it can
    be opened), edges ``(source, target)`` by name, and how many instructions within the hops
    were left out."""

    nodes: pd.DataFrame
    edges: list[tuple[str, str]]
    left_out: int


def modules_of(data: bytes, source: str = "<bytes>") -> dict[int, Module]:
    """Every XLA program of a capture (an XSpace's bytes), by its unsigned program id.

    Raises:
        TraceParseError: the file or one of its programs is corrupt, or over its budget.
    """
    budget = Budget.for_input(len(data), source, FORMAT)
    data = budget.inflate(data)
    try:
        return {pid % (1 << 64): decode_module(raw, pid) for pid, raw in hlo_protos(data, budget)}
    except ValueError as e:
        raise TraceParseError(source, FORMAT, f"HLO module metadata: {e}") from e


def modules_in(path: str | Path) -> dict[int, Module]:
    """``modules_of`` a file.

    Raises:
        TraceParseError: unreadable or corrupt (the file named).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TraceParseError(path, FORMAT, f"cannot read: {e.strerror or e}") from e
    return modules_of(data, str(path))


def find(module: Module, name: str) -> Instruction | None:
    """The instruction of that name (a fused one included), or None."""
    return next((i for i in module.instructions() if i.name == name), None)


def module_text(module: Module, op: str | None = None) -> list[tuple[str, bool]]:
    """The module as HLO text, one ``(line, is the op's)`` per line: the entry computation
    first, then the others (fused computations included), each instruction as one line."""
    lines: list[tuple[str, bool]] = [(f"HloModule {module.name}", False), ("", False)]
    for comp in module.computations:
        head = "ENTRY " if comp is module.entry else ""
        lines.append((f"{head}%{comp.name} {{", False))
        for i in comp.instructions:
            root = "ROOT " if i is comp.root else ""
            lines.append((f"  {root}{expression(i)}", i.name == op))
        lines += [("}", False), ("", False)]
    return lines


def _neighbours(i: Instruction) -> list[Instruction]:
    return [*i.operands, *i.users]


def neighbourhood(
    module: Module, op: str, hops: int = 2, expand: set[str] | frozenset[str] = frozenset()
) -> Graph:
    """The instructions within ``hops`` operand/user steps of ``op`` in its computation, and
    the fused computations of the fusions named in ``expand`` (their instructions ``inside``
    the fusion), laid out in data-flow order.

    Raises:
        KeyError: no instruction ``op`` in the module.
    """
    start = find(module, op)
    if start is None:
        raise KeyError(op)
    hops = max(0, min(hops, MAX_HOPS))
    seen: dict[Instruction, str] = {start: ""}  # instruction -> the fusion it is inside
    queue, left_out = deque([(start, 0)]), 0
    while queue:
        node, d = queue.popleft()
        if d == hops:
            continue
        for n in _neighbours(node):
            if n in seen:
                continue
            if len(seen) >= MAX_NODES:
                left_out += 1
                continue
            seen[n] = ""
            queue.append((n, d + 1))
    for fusion in [i for i in seen if i.opcode == "fusion" and i.name in expand and i.called]:
        for inner in fusion.called[0].instructions:  # a nested fusion stays closed
            if inner in seen:
                continue
            if len(seen) >= MAX_NODES:
                left_out += 1
                continue
            seen[inner] = fusion.name
    edges = [(o.name, i.name) for i in seen for o in i.operands if o in seen]
    # an open fusion's value is its fused computation's root's
    edges += [
        (f.called[0].root.name, f.name)
        for f in seen
        if f.name in expand and f.called and f.called[0].root in seen
    ]
    layer = _layers(list(seen), edges)
    rows: dict[int, int] = {}
    nodes = []
    for i, inside in seen.items():
        k = layer[i.name]
        rows[k] = rows.get(k, -1) + 1
        nodes.append(
            {
                "name": i.name,
                "opcode": i.opcode,
                "category": category(i),
                "shape": i.shape.text(),
                "layer": k,
                "row": rows[k],
                "inside": inside,
                "is_op": i is start,
                "fusion": i.opcode == "fusion" and bool(i.called),
            }
        )
    return Graph(pd.DataFrame(nodes, columns=NODE_COLUMNS), edges, left_out)


def _layers(nodes: list[Instruction], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Each node's column: the longest chain of edges leading to it (Kahn's order; a cycle,
    which a valid module cannot have, leaves its nodes in column 0)."""
    names = [i.name for i in nodes]
    into: dict[str, list[str]] = {n: [] for n in names}
    out: dict[str, list[str]] = {n: [] for n in names}
    for a, b in edges:
        out[a].append(b)
        into[b].append(a)
    pending = {n: len(into[n]) for n in names}
    layer = dict.fromkeys(names, 0)
    queue = deque(n for n in names if pending[n] == 0)
    while queue:
        n = queue.popleft()
        for m in out[n]:
            layer[m] = max(layer[m], layer[n] + 1)
            pending[m] -= 1
            if pending[m] == 0:
                queue.append(m)
    return layer
