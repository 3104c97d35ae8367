"""PodScope's compiled readers (the XSpace wire decoder, the ftrace text reader, the column
kernels) are optional at install: a copy installed without a C compiler has none, and still
captures and imports. Parsing then stops, on first use of a reader, with one line saying what
to install (``CompiledReadersMissing``): there is no slower pure-Python path that would give
the same frames."""

from __future__ import annotations

from typing import Any, NoReturn

INSTALL = (
    "PodScope's compiled trace readers are not installed (this copy was built without a C "
    "compiler): install the platform wheel (pip install --force-reinstall --only-binary "
    "podscope podscope) or install gcc and reinstall podscope"
)


class CompiledReadersMissing(ImportError):
    """Parsing needs a compiled reader that this install does not have; the message is one line
    saying what to install."""


class _Missing:
    """Stands in for a compiled module that failed to import: any use raises the one line."""

    def __init__(self, cause: ImportError) -> None:
        self._cause = cause

    def __getattr__(self, name: str) -> NoReturn:
        raise _one_line(self._cause)


def _one_line(cause: ImportError) -> CompiledReadersMissing:
    detail = " ".join(str(cause).split())[:300]
    return CompiledReadersMissing(f"{INSTALL} ({detail})")


def missing(cause: ImportError) -> Any:
    """The stand-in for a compiled module whose import raised ``cause``."""
    return _Missing(cause)


def require() -> None:
    """Raises ``CompiledReadersMissing`` now if a compiled reader is missing: called before
    tasks start in other processes, where the one line would come back as a task's failure
    (and a pool of forked workers be left to wind down) instead of stopping the command.

    Raises:
        CompiledReadersMissing: a compiled reader is not installed.
    """
    import importlib

    for name in ("_column_kernels", "_xplane_fast", "_kineto_fast", "_ftrace_fast"):
        try:
            importlib.import_module(f"podscope.trace_parsers.{name}")
        except ImportError as e:
            raise _one_line(e) from None
