"""The dashboard's login: deny by default once credentials are configured.

    >>> auth = AuthSettings(token="s3cret")          # or users=..., or proxy_header=...
    >>> install(app.server, auth)                      # before the first request

Three ways to authenticate, any of them enough: a shared token (``PODSCOPE_DASHBOARD_TOKEN`` or
a file), users with hashed passwords in a file (``name:hash`` lines; ``podscope hash-password``
makes the hash with werkzeug's scrypt), or the user name an authenticating reverse proxy puts
in a header it sets, when that header is explicitly trusted. A login is kept in Flask's signed
session cookie (itsdangerous): ``HttpOnly``, ``SameSite=Strict``, ``Secure`` behind TLS.
Without a login, pages redirect to ``/login``; callbacks, uploads and every other request get
401; each refusal is logged once with the peer's address. Failed logins are logged too, and a peer with 5 failures in 5 minutes
is refused (429) for the rest of that window. No hand-written crypto: werkzeug checks the
hashes, ``hmac.compare_digest`` the token, itsdangerous signs the cookie.
"""

from __future__ import annotations

import hmac
import html
import logging
import secrets
import threading
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import flask
from flask.typing import ResponseReturnValue
from werkzeug.security import check_password_hash

log = logging.getLogger("podscope.dashboard")

#: Paths served without a login: the login itself and the container's health check.
OPEN_PATHS = frozenset({"/login", "/logout", "/healthz"})
MAX_FAILURES, FAILURE_WINDOW_S = 5, 300
SESSION_HOURS = 12


class AuthError(ValueError):
    """The credentials configuration cannot be used (an unreadable or malformed file)."""


@dataclass(frozen=True)
class AuthSettings:
    """Attributes:
    token: a shared token (``PODSCOPE_DASHBOARD_TOKEN`` or ``..._TOKEN_FILE``).
    users: user name → werkzeug password hash (``PODSCOPE_USERS_FILE``).
    proxy_header: a header an authenticating reverse proxy sets to the user name
        (``PODSCOPE_TRUST_PROXY_HEADER``); trusted only when configured.
    secure_cookies: mark the session cookie ``Secure`` (serve behind TLS).
    secret_key: signs session cookies (None: a random key per process, so a restart logs
        everyone out; set ``PODSCOPE_SECRET_KEY`` for several server processes).
    """

    token: str | None = None
    users: Mapping[str, str] = field(default_factory=dict)
    proxy_header: str | None = None
    secure_cookies: bool = False
    secret_key: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.token or self.users or self.proxy_header)

    def check(self, user: str, secret: str) -> str | None:
        """The logged-in name for these credentials, or None."""
        if self.token and hmac.compare_digest(secret.encode(), self.token.encode()):
            return user or "token"
        hashed = self.users.get(user)
        if hashed and check_password_hash(hashed, secret):
            return user
        return None


def read_token(path: Path) -> str:
    """The token in ``path`` (first line, stripped).

    Raises:
        AuthError: unreadable or empty.
    """
    try:
        token = path.read_text().strip().splitlines()[0].strip() if path.stat().st_size else ""
    except (OSError, IndexError) as e:
        raise AuthError(f"cannot read the dashboard token from {path}: {e}") from None
    if not token:
        raise AuthError(f"{path} holds no token")
    return token


def read_users(path: Path) -> dict[str, str]:
    """``name:hash`` lines (``#`` comments and blank lines skipped).

    Raises:
        AuthError: unreadable, or a line without a werkzeug hash.
    """
    try:
        text = path.read_text()
    except OSError as e:
        raise AuthError(f"cannot read the users file {path}: {e}") from None
    users = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, hashed = line.strip().partition(":")
        if not sep or not name or "$" not in hashed:
            raise AuthError(
                f"{path}:{n}: expected name:hash (make the hash with podscope hash-password)"
            )
        users[name] = hashed
    if not users:
        raise AuthError(f"{path} lists no users")
    return users


