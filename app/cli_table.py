"""Tables on a terminal that a person can read at 80 columns: a command's table is printed
whole when it fits; else worker labels are abbreviated (``w1``, ``w2``… with a legend
below); else each row is printed as a block of ``column: value`` lines. ``--wide`` prints the
whole table however wide it is (for a wide terminal or a file).

    >>> show_table(frame, "culprits and victims")             # fits the terminal
    >>> show_table(frame, "culprits and victims", wide=True)   # every column on one line
"""

from __future__ import annotations

import itertools
import textwrap
from typing import TYPE_CHECKING, Any

import pandas as pd

from podscope.app.units import fmt_number

if TYPE_CHECKING:  # rich loads when a table is printed, not for CSV on stdout
    from rich.console import Console
    from rich.table import Table

#: Worker labels longer than this are abbreviated when the table would not fit.
SHORT_LABEL = 12


def cell(column: str, value: object) -> str:
    """A value as the table shows it: shares in %, other floats to 3 decimals, missing as
    an empty cell."""
    if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        if column.endswith("share") or column == "share":
            return f"{fmt_number(value * 100, 1)}%"
        return fmt_number(value)
    if isinstance(value, bool):
        return "yes" if value else ""
    return f"{value:,}" if pd.api.types.is_integer(value) else str(value)


#: A name column cut to fit keeps at least this many characters.
MIN_NAME = 20


def _table(frame: pd.DataFrame, title: str, stacked: bool = False) -> Table:
    """The table, its cells on one line each; with ``stacked``, the headers of number
    columns one word per line (``self`` / ``time`` / ``us``)."""
    from rich import box
    from rich.table import Table

    # Rules under the header only, no outer frame, one space between columns' paddings.
    view = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in frame.columns:
        numeric = pd.api.types.is_numeric_dtype(frame[col]) and frame[col].dtype != bool
        words = col.split("_")
        view.add_column(
            "\n".join(words) if stacked and numeric else " ".join(words),
            justify="right" if numeric else "left",
            no_wrap=True,
            overflow="ellipsis",
        )
    for row in frame.itertuples(index=False):
        view.add_row(*(cell(c, v) for c, v in zip(frame.columns, row, strict=True)))
    return view


def _width(console: Console, table: Table) -> int:
    """The table's natural width (a console measures within its own width otherwise)."""
    return console.measure(table, options=console.options.update_width(100_000)).maximum


