"""Capture targets from what a user typed: worker addresses, or an engine cluster manifest."""

from __future__ import annotations

import ipaddress
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from podscope.collectors.capture import Target
from podscope.collectors.errors import CaptureError


def targets_from(addresses: str | None, cluster_manifest: Path | None) -> list[Target]:
    """Targets from ``ADDR[,ADDR…]`` or an engine cluster manifest (its agent addresses).

    Raises:
        CaptureError: neither or both given, or an unreadable manifest.
    """
    if bool(addresses) == bool(cluster_manifest):
        raise CaptureError(
            "give worker addresses (host:port,host:port) or --cluster MANIFEST, not both"
        )
    if addresses:
        given = [a.strip() for a in addresses.split(",") if a.strip()]
        bad = [f"{a[:60]!r}: {why}" for a in given if (why := address_problem(a))]
        if bad:
            raise CaptureError(
                "; ".join(bad[:5])
                + (f"; … {len(bad) - 5} more" if len(bad) > 5 else "")
                + " (a worker address is host:port, e.g. 10.0.0.5:6010 or [::1]:6010)"
            )
        return [Target(a) for a in given]
    from podscope.reference_engine.cluster import Manifest
    from podscope.reference_engine.config import EngineError

    try:
        manifest = Manifest.load(Path(cluster_manifest))  # type: ignore[arg-type]
    except EngineError as e:
        raise CaptureError(str(e)) from None
    return [Target(t.agent_address) for t in manifest.tasks]


_HOST = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)$")


def address_problem(address: str) -> str | None:
    """Why ``address`` cannot be dialed as a worker's ``host:port``, or None: checked before
    any worker is called, so a typo fails at once instead of after every retry."""
    host, sep, port = address.rpartition(":")
    if not sep or (":" in host and not host.startswith("[")):
        return "no port" if ":" not in address else "an IPv6 address needs [brackets]"
    if not host:
        return "no host"
    if not _HOST.match(host):
        return "not a host name or IP address"
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return f"port {port[:10]!r} is not 1-65535"
    return None


def _split(address: str) -> tuple[str, str]:
    """(host, port) of ``host:port`` or ``[v6]:port``; the host without brackets, lower-case."""
    host, _, port = address.rpartition(":")
    return host.strip("[]").lower(), port


def address_matches(address: str, pattern: str) -> bool:
    """Whether a worker ``address`` (``host:port``) is one ``pattern`` admits
    (``PODSCOPE_AGENT_ALLOW``'s entries):

    - ``HOST:PORT`` where PORT is a number or ``*``;
    - HOST a network in CIDR form (``10.0.1.0/24``, ``[fd00::/64]``): an IP address in it (a
      host name never matches a network: what it resolves to can change);
    - else HOST's labels one by one, each a shell pattern within its label: ``10.0.1.*``
      admits ``10.0.1.7`` but not ``10.0.1.attacker.example`` (``*`` never crosses a dot),
      ``worker-*.train.internal`` admits ``worker-3.train.internal``.
    """
    host, port = _split(address)
    want_host, want_port = _split(pattern)
    if not host or not want_host or (want_port != "*" and want_port != port):
        return False
    if "/" in want_host:
        try:
            return ipaddress.ip_address(host) in ipaddress.ip_network(want_host, strict=False)
        except ValueError:
            return False
    labels, wanted = host.split("."), want_host.split(".")
    return len(labels) == len(wanted) and all(
        fnmatchcase(label, want) for label, want in zip(labels, wanted, strict=True)
    )


#: What the Capture page accepts (the server checks; the form's own limits are only a help).
LIMITS = {
    "duration_ms": (100, 60_000),
    "delay_ms": (0, 60_000),
    "host_tracer_level": (0, 3),
    "python_tracer_level": (0, 1),
    "retries": (0, 5),
}
MAX_TARGETS = 1024


#: The Capture page's label of each field (its errors name what the user sees).
FIELD_LABELS = {
    "duration_ms": "Duration (ms)",
    "delay_ms": "Delay before the common start (ms)",
    "host_tracer_level": "Host tracer level",
    "python_tracer_level": "Python tracer level",
    "retries": "Retries",
}


def capture_form(
    duration: Any, delay: Any, host_level: Any, py_level: Any, retries: Any
) -> tuple[dict[str, int], str | None]:
    """The form's values as ``CaptureOptions`` fields, or why the first bad one is refused,
    named as the page labels it (an empty field is refused too: nothing is guessed)."""
    raw = {
        "duration_ms": duration,
        "delay_ms": delay,
        "host_tracer_level": host_level,
        "python_tracer_level": py_level,
        "retries": retries,
    }
    fields: dict[str, int] = {}
    for name, value in raw.items():
        lo, hi = LIMITS[name]
        label = FIELD_LABELS[name]
        text = str(value).strip() if value is not None else ""
        if not text.isascii() or not text.lstrip("-").isdigit():
            shown = f"“{text[:20]}” is not" if text else "enter"
            return {}, f"{label}: {shown} a whole number from {lo:,} to {hi:,}."
        number = int(text)
        if not lo <= number <= hi:
            return {}, f"{label}: {number:,} is outside {lo:,}–{hi:,}."
        fields[name] = number
    return fields, None


def page_targets_problem(addresses: str | None, manifest: str | None) -> str | None:
    """What is wrong with the Capture page's two target fields, in the page's words."""
    if not (addresses or "").strip() and not (manifest or "").strip():
        return (
            "Enter the workers' addresses (host:port, comma-separated) or the path of an engine "
            "cluster manifest."
        )
    if (addresses or "").strip() and (manifest or "").strip():
        return "Fill in either the worker addresses or the cluster manifest, not both."
    return None
