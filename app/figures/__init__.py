"""Pure functions frame → ``go.Figure`` (``<thing>_figure``); no data loading here."""
