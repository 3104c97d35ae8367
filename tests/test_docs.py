"""``make docs``: the site builds from docs/ and the reference generated from the code, covers
every command, frame and rule, and fails on a broken link."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from podscope.analyzers.diagnostics import RULES
from podscope.trace_parsers.schema import SCHEMA

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def build(tmp_path: Path, break_a_link: bool = False) -> subprocess.CompletedProcess[str]:
    src = tmp_path / "src"
    subprocess.run([sys.executable, str(REPO / "docs" / "generate.py"), str(src)], check=True)
    if break_a_link:
        with (src / "install.md").open("a") as f:
            f.write("\nSee [the old page](capture-old.md).\n")
    config = tmp_path / "mkdocs.yml"
    text = (REPO / "mkdocs.yml").read_text()
    text = text.replace("docs_dir: build/docs/src", f"docs_dir: {src}")
    config.write_text(text.replace("site_dir: build/docs/site", f"site_dir: {tmp_path / 'site'}"))
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_site_builds_with_the_generated_reference(tmp_path: Path) -> None:
    out = build(tmp_path)
    assert out.returncode == 0, out.stderr
    cli = (tmp_path / "src" / "cli.md").read_text()
    for command in ("parse", "stragglers", "capture", "serve", "hlo", "cluster up"):
        assert f"## podscope {command}\n" in cli, command
    assert "Usage: podscope stragglers [OPTIONS] PATH" in cli
    schema = (tmp_path / "src" / "schema.md").read_text()
    assert all(f"## {frame}\n" in schema for frame in SCHEMA)
    findings = (tmp_path / "src" / "findings.md").read_text()
    assert all(f"## `{rule_id}`" in findings for rule_id in RULES)
    assert (tmp_path / "site" / "findings" / "index.html").is_file()
    readme = (REPO / "README.md").read_text()
    links = [line for line in readme.splitlines() if "docs/" in line]
    assert links and all(
        (REPO / part.split(")")[0].split("#")[0]).exists()
        for line in links
        for part in line.split("](")[1:]
        if part.startswith("docs/")
    )


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    out = build(tmp_path, break_a_link=True)
    assert out.returncode != 0
    assert "capture-old.md" in out.stderr
