"""PodScope's user-facing edge: the ``podscope`` CLI (and, later, the Dash app)."""
