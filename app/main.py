"""The Dash app: ``create_app(settings)``; ``server = app.server`` for gunicorn (app.wsgi).

    >>> from podscope.app.main import create_app
    >>> from podscope.app.settings import AppSettings
    >>> create_app(AppSettings(logdir=Path("runs"))).run(host="127.0.0.1", port=8050)

Pages live in ``app/pages`` (one per file, ``dash.register_page``). Everything is served from
this process (Dash, Plotly and Bootstrap CSS): the app works offline. Its plotly.js is a build of
the traces the pages draw (``assets/plotly-podscope.min.js``, ``make plotly-bundle``): a
quarter of Dash's full bundle, whose evaluation was the largest part of every first page load.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dash
import dash_bootstrap_components as dbc
import plotly.graph_objects as go
from dash import ALL, ClientsideFunction, Input, Output, State, dcc, html
from flask import Flask, Response, has_request_context, jsonify, request

from podscope.app import ids
from podscope.app.auth import current_user
from podscope.app.auth import install as install_auth
from podscope.app.context import AppContext, attach, current
from podscope.app.hosts import answered_names
from podscope.app.hosts import install as install_hosts
from podscope.app.settings import AppSettings
from podscope.app.store import SessionStore
from podscope.trace_parsers.schema import SCHEMA, empty_frame

PAGES_DIR = Path(__file__).parent / "pages"
#: Code Dash fetches only when a page first mounts a dropdown (every page's session picker), a
#: graph or a grid. Named in the page's head, it is fetched with the page's scripts rather
#: than after the layout has come and rendered.
ASYNC_CHUNKS = (
    "dash/dcc/async-dropdown.js",
    "dash/dcc/async-graph.js",
    "dash_ag_grid/async-community.js",
)
#: Dash's page, with the async chunks preloaded.
INDEX = """<!DOCTYPE html>
<html>
    <head>
        {%metas%}
        <title>{%title%}</title>
        {%favicon%}
        {%css%}
        PRELOADS
    </head>
    <body>
        {%app_entry%}
        <footer>
            {%config%}
            {%scripts%}
            {%renderer%}
        </footer>
    </body>
</html>"""
#: The dashboard's plotly.js (``make plotly-bundle``); its first line names its version.
PLOTLY_BUNDLE = "plotly-podscope.min.js"


def plotly_bundle_fits() -> bool:
    """Whether the bundled plotly.js has the major version of the one the installed plotly
    package ships, which its figures are written for. If not, the bundle is left out and Dash
    loads the package's full plotly.js, as it would without it."""
    from plotly.offline import get_plotlyjs_version

    try:
        with resources.files("podscope.assets").joinpath(PLOTLY_BUNDLE).open(encoding="utf-8") as f:
            ours = re.search(r"plotly\.js v(\d+)\.", f.readline())
    except OSError:  # not installed with the package: Dash's own is there
        return False
    return ours is not None and ours.group(1) == get_plotlyjs_version().split(".")[0]


def _page_url() -> dict[str, str]:
    """The shell's Location as the page's URL, when the browser said it (the Referer of
    Dash's layout request, same origin): a Location that holds its URL reports nothing when
    it mounts, so no callback on the URL waits for the page's own and then costs a round trip
    and a render. Without a Referer the Location reports the URL itself, as it would anyway."""
    if not has_request_context():  # Dash may check the layout at start-up
        return {}
    page = urlsplit(request.referrer or "")
    if page.netloc != request.host or not page.path:
        return {}
    search = f"?{page.query}" if page.query else ""
    return {"pathname": page.path, "search": search, "hash": "", "href": request.referrer}


def _navbar(login: bool, sessions: list[dict[str, str]]) -> dbc.Navbar:
    links = [
        dbc.NavItem(
            dbc.NavLink(
                page["name"],
                href=page["relative_path"],
                id={"type": ids.NAV_LINK, "path": page["relative_path"]},
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
                        options=sessions,
                        placeholder="session…",
                        clearable=False,
                        style={"minWidth": "280px"},
                    ),
                    className="ms-2",
                ),
                *(
                    [dbc.NavLink("Log out", href="/logout", external_link=True, id=ids.LOGOUT)]
                    if login
                    else []
                ),
            ],
            fluid=True,
        ),
        color="dark",
        dark=True,
        className="mb-3 border-bottom",
    )


def _refuse_unknown_callbacks(app: dash.Dash) -> None:
    """A callback request naming no callback of the app is 400 with a reason, not Dash's
    KeyError and a 500 (a malformed or hostile client's request is not a server failure)."""
    from dash._callback import GLOBAL_CALLBACK_MAP

    @app.server.before_request
    def known_callback() -> Any:
        if request.method != "POST" or request.path != "/_dash-update-component":
            return None
        body = request.get_json(silent=True)
        output = body.get("output") if isinstance(body, dict) else None
        if isinstance(output, str) and (
            output in app.callback_map or output in GLOBAL_CALLBACK_MAP
        ):
            return None
        return Response('{"error": "no such callback"}', status=400, mimetype="application/json")