class _Failures:
    """Failed logins per peer address within the window (one server process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: dict[str, deque[float]] = defaultdict(deque)

    def _recent(self, peer: str, now: float) -> deque[float]:
        times = self._times[peer]
        while times and now - times[0] > FAILURE_WINDOW_S:
            times.popleft()
        return times

    def blocked(self, peer: str) -> bool:
        with self._lock:
            return len(self._recent(peer, time.monotonic())) >= MAX_FAILURES

    def add(self, peer: str) -> None:
        with self._lock:
            self._recent(peer, time.monotonic()).append(time.monotonic())

    def clear(self, peer: str) -> None:
        with self._lock:
            self._times.pop(peer, None)


def _safe_next(target: str | None) -> str:
    """Only a path on this server (never ``//host`` or a scheme)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _login_page(auth: AuthSettings, message: str = "", next_path: str = "/") -> str:
    user_field = (
        '<label>User <input name="user" autocomplete="username" required autofocus></label>'
        if auth.users
        else '<input type="hidden" name="user" value="">'
    )
    secret = {(True, True): "Password or token", (True, False): "Password"}.get(
        (bool(auth.users), bool(auth.token)), "Token"
    )
    note = f'<p class="err" role="alert">{html.escape(message)}</p>' if message else ""
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>PodScope · log in</title><meta name="viewport" content="width=device-width">
<style>body{{font-family:system-ui,sans-serif;background:#212529;color:#f8f9fa;display:grid;
place-items:center;height:100vh;margin:0}}form{{background:#343a40;padding:2rem;border-radius:8px;
display:grid;gap:.8rem;min-width:18rem}}input{{display:block;width:100%;padding:.4rem;
margin-top:.2rem;box-sizing:border-box}}button{{padding:.5rem}}.err{{color:#ff8787;margin:0}}
</style></head><body><form method="post" action="/login">
<h1 style="margin:0;font-size:1.4rem">PodScope</h1>{note}{user_field}
<label>{secret} <input name="secret" type="password" autocomplete="current-password" required
{"" if auth.users else "autofocus"}></label>
<input type="hidden" name="next" value="{html.escape(next_path)}">
<button type="submit">Log in</button></form></body></html>"""


def current_user(auth: AuthSettings) -> str | None:
    """Who is logged in on this request (the trusted proxy's header, else the session), or None;
    "local" when no credentials are configured (a loopback-only dashboard)."""
    if not auth.enabled:
        return "local"
    if auth.proxy_header:
        name = flask.request.headers.get(auth.proxy_header)
        if name:
            return name
    name = flask.session.get("user")
    return name if isinstance(name, str) else None


def install(server: flask.Flask, auth: AuthSettings) -> None:
    """Guards every route of ``server`` (a Dash app's Flask server) with ``auth``; nothing is
    guarded when no credentials are configured (a loopback-only dashboard)."""
    if not auth.enabled:
        return
    server.secret_key = auth.secret_key or secrets.token_hex(32)
    server.config.update(
        SESSION_COOKIE_NAME="podscope_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=auth.secure_cookies,
        PERMANENT_SESSION_LIFETIME=timedelta(hours=SESSION_HOURS),
    )
    failures = _Failures()

    def user() -> str | None:
        return current_user(auth)

    @server.before_request
    def require_login() -> ResponseReturnValue | None:
        request = flask.request
        if request.path in OPEN_PATHS or user():
            return None
        log.warning(
            "refused %s %s from %s: not logged in",
            request.method,
            request.path,
            request.remote_addr,
        )
        if request.method == "GET" and not request.path.startswith("/_"):
            target = request.full_path if request.query_string else request.path
            return flask.redirect(f"/login?next={quote(target, safe='/')}")
        return flask.Response('{"error": "log in first"}', status=401, mimetype="application/json")

    @server.route("/login", methods=["GET", "POST"])
    def login() -> ResponseReturnValue:
        request = flask.request
        peer = request.remote_addr or "?"
        next_path = _safe_next(request.values.get("next"))
        if request.method == "GET":
            return _login_page(auth, next_path=next_path)
        if failures.blocked(peer):
            log.warning("login refused from %s: too many failures", peer)
            return _login_page(auth, "Too many failed logins: try again later.", next_path), 429
        name = auth.check(request.form.get("user", ""), request.form.get("secret", ""))
        if name is None:
            failures.add(peer)
            log.warning("failed login from %s (user %r)", peer, request.form.get("user", ""))
            return _login_page(auth, "Wrong user, password or token.", next_path), 401
        failures.clear(peer)
        flask.session.clear()
        flask.session["user"] = name
        flask.session.permanent = True
        log.info("login of %s from %s", name, peer)
        return flask.redirect(next_path)

    @server.route("/logout", methods=["GET", "POST"])
    def logout() -> ResponseReturnValue:
        flask.session.clear()
        return flask.redirect("/login")
