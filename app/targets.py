"""Capture targets from what a user typed: worker addresses, or an engine cluster manifest."""

from __future__ import annotations

from pathlib import Path

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
