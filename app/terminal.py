"""Prose on a terminal that a person can read at 80 columns (tables: ``app.cli_table``).

>>> say("podscope: note: a long sentence …", err=True)   # wrapped, continuation indented
"""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import click

#: Lines never wrapped: an error or a warning is one line, as scripts and logs expect.
ONE_LINE = ("podscope: error:", "podscope: warning:")


def say(text: str, *, err: bool = False) -> None:
    """Prose at the terminal's width (80 columns when output is not a terminal; ``COLUMNS``
    overrides): each line of ``text`` wrapped on words; its continuation lines hang under
    its text, after a label column (``HIGH      `` in ``diagnose``) or its indent + 2. Errors
    and warnings (``ONE_LINE``) are one line each, however long."""
    if text.startswith(ONE_LINE):  # one line per problem, whole: what scripts grep for
        click.echo(text, err=err)
        return
    width = shutil.get_terminal_size((80, 24)).columns
    out = []
    for line in text.splitlines() or [""]:
        label = re.match(r"\s*(?:\S+ {2,}|→ )", line)
        hang = len(label.group(0)) if label else len(line) - len(line.lstrip()) + 2
        out.append(
            textwrap.fill(
                line,
                width=width,
                subsequent_indent=" " * min(hang, width // 2),
                break_long_words=True,
                break_on_hyphens=False,
            )
            if len(line) > width
            else line
        )
    click.echo("\n".join(out), err=err)


def say_session(path: object, session: str | None) -> None:
    """Which session of ``path`` a command reads, on stderr (nothing for a file or a folder of
    captures): ``podscope: session train/2026_01_02 (newest of 3 in runs)``.

    Raises:
        trace_parsers.TraceParseError: as ``trace_parsers.chosen_session``.
    """
    from podscope.trace_parsers import chosen_session
    from podscope.trace_parsers.loader import session_folders

    chosen = chosen_session(str(path), session)
    if chosen is None:
        return
    n = len(session_folders(Path(str(path))))
    how = (
        "named"
        if session == chosen
        else f"newest of {n}"
        if session is None
        else f"newest for {session!r}"
    )
    say(f"podscope: session {chosen} ({how} in {path})", err=True)
