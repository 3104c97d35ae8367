"""The names the dashboard answers to: every request's ``Host`` header is checked first.

A web page a colleague opens can make their browser send requests to ``127.0.0.1:8050``, and
DNS rebinding can make such a page's own name resolve there: those requests carry the page's
name in ``Host``. Only the names this server answers to are served: loopback's, the address it
binds, this machine's names and addresses when it serves other machines, and the operator's
(``PODSCOPE_ALLOWED_HOSTS``; ``.example.com`` covers its subdomains). Anything else gets 400
with what to set.

    >>> install(server, answered_names("127.0.0.1", ()))
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import time
from collections.abc import Iterable
from urllib.parse import urlsplit

import flask
from flask.typing import ResponseReturnValue

log = logging.getLogger("podscope.dashboard")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_ANY = ("0.0.0.0", "::", "")


def answered_names(bind_host: str, extra: Iterable[str]) -> frozenset[str]:
    """The ``Host`` names a server bound to ``bind_host`` answers to, with ``extra``."""
    names = set(LOOPBACK_NAMES)
    host = bind_host.strip("[]").lower()
    if host not in _ANY:
        names.add(host)
    if not _loopback(host):
        machine = socket.gethostname()
        names |= {machine.lower(), socket.getfqdn().lower()}
        with contextlib.suppress(OSError):  # a name that does not resolve: its names only
            names |= {str(a[4][0]).lower() for a in socket.getaddrinfo(machine, None)}
    names |= {e.strip().lower() for e in extra if e.strip()}
    return frozenset(names)


def _loopback(host: str) -> bool:
    try:
        return host in LOOPBACK_NAMES or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str | None) -> str | None:
    """The host of a ``Host`` header (``[::1]:8050`` → ``::1``), lowercased; None when it is
    not one (empty, a user part, spaces, a bad port)."""
    if not header or any(c in header for c in "@ /\\\t\r\n"):
        return None
    try:
        parts = urlsplit("//" + header)
        parts.port  # noqa: B018 -- raises for a bad port
    except ValueError:
        return None
    return parts.hostname or None


def answers(name: str | None, names: frozenset[str]) -> bool:
    if name is None:
        return False
    return name in names or any(n.startswith(".") and name.endswith(n) for n in names)


def install(server: flask.Flask, names: frozenset[str]) -> None:
    """Refuses (400) every request whose ``Host`` is not one of ``names``, before anything
    else runs; logs each refused name at most once a minute."""
    logged: dict[str, float] = {}

    @server.before_request
    def check_host() -> ResponseReturnValue | None:
        header = flask.request.headers.get("Host")
        if answers(host_name(header), names):
            return None
        shown = (header or "")[:100]
        if time.monotonic() - logged.get(shown, -1e9) > 60 and len(logged) < 10_000:
            logged[shown] = time.monotonic()
            log.warning(
                "refused a request for Host %r from %s: not a name this server answers to",
                shown,
                flask.request.remote_addr,
            )
        return flask.Response(
            f"This server does not answer to the name {shown!r}. If it should, add the name "
            "to PODSCOPE_ALLOWED_HOSTS (comma-separated) and restart it.\n",
            status=400,
            mimetype="text/plain",
        )
