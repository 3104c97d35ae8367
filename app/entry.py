"""The ``podscope`` console script's entry: ``--version`` answers without loading the CLI (whose
analyses import pandas, pyarrow and numpy: 0.6 s), everything else runs ``app.cli.main``."""

from __future__ import annotations

import sys


def main() -> None:
    """``podscope --version`` from the package's metadata; any other command line: the CLI."""
    if sys.argv[1:] == ["--version"]:
        from importlib import metadata

        try:
            version = metadata.version("podscope")
        except metadata.PackageNotFoundError:  # a source tree that was never installed
            version = "0+unknown"
        print(f"podscope {version}")
        return
    from podscope.app.cli import main as cli_main

    cli_main()
