"""``make docs``: the documentation site's sources, with the reference pages generated from the
code so that they cannot drift from it.

    python docs/generate.py --reference          # docs/reference/*.md, committed
    python docs/generate.py build/docs/src       # the site's sources

The reference pages are committed under ``docs/reference/`` (so that the docs' links work when
read in the repository; ``tests/test_docs.py`` fails when one is stale):

- ``cli.md``: every command's ``--help``, as the CLI prints it, defaults included;
- ``api.md``: the library's public names (``import podscope``), from their docstrings;
- ``schema.md``: the frames' columns and dtypes, and the schema versions;
- ``findings.md``: every diagnostics rule, with its preconditions, its threshold and its source.

The site's sources are the written pages (``docs/*.md``, ``docs/images/``), the reference
pages written afresh, ``changelog.md`` (``CHANGELOG.md``, which the pages link as
``../CHANGELOG.md``) and ``pygments.css``, the code blocks' highlighting (Pygments, at build
time: the theme's highlight.js would come from a CDN).
"""

from __future__ import annotations

import dataclasses
import inspect
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from podscope.analyzers.diagnostics import RULES, Thresholds
from podscope.app.cli import cli
from podscope.trace_parsers.layout import MANIFEST_VERSION
from podscope.trace_parsers.schema import schema_document

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent


def commands(
    group: click.Group, parent: click.Context
) -> Iterator[tuple[str, click.Command, click.Context]]:
    for name in group.list_commands(parent):  # sorted; loads each command (lazy groups)
        command = group.get_command(parent, name)
        assert command is not None, name
        ctx = click.Context(
            command, info_name=name, parent=parent, terminal_width=100, show_default=True
        )
        yield ctx.command_path, command, ctx
        if isinstance(command, click.Group):
            yield from commands(command, ctx)


def cli_page() -> str:
    root = click.Context(cli, info_name="podscope", terminal_width=100, show_default=True)
    out = [
        "# Command line",
        "",
        "Generated from the code (`docs/generate.py`): each command's `--help`.",
        "",
        "```text",
        cli.get_help(root),
        "```",
    ]
    for path, command, ctx in commands(cli, root):
        out += ["", f"## {path}", "", "```text", command.get_help(ctx), "```"]
    return "\n".join(out) + "\n"


def schema_page() -> str:
    document = schema_document()
    out = [
        "# Frames schema",
        "",
        "Generated from `podscope.trace_parsers.schema.SCHEMA`. Every frame `podscope.load` "
        "returns, with its columns and pandas dtypes (`category[int64]`: a categorical of "
        "integer ids).",
        "",
        f"- Frames schema version: **{document['podscope_schema_version']}**. It is part of "
        "the parse cache's key, in the Parquet metadata of every frame `podscope parse --out` "
        "writes (`podscope.schema_version`, `podscope.frame`), and in the `schema.json` "
        "written beside them.",
        f"- `capture.json` schema version: **{MANIFEST_VERSION}** (`schema_version`; a "
        "manifest without one was written before versions and is read as version 0).",
    ]
    for frame, columns in document["frames"].items():
        out += ["", f"## {frame}", "", "| column | dtype |", "|---|---|"]
        out += [f"| `{column}` | `{dtype}` |" for column, dtype in columns.items()]
    return "\n".join(out) + "\n"


def findings_page() -> str:
    defaults = {f.name: getattr(Thresholds(), f.name) for f in dataclasses.fields(Thresholds)}
    out = [
        "# Findings",
        "",
        "Generated from the rules' registry (`podscope.analyzers.diagnostics.RULES`), in the "
        "report's order. A finding's severity comes from its threshold (a pair is "
        "(moderate, high); `podscope diagnose` shows it with every finding); a rule whose "
        "precondition fails says why instead of judging.",
    ]
    for rule_id, rule in RULES.items():
        source = inspect.getsourcefile(rule.judge) or ""
        line = inspect.getsourcelines(rule.judge)[1]
        where = Path(source).resolve().relative_to(REPO.resolve()) if source else "?"
        out += ["", f"## `{rule_id}`: {rule.title}", ""]
        doc = inspect.getdoc(rule.judge)
        if doc:
            out += [doc, ""]
        if rule.levels:
            out.append(f"- Threshold: `Thresholds.{rule.levels}` = `{defaults[rule.levels]}`")
        out += [f"- Not judged when: {need.reason}" for need in rule.needs]
        out.append(f"- Source: `{where}:{line}` (`{rule.judge.__name__}`)")
    return "\n".join(out) + "\n"


#: The library's public names, in the order the API page shows them.
API = (
    ("podscope", "load"),
    ("podscope", "sessions"),
    ("podscope", "TraceFrames"),
    ("podscope", "TraceParseError"),
    ("podscope.trace_parsers.errors", "TraceNotFound"),
    ("podscope", "SessionAnalysis"),
    ("podscope", "capture"),
    ("podscope", "CaptureOptions"),
    ("podscope", "Target"),
    ("podscope.agent", "start"),
    ("podscope.agent", "step"),
    ("podscope.agent", "jax_step"),
    ("podscope.agent", "keras_callback"),
    ("podscope.agent", "Agent"),
)


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""


def api_page() -> str:
    import importlib

    out = [
        "# Library API",
        "",
        "Generated from the docstrings (`docs/generate.py`), as they are written: the names "
        "`import podscope` and `podscope.agent` give. Each frame's columns are on "
        "[Frames schema](schema.md).",
    ]
    for module, name in API:
        obj = getattr(importlib.import_module(module), name)
        kind = "class" if inspect.isclass(obj) else "function"
        out += [
            "",
            f"## `{module}.{name}`",
            "",
            "```python",
            f"{kind} {name}{_signature(obj)}",
            "```",
        ]
        out += ["", "```text", inspect.getdoc(obj) or "(no docstring)", "```"]
        if not inspect.isclass(obj):
            continue
        for attr, member in sorted(vars(obj).items()):
            doc = inspect.getdoc(member)
            if attr.startswith("_") or not doc:
                continue
            if isinstance(member, classmethod | staticmethod):
                member = member.__func__
            if inspect.isfunction(member):
                heading = f"{attr}{_signature(member)}"
            elif isinstance(member, property) or hasattr(member, "func"):  # a (cached) property
                heading = attr
            else:
                continue  # a constant
            out += ["", f"### `{name}.{heading}`", "", "```text", doc, "```"]
    return "\n".join(out) + "\n"


def reference_pages() -> dict[str, str]:
    """The generated reference: file name → Markdown."""
    return {
        "cli.md": cli_page(),
        "api.md": api_page(),
        "schema.md": schema_page(),
        "findings.md": findings_page(),
    }


def write_reference(folder: Path = DOCS / "reference") -> None:
    """Writes the reference pages where the repository keeps them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in reference_pages().items():
        (folder / name).write_text(text)


def generate(out: Path) -> None:
    """The site's sources in ``out``."""
    from pygments.formatters import HtmlFormatter

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for page in DOCS.glob("*.md"):
        (out / page.name).write_text(
            page.read_text().replace("](../CHANGELOG.md", "](changelog.md")
        )
    if (DOCS / "images").is_dir():
        shutil.copytree(DOCS / "images", out / "images")
    write_reference(out / "reference")
    (out / "changelog.md").write_text((REPO / "CHANGELOG.md").read_text())
    (out / "pygments.css").write_text(HtmlFormatter(style="default").get_style_defs(".codehilite"))


if __name__ == "__main__":
    if sys.argv[1:] == ["--reference"]:
        write_reference()
    else:
        generate(Path(sys.argv[1]))
