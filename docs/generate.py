"""``make docs``: the documentation site's sources, with the reference pages generated from the
code so that they cannot drift from it.

    python docs/generate.py build/docs/src

Copies the written pages (``docs/*.md``, ``docs/images/``) to the output folder and writes:

- ``cli.md``: every command's ``--help``, as the CLI prints it;
- ``schema.md``: the frames' columns and dtypes, and the schema versions;
- ``findings.md``: every diagnostics rule, with its preconditions, its threshold and its source;
- ``changelog.md``: ``CHANGELOG.md``.
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
    for name in sorted(group.commands):
        command = group.commands[name]
        ctx = click.Context(command, info_name=name, parent=parent, terminal_width=100)
        yield ctx.command_path, command, ctx
        if isinstance(command, click.Group):
            yield from commands(command, ctx)


def cli_page() -> str:
    root = click.Context(cli, info_name="podscope", terminal_width=100)
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


def generate(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for page in DOCS.glob("*.md"):
        shutil.copy(page, out / page.name)
    if (DOCS / "images").is_dir():
        shutil.copytree(DOCS / "images", out / "images")
    (out / "cli.md").write_text(cli_page())
    (out / "schema.md").write_text(schema_page())
    (out / "findings.md").write_text(findings_page())
    (out / "changelog.md").write_text((REPO / "CHANGELOG.md").read_text())


if __name__ == "__main__":
    generate(Path(sys.argv[1]))
