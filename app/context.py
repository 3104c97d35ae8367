"""The app's context: settings, the session store and capture targets, held by the Dash app.

``create_app`` builds one ``AppContext`` and attaches it to the app's Flask server; pages and
callbacks reach it through ``current()``. Two apps in one process each keep their own.

    >>> from app.context import current
    >>> analysis = current().store.get("2026_12_01_10_00_00")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import flask

from app.execution import ExecConfig
from app.settings import AppSettings
from app.store import SessionStore
from app.targets import targets_from
from collectors.capture import Target

#: Key of the context in ``flask.Flask.extensions``.
EXTENSION = "podscope"


@dataclass(frozen=True)
class AppContext:
    """What every page of one app shares (read-only after ``build``, except the store's cache).

    Attributes:
        settings: the app's configuration.
        store: sessions of ``settings.logdir``: listing, import, parsed analyses.
    """

    settings: AppSettings
    store: SessionStore

    @classmethod
    def build(cls, settings: AppSettings) -> AppContext:
        execution = ExecConfig(
            scheduler=settings.dask_scheduler,
            in_process_below=settings.cluster_min_files,
            fork=False,  # the server is threaded
        )
        return cls(
            settings,
            SessionStore(
                settings.logdir, settings.cache_dir, settings.frame_cache_sessions, execution
            ),
        )

    def capture_targets(self, addresses: str | None, manifest: str | None) -> list[Target]:
        """Workers to capture: the addresses given, else an engine cluster manifest.

        Raises:
            collectors.errors.CaptureError: neither given, or an unreadable manifest.
        """
        return targets_from(
            addresses or None, Path(manifest) if manifest and not addresses else None
        )


def attach(server: flask.Flask, context: AppContext) -> None:
    """Makes ``context`` the one ``current()`` returns inside this server's requests."""
    server.extensions[EXTENSION] = context


def current() -> AppContext:
    """The context of the app serving this request (or running this background callback,
    which inherits the request's Flask app context).

    Raises:
        RuntimeError: called outside a request of an app made by ``create_app``.
    """
    if not flask.has_app_context():
        raise RuntimeError("no PodScope app context: call this inside a request or callback")
    context: AppContext = flask.current_app.extensions[EXTENSION]
    return context
