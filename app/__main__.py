"""``python -m app`` = the ``podscope`` command."""

from app.cli import main

main()
