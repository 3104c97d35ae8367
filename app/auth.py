"""The dashboard's login: deny by default once credentials are configured.

    >>> auth = AuthSettings(token="s3cret")          # or users=..., or proxy_header=...
    >>> install(app.server, auth)                      # before the first request

Three ways to authenticate, any of them enough: a shared token (``PODSCOPE_DASHBOARD_TOKEN`` or
a file), users with hashed passwords in a file (``name:hash`` or ``name:capture:hash`` lines;
``podscope hash-password`` makes the hash with werkzeug's scrypt), or the user name an
authenticating reverse proxy puts in a header, trusted only on requests from the proxy
addresses the operator names (``PODSCOPE_TRUSTED_PROXIES``): a direct client's header logs
nobody in.

**Roles.** Who may capture (make the dashboard call agents with their token) is separate from
who may view: the token's logins and ``name:capture:hash`` users capture; other users view;
behind a proxy, users in one of ``PODSCOPE_CAPTURE_GROUPS`` (read from the header
``PODSCOPE_PROXY_GROUPS_HEADER``) capture. A loopback dashboard without credentials has one
user, ``local``, who captures.

**Sessions.** A login is a random session id in Flask's signed cookie (itsdangerous):
``HttpOnly``, ``SameSite=Strict``, ``Secure`` behind TLS; the server keeps the live ids, so
logging out ends the session for every copy of the cookie, and a restart logs everyone out.
Without a login, pages redirect to ``/login``; callbacks, uploads and every other request get
401; each refusal is logged with the peer's address. Only POSTs to ``/login`` count as
attempts: 5 failures from one address in 5 minutes, or 50 from all addresses together, refuse
logins (429) for the rest of that window. ``next`` is rebuilt as a path on this server; control
characters in it are refused (400). No hand-written crypto: werkzeug checks the hashes,
``hmac.compare_digest`` the token, itsdangerous signs the cookie, ``secrets`` makes the ids.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import logging
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import flask
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import BadRequest
from werkzeug.security import check_password_hash

log = logging.getLogger("podscope.dashboard")

#: Paths served without a login: the login itself and the container's health check.
OPEN_PATHS = frozenset({"/login", "/logout", "/healthz"})
MAX_FAILURES, MAX_FAILURES_ALL, FAILURE_WINDOW_S = 5, 50, 300
#: Addresses whose failed logins are remembered at most, and the largest login request body.
MAX_PEERS, MAX_LOGIN_BYTES = 10_000, 64 << 10
SESSION_HOURS = 12
#: The shortest dashboard token a server that serves other machines accepts.
MIN_TOKEN_CHARS = 16
#: The shortest users-file password a login accepts: ``podscope hash-password`` makes none
#: shorter, and a hand-written file's hash of "1" must not open a dashboard that serves others.
MIN_PASSWORD_CHARS = 8
VIEW, CAPTURE = "view", "capture"
ROLES = (VIEW, CAPTURE)


class AuthError(ValueError):
    """The credentials configuration cannot be used (an unreadable or malformed file, or a
    proxy header with no proxy named)."""


@dataclass(frozen=True)
class AuthSettings:
    """Attributes:
    token: a shared token (``PODSCOPE_DASHBOARD_TOKEN`` or ``..._TOKEN_FILE``); its logins
        capture.
    users: user name → werkzeug password hash (``PODSCOPE_USERS_FILE``).
    capture_users: the users who may capture (``name:capture:hash`` lines); the others view.
    proxy_header: a header an authenticating reverse proxy sets to the user name
        (``PODSCOPE_TRUST_PROXY_HEADER``), read only on requests from ``trusted_proxies``.
    trusted_proxies: the proxy's addresses or networks (``PODSCOPE_TRUSTED_PROXIES``).
    proxy_groups_header: the header the proxy lists the user's groups in, comma- or
        space-separated (``PODSCOPE_PROXY_GROUPS_HEADER``).
    capture_groups: groups whose users capture (``PODSCOPE_CAPTURE_GROUPS``).
    secure_cookies: mark the session cookie ``Secure`` (serve behind TLS).
    secret_key: signs session cookies (None: a random key per process).

    Raises:
        AuthError: a proxy header without trusted proxies, or a proxy that is not an address
            or network.
    """

    token: str | None = None
    users: Mapping[str, str] = field(default_factory=dict)
    capture_users: frozenset[str] = frozenset()
    proxy_header: str | None = None
    trusted_proxies: tuple[str, ...] = ()
    proxy_groups_header: str | None = None
    capture_groups: frozenset[str] = frozenset()
    secure_cookies: bool = False
    secret_key: str | None = None

    def __post_init__(self) -> None:
        if self.proxy_header and not self.trusted_proxies:
            raise AuthError(
                f"PODSCOPE_TRUST_PROXY_HEADER={self.proxy_header} is trusted only from the "
                "proxy: name its addresses in PODSCOPE_TRUSTED_PROXIES (e.g. 10.0.0.5 or "
                "10.0.0.0/24); without them any client could set the header and log in"
            )
        self.proxy_networks()

    @property
    def enabled(self) -> bool:
        return bool(self.token or self.users or self.proxy_header)

    def proxy_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        try:
            return [ipaddress.ip_network(p.strip(), strict=False) for p in self.trusted_proxies]
        except ValueError as e:
            raise AuthError(f"PODSCOPE_TRUSTED_PROXIES: {e}") from None

    def check(self, user: str, secret: str) -> tuple[str, str] | None:
        """(the logged-in name, its role) for these credentials, or None."""
        if self.token and hmac.compare_digest(secret.encode(), self.token.encode()):
            return user or "token", CAPTURE
        hashed = self.users.get(user)
        if hashed and len(secret) >= MIN_PASSWORD_CHARS and check_password_hash(hashed, secret):
            return user, CAPTURE if user in self.capture_users else VIEW
        return None

    def from_proxy(self, remote_addr: str | None) -> bool:
        """Whether a request from ``remote_addr`` came through a trusted proxy."""
        if not self.proxy_header or not remote_addr:
            return False
        try:
            address = ipaddress.ip_address(remote_addr)
        except ValueError:
            return False
        return any(address in n for n in self.proxy_networks())

    def proxy_role(self, groups: str | None) -> str:
        named = {g.strip() for g in (groups or "").replace(",", " ").split()}
        return CAPTURE if named & self.capture_groups else VIEW


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


def read_users(path: Path) -> tuple[dict[str, str], frozenset[str]]:
    """``name:hash`` (views) and ``name:capture:hash`` (captures) lines, ``#`` comments and
    blank lines skipped: (name → hash, the names who capture).

    Raises:
        AuthError: unreadable, or a line without a werkzeug hash.
    """
    try:
        text = path.read_text()
    except OSError as e:
        raise AuthError(f"cannot read the users file {path}: {e}") from None
    users, capture = {}, set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, hashed = line.strip().partition(":")
        role, _, rest = hashed.partition(":")
        if role in ROLES:  # a werkzeug hash starts with its method (scrypt, pbkdf2)
            hashed = rest
            if role == CAPTURE:
                capture.add(name)
        if not sep or not name or "$" not in hashed:
            raise AuthError(
                f"{path}:{n}: expected name:hash or name:capture:hash (make the hash with "
                "podscope hash-password)"
            )
        users[name] = hashed
    if not users:
        raise AuthError(f"{path} lists no users")
    return users, frozenset(capture)


class _Failures:
    """Failed logins per peer address, and in all, within the window (one server process).

    An attempt counts against its address from the moment it starts (``begin``) until it
    succeeds: concurrent guesses from one address cannot all pass the check before the first
    is counted (16 clients at once had 57 failures counted before the block). The global
    count blocks only addresses that have failed themselves: a correct token from an address
    that has not failed always gets in (50 failures from 10 addresses locked everyone out).
    At most ``MAX_PEERS`` addresses are remembered, those that failed longest ago dropped first.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque()

    @staticmethod
    def _recent(times: deque[float], now: float) -> deque[float]:
        while times and now - times[0] > FAILURE_WINDOW_S:
            times.popleft()
        return times

    def begin(self, peer: str) -> str | None:
        """Why a login from ``peer`` is refused now; else None, with the attempt counted
        against ``peer`` until ``succeeded``."""
        with self._lock:
            now = time.monotonic()
            mine = self._times.get(peer)
            failed = len(self._recent(mine, now)) if mine is not None else 0
            if failed >= MAX_FAILURES:
                return "too many failures from it"
            if failed and len(self._recent(self._all, now)) >= MAX_FAILURES_ALL:
                return "too many failures from all addresses, this one among them"
            if mine is None:
                self._make_room(now)
                mine = self._times[peer] = deque()
            self._times.move_to_end(peer)
            mine.append(now)
            return None

    def _make_room(self, now: float) -> None:
        if len(self._times) < MAX_PEERS:
            return
        for old in [p for p, t in self._times.items() if not self._recent(t, now)]:
            del self._times[old]
        while len(self._times) >= MAX_PEERS:
            self._times.popitem(last=False)  # the one whose last attempt is oldest

    def failed(self, peer: str) -> None:
        """The attempt ``begin`` counted failed (it stays counted against ``peer``)."""
        with self._lock:
            now = time.monotonic()
            self._recent(self._all, now).append(now)

    def succeeded(self, peer: str) -> None:
        """The right credentials: ``peer``'s failures are forgotten."""
        with self._lock:
            self._times.pop(peer, None)


