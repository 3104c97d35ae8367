"""``make docs``: the site builds from docs/ and the reference generated from the code, covers
every command, frame and rule, and fails on a broken link."""

from __future__ import annotations

import re
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
    reference = tmp_path / "src" / "reference"
    cli = (reference / "cli.md").read_text()
    for command in ("parse", "stragglers", "capture", "serve", "hlo", "cluster up"):
        assert f"## podscope {command}\n" in cli, command
    assert "Usage: podscope stragglers [OPTIONS] PATH" in cli
    assert "--baseline-steps INTEGER" in cli and "[default: 50]" in cli  # defaults shown
    schema = (reference / "schema.md").read_text()
    assert all(f"## {frame}\n" in schema for frame in SCHEMA)
    findings = (reference / "findings.md").read_text()
    assert all(f"## `{rule_id}`" in findings for rule_id in RULES)
    api = (reference / "api.md").read_text()
    for name in ("podscope.load", "podscope.SessionAnalysis", "podscope.agent.start"):
        assert f"## `{name}`" in api, name
    assert "### `SessionAnalysis.breakdown`" in api and "framework:" in api
    site = tmp_path / "site"
    assert (site / "reference" / "findings" / "index.html").is_file()
    assert (site / "changelog" / "index.html").is_file()
    pages = [p.read_text() for p in site.rglob("*.html")]
    assert any('class="codehilite"' in page for page in pages)  # highlighted at build time
    remote = re.compile(r'<(?:script|link)[^>]+(?:src|href)="(?:https?:)?//')
    assert not [m for page in pages for m in remote.findall(page)]  # nothing from a CDN
    readme = (REPO / "README.md").read_text()
    links = [line for line in readme.splitlines() if "docs/" in line]
    assert links and all(
        (REPO / part.split(")")[0].split("#")[0]).exists()
        for line in links
        for part in line.split("](")[1:]
        if part.startswith("docs/")
    )


def test_the_committed_reference_pages_are_current() -> None:
    """docs/reference/ is what `make docs` generates from the code now: the pages read in the
    repository say what the code does."""
    sys.path.insert(0, str(REPO / "docs"))
    try:
        import generate
    finally:
        sys.path.remove(str(REPO / "docs"))
    for name, text in generate.reference_pages().items():
        committed = REPO / "docs" / "reference" / name
        assert committed.read_text() == text, f"{committed} is stale: run make docs"


def test_the_docs_links_work_in_the_repository() -> None:
    """Every relative link of README.md and docs/*.md names a file of the repository (the
    generated reference included), and no doc points outside it."""
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            resolved = (page.parent / target).resolve()
            if not resolved.exists() or REPO.resolve() not in resolved.parents:
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    out = build(tmp_path, break_a_link=True)
    assert out.returncode != 0
    assert "capture-old.md" in out.stderr
