"""Capture targets from what a user typed: worker addresses, or an engine cluster manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collectors.capture import Target
from collectors.errors import CaptureError


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
        return [Target(a.strip()) for a in addresses.split(",") if a.strip()]
    from reference_engine.cluster import Manifest
    from reference_engine.config import EngineError

    try:
        manifest = Manifest.load(Path(cluster_manifest))  # type: ignore[arg-type]
    except EngineError as e:
        raise CaptureError(str(e)) from None
    return [Target(t.agent_address) for t in manifest.tasks]


#: What the Capture page accepts (the server checks; the form's own limits are only a help).
LIMITS = {
    "duration_ms": (100, 60_000),
    "delay_ms": (0, 60_000),
    "host_tracer_level": (0, 3),
    "python_tracer_level": (0, 1),
    "retries": (0, 5),
}
MAX_TARGETS = 1024


def capture_form(
    duration: Any, delay: Any, host_level: Any, py_level: Any, retries: Any
) -> tuple[dict[str, int], str | None]:
    """The form's values as ``CaptureOptions`` fields, or the first one out of ``LIMITS``
    (missing duration, delay and retries take their defaults)."""
    raw = {
        "duration_ms": 2000 if duration in (None, "") else duration,
        "delay_ms": 0 if delay in (None, "") else delay,
        "host_tracer_level": host_level,
        "python_tracer_level": py_level,
        "retries": 0 if retries in (None, "") else retries,
    }
    fields: dict[str, int] = {}
    for name, value in raw.items():
        lo, hi = LIMITS[name]
        try:
            number = int(str(value))
        except ValueError:
            return {}, f"{name.replace('_', ' ')}: {value!r} is not a whole number"
        if not lo <= number <= hi:
            return {}, f"{name.replace('_', ' ')}: {number} is outside {lo}–{hi}"
        fields[name] = number
    return fields, None