@dataclass
class _Sessions:
    """The live logins: session id → (user, role, expiry); one server process."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    live: dict[str, tuple[str, str, float]] = field(default_factory=dict)

    def start(self, user: str, role: str) -> str:
        sid = secrets.token_urlsafe(32)
        with self.lock:
            now = time.monotonic()
            for old in [s for s, (_, _, until) in self.live.items() if until <= now]:
                del self.live[old]
            self.live[sid] = (user, role, now + SESSION_HOURS * 3600)
        return sid

    def get(self, sid: object) -> tuple[str, str] | None:
        if not isinstance(sid, str):
            return None
        with self.lock:
            found = self.live.get(sid)
        if found is None or found[2] <= time.monotonic():
            return None
        return found[0], found[1]

    def end(self, sid: object) -> None:
        if isinstance(sid, str):
            with self.lock:
                self.live.pop(sid, None)


def safe_next(target: str | None) -> str:
    """``target`` rebuilt as a path on this server (never ``//host``, a scheme or a host):
    its path and query only, ``/`` when it names anything else.

    Raises:
        werkzeug.exceptions.BadRequest: control characters in it.
    """
    if not target:
        return "/"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        raise BadRequest("control characters in next")
    try:
        parts = urlsplit(target)
    except ValueError:
        return "/"
    if parts.scheme or parts.netloc or "\\" in parts.path or not parts.path.startswith("/"):
        return "/"
    return urlunsplit(("", "", "/" + parts.path.lstrip("/"), parts.query, ""))


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


def _who(auth: AuthSettings) -> tuple[str, str] | None:
    """(user, role) of this request, or None."""
    if not auth.enabled:
        return "local", CAPTURE
    request = flask.request
    if auth.proxy_header and auth.from_proxy(request.remote_addr):
        name = request.headers.get(auth.proxy_header)
        if name:
            groups = request.headers.get(auth.proxy_groups_header or "") or None
            return name, auth.proxy_role(groups)
    sessions = flask.current_app.extensions.get("podscope_sessions")
    return sessions.get(flask.session.get("sid")) if sessions is not None else None


def current_user(auth: AuthSettings) -> str | None:
    """Who is logged in on this request (the trusted proxy's header, else the session), or None;
    "local" when no credentials are configured (a loopback-only dashboard)."""
    who = _who(auth)
    return who[0] if who else None


def may_capture(auth: AuthSettings) -> bool:
    """Whether this request's user may capture (call agents with their token)."""
    who = _who(auth)
    return who is not None and who[1] == CAPTURE


def _runs(request: flask.Request, outputs: Iterable[str]) -> bool:
    """Whether ``request`` runs a Dash callback with an output among component ``outputs``."""
    if request.method != "POST" or request.path != "/_dash-update-component" or not outputs:
        return False
    body = request.get_json(silent=True)
    output = str(body.get("output", "")) if isinstance(body, dict) else ""
    return any(f"{o}." in output for o in outputs)


def install(server: flask.Flask, auth: AuthSettings, capture_outputs: Iterable[str] = ()) -> None:
    """Guards every route of ``server`` (a Dash app's Flask server) with ``auth``; nothing is
    guarded when no credentials are configured (a loopback-only dashboard). The Dash callbacks
    whose output is a component of ``capture_outputs`` answer 403 to users who only view."""
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
    failures, sessions = _Failures(), _Sessions()
    server.extensions["podscope_sessions"] = sessions
    spoofed: dict[str, float] = {}

    @server.before_request
    def require_login() -> ResponseReturnValue | None:
        request = flask.request
        if (
            auth.proxy_header
            and request.headers.get(auth.proxy_header)
            and not auth.from_proxy(request.remote_addr)
        ):
            peer = request.remote_addr or "?"
            if time.monotonic() - spoofed.get(peer, -1e9) > 60:  # once a minute per address
                spoofed[peer] = time.monotonic()
                log.warning(
                    "ignored %s from %s: not a trusted proxy (PODSCOPE_TRUSTED_PROXIES)",
                    auth.proxy_header,
                    peer,
                )
        who = None if request.path in OPEN_PATHS else _who(auth)
        if who is not None and who[1] != CAPTURE and _runs(request, capture_outputs):
            log.warning("refused a capture by %s from %s: they view", who[0], request.remote_addr)
            return flask.Response(
                '{"error": "your login may view, not capture"}',
                status=403,
                mimetype="application/json",
            )
        if request.path in OPEN_PATHS or who is not None:
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
        request.max_content_length = MAX_LOGIN_BYTES  # a login form is small: no 600 MiB parse
        peer = request.remote_addr or "?"
        if request.method != "POST":  # GET, HEAD: the page; only a POST is an attempt
            return _login_page(auth, next_path=safe_next(request.args.get("next")))
        why = failures.begin(peer)  # before the body is read: a refusal costs nothing
        if why is not None:
            log.warning("login refused from %s: %s", peer, why)
            next_path = safe_next(request.args.get("next"))
            return _login_page(auth, "Too many failed logins: try again later.", next_path), 429
        next_path = safe_next(request.values.get("next"))
        found = auth.check(request.form.get("user", ""), request.form.get("secret", ""))
        if found is None:
            failures.failed(peer)
            log.warning("failed login from %s (user %r)", peer, request.form.get("user", "")[:64])
            return _login_page(auth, "Wrong user, password or token.", next_path), 401
        failures.succeeded(peer)
        name, role = found
        sessions.end(flask.session.get("sid"))
        flask.session.clear()
        flask.session["sid"] = sessions.start(name, role)
        flask.session.permanent = True
        log.info("login of %s (%s) from %s", name, role, peer)
        return flask.redirect(next_path)

    @server.route("/logout", methods=["GET", "POST"])
    def logout() -> ResponseReturnValue:
        sessions.end(flask.session.get("sid"))  # every copy of the cookie ends here
        flask.session.clear()
        return flask.redirect("/login")
