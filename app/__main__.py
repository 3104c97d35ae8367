"""``python -m app`` = the ``podscope`` command."""

from app.cli import main

if __name__ == "__main__":  # not in Dask's spawned worker processes, which import this module
    main()