def create_app(config: AppSettings) -> dash.Dash:
    """Builds the Dash app for ``config`` (one logdir); its ``AppContext`` rides on the Flask
    server (``app.context.current()``)."""
    context = AppContext.build(config)
    from podscope.app.background import manager

    app = dash.Dash(
        __name__,
        use_pages=True,
        pages_folder=str(PAGES_DIR),
        assets_folder=str(resources.files("podscope.assets")),
        # window.Plotly from the bundle: dcc.Graph then loads no plotly.js of its own
        assets_ignore="" if plotly_bundle_fits() else re.escape(PLOTLY_BUNDLE),
        serve_locally=True,
        suppress_callback_exceptions=True,
        background_callback_manager=manager(),
        routing_callback_inputs={ids.RENDER_INPUT: Input(ids.PAGE_RENDER, "data")},
        title="PodScope",
        update_title="",  # assets/title.js names the page and session in the tab
    )
    app.index_string = INDEX.replace(
        "PRELOADS",
        "".join(
            f'<link rel="preload" as="script" '
            f'href="{app.config.requests_pathname_prefix}_dash-component-suites/{chunk}">'
            for chunk in ASYNC_CHUNKS
        ),
    )
    attach(app.server, context)
    install_hosts(app.server, answered_names(config.host, config.allowed_hosts))  # first
    # capturing calls the agents with their token; labels and notes change what everyone reads
    capture_outputs = (ids.CAP_RESULT, ids.CAP_WATCH_SAID, ids.SES_SAVED)
    install_auth(app.server, config.auth, capture_outputs=capture_outputs)
    app.server.config["MAX_CONTENT_LENGTH"] = (
        config.max_upload_mb * 2**20 * 4 // 3 + 2**20
    )  # base64 overhead

    def shell() -> html.Div:
        """Read for each browser's first request (the session list as it is now)."""
        return html.Div(
            [
                dcc.Location(id=ids.URL, refresh="callback-nav", **_page_url()),
                dcc.Store(id=ids.PAGE_RENDER),
                # the Timeline's controls changed (``pages.timeline``): in the shell, so that a
                # view drawn, whose components are new, does not call its server callback
                dcc.Store(id=ids.TL_CHOSEN),
                _navbar(config.auth.enabled, session_options(context.store)),
                dbc.Container([html.Div(id=ids.SESSION_ALERT), dash.page_container], fluid=True),
            ]
        )

    app.layout = shell

    # One-time costs of the first page a user opens, paid here off the request path: Plotly
    # reads its property schema (a large JSON) for the first figure (0.13 s), the frames'
    # empty templates are built once (0.12 s).
    threading.Thread(target=_warm_up, name="podscope-warm-up", daemon=True).start()
    _prefetch_pages(app.server)  # after the login check: only for who may see the page
    _refuse_unknown_callbacks(app)

    @app.server.route("/healthz")
    def healthz() -> object:
        if current_user(config.auth) is None:  # health only: no paths or counts for strangers
            return jsonify(status="ok")
        return jsonify(status="ok", logdir=str(config.logdir), sessions=len(context.store.names()))

    return app


#: How long a prefetched layout waits for its page's layout callback.
PREFETCH_FRESH_S = 30.0


#: Prefetches at most this many at once (threads) and queued; the rest are not made (the
#: page's callback computes its layout itself).
PREFETCH_THREADS, PREFETCH_QUEUE = 2, 8
#: Layouts made and not yet taken, at most (each may be large).
PREFETCH_KEPT = 32


