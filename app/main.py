"""The Dash app: ``create_app(settings)``; ``server = app.server`` for gunicorn (app.wsgi).

    >>> from app.main import create_app
    >>> from app.settings import AppSettings
    >>> create_app(AppSettings(logdir=Path("runs"))).run(host="127.0.0.1", port=8050)

Pages live in ``app/pages`` (one per file, ``dash.register_page``). Everything is served from
this process (Dash, Plotly and Bootstrap CSS): the app works offline.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html
from flask import jsonify

from app import ids
from app.settings import AppSettings
from app.store import SessionStore

PAGES_DIR = Path(__file__).parent / "pages"
_STATE: dict[str, object] = {}


def store() -> SessionStore:
    """The app's session store (created by ``create_app``; read-only afterwards)."""
    return _STATE["store"]  # type: ignore[return-value]


def settings() -> AppSettings:
    return _STATE["settings"]  # type: ignore[return-value]


def _navbar() -> dbc.Navbar:
    links = [
        dbc.NavItem(
            dbc.NavLink(
                page["name"],
                href=page["relative_path"],
                id=f"nav-{page['module'].rsplit('.', 1)[-1]}",
            )
        )
        for page in dash.page_registry.values()
    ]
    return dbc.Navbar(
        dbc.Container(
            [
                dbc.NavbarBrand("PodScope", href="/"),
                dbc.Nav(links, className="podscope-nav me-auto", navbar=True),
                html.Div(
                    dcc.Dropdown(
                        id=ids.SESSION_PICKER,
                        placeholder="session…",
                        clearable=False,
                        style={"minWidth": "280px"},
                    ),
                    className="ms-2",
                ),
            ],
            fluid=True,
        ),
        color="dark",
        dark=True,
        className="mb-3 border-bottom",
    )


def create_app(config: AppSettings) -> dash.Dash:
    """Builds the Dash app for ``config`` (one logdir)."""
    _STATE["settings"] = config
    _STATE["store"] = SessionStore(config.logdir, config.cache_dir, config.frame_cache_sessions)
    from app.background import manager

    app = dash.Dash(
        __name__,
        use_pages=True,
        pages_folder=str(PAGES_DIR),
        assets_folder=str(resources.files("assets")),
        serve_locally=True,
        suppress_callback_exceptions=True,
        background_callback_manager=manager(),
        title="PodScope",
    )
    app.server.config["MAX_CONTENT_LENGTH"] = (
        config.max_upload_mb * 2**20 * 4 // 3 + 2**20
    )  # base64 overhead
    app.layout = html.Div(
        [
            dcc.Location(id=ids.URL, refresh="callback-nav"),
            _navbar(),
            dbc.Container([html.Div(id=ids.SESSION_ALERT), dash.page_container], fluid=True),
        ]
    )

    @app.server.route("/healthz")
    def healthz() -> object:
        return jsonify(status="ok", logdir=str(config.logdir), sessions=len(store().names()))

    return app


@dash.callback(
    Output(ids.SESSION_PICKER, "options"),
    Output(ids.SESSION_PICKER, "value"),
    Input(ids.URL, "search"),
)
def _sync_picker(search: str | None) -> tuple[list[str], str | None]:
    from urllib.parse import parse_qs

    names = store().names()
    wanted = parse_qs((search or "").lstrip("?")).get("session", [None])[0]
    if wanted is None:
        return names, names[0] if names else None
    # A session that is not in the list stays unselected: the page explains why (never a
    # silent switch to another session).
    return names, wanted if wanted in names else None


@dash.callback(
    Output(ids.URL, "search"),
    Input(ids.SESSION_PICKER, "value"),
    State(ids.URL, "search"),
    prevent_initial_call=True,
)
def _picker_to_url(session: str | None, search: str | None) -> object:
    from urllib.parse import parse_qs, urlencode

    query = {k: v[0] for k, v in parse_qs((search or "").lstrip("?")).items()}
    if not session or query.get("session") == session:
        return dash.no_update
    query = {"session": session}  # a new session: step/worker of the old one do not apply
    return "?" + urlencode(query)