def cut_distinct(names: pd.Series, width: int) -> pd.Series:
    """Names longer than ``width`` cut in the middle (``RemoteCall__…inference_fn_212``), the
    tail kept as long as it takes for cut names that differ to stay different; names that
    differ only in their middle (``…/layer_4/self_attention/…`` of 24 layers) keep the part
    where they differ (``_windowed``)."""
    names = names.astype(str)
    long = names.str.len() > width
    if not long.any() or width < 12:
        return names
    for tail in range(width // 3, width - 1):
        head = width - 1 - tail
        cut = names.where(~long, names.str[:head] + "…" + names.str[-tail:])
        if cut.nunique() == names.nunique():
            return cut
    return names.where(~long, _windowed(names[long], width))


def _windowed(names: pd.Series, width: int) -> pd.Series:
    """Each name as its first 2 characters, the part where it first differs from the names
    next to it in sorted order, and its tail: ``re…/layer_4/self_atten…mUniform``."""
    ordered = sorted(set(names))
    differs = dict.fromkeys(ordered, 0)  # where each first differs from its neighbours
    for a, b in itertools.pairwise(ordered):
        at = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        differs[a], differs[b] = max(differs[a], at), max(differs[b], at)
    tail = width // 4
    room = width - tail - 4  # the window, between "xx…" and "…tail"
    out = []
    for name in names:
        start = max(2, differs[name] - room // 3)
        if start + room >= len(name) - tail:  # it differs near the end: the tail shows it
            out.append(name[:2] + "…" + name[-(width - 3) :])
        else:
            out.append(name[:2] + "…" + name[start : start + room] + "…" + name[-tail:])
    return pd.Series(out, index=names.index)


def _abbreviated(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """The frame with long worker labels as ``w1``, ``w2``… (in order of appearance), and
    the legend; of one worker, no column at all (the title names it: ``_one_worker``)."""
    if "worker" not in frame or frame["worker"].astype(str).str.len().max() <= SHORT_LABEL:
        return frame, {}
    if frame["worker"].nunique() == 1:
        return frame.drop(columns="worker"), {}
    names = list(dict.fromkeys(frame["worker"].astype(str)))
    short = {n: f"w{i + 1}" for i, n in enumerate(names)}
    return frame.assign(worker=frame["worker"].astype(str).map(short)), short


def show_table(
    frame: pd.DataFrame,
    title: str,
    *,
    wide: bool = False,
    cut: str | None = None,
    console: Console | None = None,
) -> None:
    """Prints ``frame`` under ``title``: whole when it fits the terminal (or ``wide``); else
    the first of these that fits: number headers one word per line, then also worker labels
    abbreviated (with their legend; one worker's named in the title instead), then also the
    ``cut`` column (an op or kernel name) cut in the middle so that its rows stay distinct
    (``cut_distinct``); else one block of lines per row."""
    from rich.console import Console

    console = console or Console()
    whole = _table(frame, title)
    if wide or _width(console, whole) <= console.width:
        if wide:  # as wide as it needs: a wide terminal, or a file read with less -S
            console = Console(width=max(console.width, _width(console, whole)), file=console.file)
        console.print(whole)
        return
    short, legend = _abbreviated(frame)
    short_title = (
        f"{title} · worker {frame['worker'].iloc[0]}"
        if "worker" in frame and "worker" not in short
        else title
    )
    empty: dict[str, str] = {}
    tries = [(empty, _table(frame, title, stacked=True))]
    if legend or short is not frame:
        tries.append((legend, _table(short, short_title, stacked=True)))
    if cut is not None:
        narrow = short.assign(**{cut: cut_distinct(short[cut], MIN_NAME)})
        room = max(0, console.width - _width(console, _table(narrow, short_title, True)))
        fitted = short.assign(**{cut: cut_distinct(short[cut], MIN_NAME + room)})
        tries.append((legend, _table(fitted, short_title, stacked=True)))
    for names, table in tries:
        if _width(console, table) <= console.width:
            console.print(table)
            for name, abbr in names.items():
                console.print(f"  {abbr} = {name}", highlight=False, soft_wrap=True)
            return
    _blocks(frame, title, console)


def _blocks(frame: pd.DataFrame, title: str, console: Console) -> None:
    """One block per row: its first column as a heading, then ``column: value`` lines."""
    console.print(title, style="italic", highlight=False)
    if frame.empty:
        return
    keys = [c.replace("_", " ") for c in frame.columns]
    pad = max(len(k) for k in keys[1:]) if len(keys) > 1 else 0
    hang = " " * min(pad + 4, console.width // 2)
    for row in frame.itertuples(index=False):
        values = [cell(c, v) for c, v in zip(frame.columns, row, strict=True)]
        console.print(f"── {keys[0]} {values[0]}", style="bold", highlight=False, soft_wrap=True)
        for key, value in zip(keys[1:], values[1:], strict=True):
            if value != "":
                line = f"  {key:<{pad}}  {value}"  # a long value folds under itself
                text = textwrap.fill(line, console.width, subsequent_indent=hang)
                console.print(text, highlight=False, soft_wrap=True)


def render_parse_summary(summary: dict[str, Any]) -> None:
    """Prints the summary per worker (``show_table``: at the terminal's width), under a title
    with the session's totals; counts a capture does not have are left out."""
    from rich.console import Console

    s = summary
    shown = [k for k in ("events", "sched", "counters") if s.get(k)] or ["events"]
    title = " · ".join(
        [
            f"{s[k]:,} {name}"
            for k, name in (
                ("events", "events"),
                ("sched", "scheduling slices"),
                ("counters", "counter samples"),
            )
            if k in shown
        ]
        + [f"{s['planes']} planes", f"{s['lines']} lines"]
    )
    cols = ["worker", "planes", "lines", *shown, "span_ms", "step_markers"]
    frame = pd.DataFrame(s["workers"], columns=cols)
    show_table(frame, title)
    if frame.empty:
        Console().print("no worker: nothing this parser reads is in the file", highlight=False)
    if summary.get("written"):
        Console().print(f"frames written to {summary['written']}", highlight=False, soft_wrap=True)
