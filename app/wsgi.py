"""WSGI entry point: ``gunicorn app.wsgi:server`` (settings from ``PODSCOPE_*`` env vars)."""

from __future__ import annotations

from podscope.app.main import create_app
from podscope.app.settings import AppSettings

server = create_app(AppSettings.from_env()).server
