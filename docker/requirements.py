"""Prints the requirements of pyproject.toml (and of the extras named), one per line, so the
image installs its dependencies in a layer that only pyproject.toml invalidates.

    python docker/requirements.py pyproject.toml engine
"""

from __future__ import annotations

import re
import sys

import tomllib


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    """The project's dependencies and those of ``extras`` (self-references expanded)."""
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    name = project["name"]
    optional = project.get("optional-dependencies", {})
    out, todo, seen = list(project["dependencies"]), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in optional:
            raise SystemExit(f"no extra {extra!r} in {pyproject}: {sorted(optional)}")
        for req in optional[extra]:
            own = re.fullmatch(rf"{re.escape(name)}\[([^\]]+)\]", req.strip())
            if own:
                todo += [e.strip() for e in own.group(1).split(",")]
            else:
                out.append(req)
    return out


if __name__ == "__main__":
    extras = [e for arg in sys.argv[2:] for e in arg.split(",") if e]
    print("\n".join(requirements(sys.argv[1], extras)))
