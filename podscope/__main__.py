"""``python -m podscope`` = the ``podscope`` command."""

from podscope.app.entry import main

if __name__ == "__main__":  # not in Dask's spawned worker processes, which import this module
    main()
