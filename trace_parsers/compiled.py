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
        detail = " ".join(str(self._cause).split())[:300]
        raise CompiledReadersMissing(f"{INSTALL} ({detail})")


def missing(cause: ImportError) -> Any:
    """The stand-in for a compiled module whose import raised ``cause``."""
    return _Missing(cause)
