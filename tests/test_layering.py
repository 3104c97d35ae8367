"""The import arrows of ../shared/GUIDE.md, checked per module: each module imports only the
modules of ours its layer may, no third-party package its layer must not, and no module-level
import cycle runs through our modules. Our modules are ``podscope.<layer>...``; the layers below
are named without the ``podscope.`` prefix."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOP = "podscope"
OURS = ("app", "collectors", "trace_parsers", "analyzers", "reference_engine")

#: Per layer, the modules of ours it may import (a name covers its submodules).
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "trace_parsers": ("trace_parsers",),
    # GUIDE: "trace_parsers (schema only)". Also the pure helpers the parsers own and analyzers
    # must not re-implement: nesting (self time among a subset of events), the TFLite
    # section-name grammar and XProf's op-name grammar (an XLA kernel's framework op; nesting
    # also lends the C column kernels, for the op tables' per-group statistics).
    "analyzers": (
        "analyzers",
        "trace_parsers.schema",
        "trace_parsers.nesting",
        "trace_parsers.tflite",
        "trace_parsers.tfop",
    ),
    # The one place analyses meet files: the per-worker tasks parse their worker's trace
    # (GUIDE: scale-out lives below app/, callable by a library user). Deviation from the
    # GUIDE's "schema only", kept to this module.
    "analyzers.execution": ("analyzers", "trace_parsers"),
    # The op tables of host captures read from the wire decoder's columns, without frames
    # (``podscope ops --no-cache``): files again, and the decode, kept to this module.
    "analyzers.host_ops": ("analyzers", "trace_parsers"),
    # The capture layout (stdlib only) is the one contract collectors and parsers share.
    "collectors": ("collectors", "trace_parsers.layout"),
    "reference_engine": ("reference_engine", "collectors.agent"),
    "app": OURS,
}
#: Per layer, third-party packages it must never import.
NEVER: dict[str, set[str]] = {
    "trace_parsers": {"tensorflow", "dash", "plotly", "grpc", "flask"},
    "analyzers": {"dash", "plotly", "tensorflow", "flask", "grpc"},
    "collectors": {"dash", "plotly", "flask", "pandas"},
    "reference_engine": {"dash", "plotly", "flask"},
    "app": set(),
}


def _module_of(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _is_module(name: str) -> bool:
    base = REPO.joinpath(*name.split("."))  # podscope.x.y: REPO/podscope links to the layers
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """Full module names ``path`` imports (``from a import b`` is ``a.b`` when that is a module
    of ours), leaving out ``if TYPE_CHECKING:`` blocks; with ``top_level_only``, only the
    imports run when the module is imported (not those inside functions)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        if _type_checking(node):
            return
        if isinstance(node, ast.Import) and not (top_level_only and in_function):
            found.update(a.name for a in node.names)
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and not (top_level_only and in_function)
        ):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                found.add(full if _is_module(full) else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child, in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(tree, False)
    return {m.removeprefix(f"{TOP}.") if m != TOP else m for m in found}


def package_files() -> list[tuple[str, Path]]:
    return [
        (pkg, f)
        for pkg in OURS
        if (REPO / pkg).is_dir()
        for f in sorted((REPO / pkg).rglob("*.py"))
        if "proto" not in f.parts
    ]


def _within(module: str, allowed: tuple[str, ...]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


@pytest.mark.parametrize(
    ("package", "path"), package_files(), ids=lambda v: str(v).rsplit("/", 1)[-1]
)
def test_module_imports_only_what_its_layer_may(package: str, path: Path) -> None:
    found = imports(path)
    ours = {m for m in found if m.split(".")[0] in OURS}
    allowed = MAY_IMPORT.get(_module_of(path), MAY_IMPORT[package])
    bad = sorted(m for m in ours if not _within(m, allowed))
    third = {m.split(".")[0] for m in found} & NEVER[package]
    if package != "reference_engine":  # the frameworks, each in its one profiler module
        rel = str(path.relative_to(REPO))
        third |= {
            m.split(".")[0] for m in found if FRAMEWORK_SEAMS.get(m.split(".")[0], rel) != rel
        }
    assert not bad, f"{path.relative_to(REPO)} imports {bad}"
    assert not third, f"{path.relative_to(REPO)} imports {sorted(third)}"


#: The training frameworks: outside the engine, each is imported by one small profiler module
#: of the agent's, lazily (GUIDE: collectors, and convention 10).
FRAMEWORK_SEAMS = {
    "tensorflow": "collectors/tf_tracer.py",
    "jax": "collectors/jax_tracer.py",
    "torch": "collectors/torch_tracer.py",
}


#: Heavy optional dependencies, each behind one seam (GUIDE convention 10).
SEAMS = {"dask": "analyzers/execution.py", "distributed": "analyzers/execution.py"}


def test_heavy_dependencies_stay_behind_their_seam() -> None:
    for _, path in package_files():
        rel = str(path.relative_to(REPO))
        found = {m.split(".")[0] for m in imports(path)}
        for dep, seam in SEAMS.items():
            assert dep not in found or rel == seam, f"{rel} imports {dep} (only {seam} may)"


def test_no_import_cycles_between_our_modules() -> None:
    """Module-level imports only (a function-level import runs after both modules loaded); a
    package ``__init__`` re-exporting its own submodules is not counted."""
    graph: dict[str, set[str]] = {}
    for _, path in package_files():
        module = _module_of(path)
        graph[module] = {
            m
            for m in imports(path, top_level_only=True)
            if m.split(".")[0] in OURS and m != module and not m.startswith(module + ".")
        }
    done: set[str] = set()

    def walk(node: str, stack: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            assert nxt not in stack, "import cycle: " + " -> ".join([*stack, nxt])
            if nxt in graph and nxt not in done:
                walk(nxt, [*stack, nxt])
        done.add(node)

    for module in sorted(graph):
        walk(module, [module])


def test_reference_engine_config_does_not_import_workloads() -> None:
    assert "reference_engine.workloads" not in imports(REPO / "reference_engine" / "config.py")


LIGHT_CHECK = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
heavy = ("pandas", "numpy", "pyarrow", "dash", "plotly", "dask", "distributed", "waitress")
print(json.dumps({
    "heavy": sorted(m for m in heavy if m in sys.modules),
    "compiled": sorted(
        name for name, m in list(sys.modules.items())
        if name.startswith("podscope") and str(getattr(m, "__file__", "")).endswith((".so", ".pyd"))
    ),
}))
"""


@pytest.mark.parametrize(
    "module",
    ["podscope", "podscope.agent", "podscope.trace_parsers.layout", "podscope.collectors.capture"],
)
def test_light_modules_pull_in_no_heavy_package_and_no_compiled_extension(module: str) -> None:
    """The agent and the capture client run in training images: no pandas (they do not pay for
    it), nothing of the dashboard or Dask (the base install has neither), and none of our C
    extensions (an install without a compiler has none)."""
    out = subprocess.run(
        [sys.executable, "-c", LIGHT_CHECK, module],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found == {"heavy": [], "compiled": []}, f"{module} imports {found}"


def test_every_import_of_ours_goes_through_podscope() -> None:
    """``from app import ...`` would load a second copy of a module (or a user's own ``app``)."""
    bare = []
    for path in [*REPO.joinpath(TOP).glob("*.py"), *(p for _, p in package_files())]:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                else []
            )
            bare += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in OURS]
    # Code in strings too (``python -c "from app.cli import main"``), in tests and tools.
    quoted = re.compile(rf"\b(?:from|import) (?:{'|'.join(OURS)})\b")
    for folder in ("tests", "bench", "verify", "docker"):
        for path in sorted(REPO.joinpath(folder).rglob("*.py")):
            if path.name in ("test_layering.py", "test_wheel.py"):  # the user's own app, on purpose
                continue
            bare += [f"{path.relative_to(REPO)}: {m}" for m in quoted.findall(path.read_text())]
    assert not bare, bare


def test_version_answers_without_loading_the_analyses() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['podscope', '--version']\n"
        "from podscope.app.entry import main\n"
        "main()\n"
        "print(sorted(m for m in ('pandas', 'numpy', 'pyarrow', 'click') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    version, loaded = out.stdout.strip().splitlines()
    assert version.startswith("podscope ") and loaded == "[]"