def _prefetch_pages(server: Flask) -> None:
    """When the browser asks for a page itself, computes the page's layout on a small pool: the
    browser loads and runs the scripts for 0.3-0.6 s before the page's layout callback comes,
    and that callback then takes the layout made for it (or waits for it) rather than
    computing it again. GET of a page path only, whose query names only the page's own
    parameters, one per URL and query, ``PREFETCH_THREADS`` at once and ``PREFETCH_QUEUE``
    waiting (a flood of distinct URLs costs a bounded queue, not a thread each), and only
    sessions loaded in the request (``SessionStore.loads_here``): a big session's job is the
    page's to start, and how it ended is the page's to say. A failed prefetch, or one the
    callback does not take within ``PREFETCH_FRESH_S``, is left: the callback computes the
    layout itself and says what is wrong."""
    made: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, Future[Any]]] = {}
    lock = threading.Lock()
    pool = ThreadPoolExecutor(PREFETCH_THREADS, thread_name_prefix="podscope-prefetch")
    params: dict[str, frozenset[str]] = {}

    def key(path: str, query: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
        return path, tuple(sorted((k, str(v)) for k, v in query.items()))

    def taking(page: dict[str, Any]) -> None:
        """``page``'s layout, taking what the prefetch made for the same query (the page's
        own layout function is the wrapper's ``__wrapped__``)."""

        def layout(**query: Any) -> Any:
            query.pop(ids.RENDER_INPUT, None)  # the router's own input, not the URL's
            with lock:
                at, future = made.pop(key(page["path"], query), (0.0, None))
            if future is not None and time.monotonic() - at < PREFETCH_FRESH_S:
                with contextlib.suppress(Exception):  # else computed here, its error said
                    return future.result()
            return layout.__wrapped__(**query)  # type: ignore[attr-defined]

        layout.__wrapped__ = page["layout"]  # type: ignore[attr-defined]
        params[page["path"]] = frozenset(
            name
            for name, p in inspect.signature(page["layout"]).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
        page["layout"] = layout

    for page in dash.page_registry.values():  # (pages another app here wrapped stay its own)
        fn = page["layout"]
        if (
            callable(fn)
            and not hasattr(fn, "__wrapped__")
            and not getattr(fn, "per_user", False)  # made for who asks: never ahead
        ):
            taking(page)

    @server.before_request
    def prefetch() -> None:
        if request.method != "GET":
            return
        page = next((p for p in dash.page_registry.values() if p["path"] == request.path), None)
        if page is None or not hasattr(page["layout"], "__wrapped__"):
            return
        url, args = request.full_path, request.args.to_dict()
        if not set(args) <= params.get(page["path"], frozenset()):
            return  # a query the page does not read: nothing to make ahead
        wanted, future = key(page["path"], args), Future[Any]()
        with lock:
            now = time.monotonic()
            for k in [k for k, (at, _) in made.items() if now - at >= PREFETCH_FRESH_S]:
                del made[k]
            waiting = sum(not f.done() for _, f in made.values())
            if (
                wanted in made
                or waiting >= PREFETCH_THREADS + PREFETCH_QUEUE
                or len(made) >= PREFETCH_KEPT
            ):
                return  # one in flight or made and not taken yet; or the pool is busy
            made[wanted] = (now, future)

        def run() -> None:
            try:
                with server.test_request_context(url):
                    if "session" in params.get(page["path"], frozenset()):  # (Sessions: no)
                        store = current().store
                        names = store.names()
                        session = args.get("session") or (names[0] if names else "")
                        if not (session and store.loads_here(session)):
                            # a big session's job: under way as the page loads
                            store.start(session, head_first=page["path"] == "/pod")
                            raise LookupError(f"{session!r} is not loaded in a request")
                    future.set_result(page["layout"].__wrapped__(**args))
            except Exception as e:  # the page's own request says what is wrong
                logging.getLogger(__name__).debug("prefetch of %s failed", url, exc_info=True)
                future.set_exception(e)

        pool.submit(run)


def _warm_up() -> None:
    """Builds a figure once (Plotly's validators load) and every frame's empty template, then
    moves what start-up made (Dash, Plotly, pandas: 150 k objects) out of the garbage
    collector's view: each full collection walked them all, 50-90 ms inside a first request."""
    go.Figure(go.Scatter(x=[0], y=[0]), layout={"xaxis": {"range": [0, 1]}, "meta": {}})
    for name in SCHEMA:
        empty_frame(name)
    gc.freeze()


def session_options(store: SessionStore) -> list[dict[str, str]]:
    """The session picker's options: every session, newest first, labelled with its label
    when it has one (``train/2026_… · baseline``; one ``capture.json`` read per session)."""
    labels = {s.name: s.label for s in store.summaries()}
    return [{"label": n + (f" · {labels[n]}" if labels.get(n) else ""), "value": n} for n in labels]


# The navbar's links and the picker's value follow the URL in the browser (assets/shell.js):
# no request of theirs after a page's own. The picker's value is written only when the URL's
# session changes, so that pickerToUrl runs when the session does, not on every URL change.
dash.clientside_callback(
    ClientsideFunction("podscopeShell", "nav"),
    Output({"type": ids.NAV_LINK, "path": ALL}, "href"),
    Output({"type": ids.NAV_LINK, "path": ALL}, "active"),
    Input(ids.URL, "pathname"),
    Input(ids.URL, "search"),
    State({"type": ids.NAV_LINK, "path": ALL}, "id"),
)
dash.clientside_callback(
    ClientsideFunction("podscopeShell", "session"),
    Output(ids.SESSION_PICKER, "value"),
    Input(ids.URL, "search"),
    Input(ids.SESSION_PICKER, "options"),
    State(ids.SESSION_PICKER, "value"),
)
dash.clientside_callback(
    ClientsideFunction("podscopeShell", "pickerToUrl"),
    Output(ids.URL, "search"),
    Input(ids.SESSION_PICKER, "value"),
    State(ids.URL, "search"),
    State(ids.URL, "pathname"),
    prevent_initial_call=True,
)


@dash.callback(
    Output(ids.SESSION_PICKER, "options"),
    Input(ids.URL, "search"),
    Input(ids.URL, "pathname"),
    State(ids.SESSION_PICKER, "options"),
    prevent_initial_call=True,  # the layout brings them
)
def _refresh_sessions(
    _search: str | None, pathname: str | None, shown: list[dict[str, str]] | None
) -> Any:
    """Sessions added or removed since the layout came: the list is read again when the URL
    moves, the labels only when the sessions changed or on the Sessions page (where they are
    edited)."""
    store = current().store
    if shown and pathname != "/" and [o["value"] for o in shown] == store.names():
        return dash.no_update
    return session_options(store)
