"""The import arrows of ../shared/GUIDE.md: each layer imports only the layers it may."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = {"app", "collectors", "trace_parsers", "analyzers", "reference_engine"}
FORBIDDEN = {
    "trace_parsers": {
        "tensorflow",
        "dash",
        "plotly",
        "grpc",
        "app",
        "analyzers",
        "collectors",
        "reference_engine",
    },
    "analyzers": {"dash", "plotly", "tensorflow", "app", "collectors", "reference_engine"},
    "collectors": {"trace_parsers", "analyzers", "app", "reference_engine", "dash", "plotly"},
    "reference_engine": {"app", "analyzers", "trace_parsers", "dash", "plotly"},
    "app": set(),
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def package_files() -> list[tuple[str, Path]]:
    return [
        (pkg, f)
        for pkg in FORBIDDEN
        if (REPO / pkg).is_dir()
        for f in sorted((REPO / pkg).rglob("*.py"))
    ]


@pytest.mark.parametrize(
    ("package", "path"), package_files(), ids=lambda v: str(v).rsplit("/", 1)[-1]
)
def test_layer_imports_only_what_it_may(package: str, path: Path) -> None:
    bad = imported_roots(path) & FORBIDDEN[package]
    if package == "collectors" and path.name == "agent.py":
        bad -= {"tensorflow"}
    assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


def test_tensorflow_only_in_agent_and_engine() -> None:
    for package, path in package_files():
        if "tensorflow" in imported_roots(path):
            assert package == "reference_engine" or (
                package == "collectors" and path.name == "agent.py"
            ), path
