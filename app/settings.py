"""The app's configuration: one frozen dataclass, built once at the edge (CLI flags or env)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_PREFIX = "PODSCOPE_"


@dataclass(frozen=True)
class AppSettings:
    """Attributes:
    logdir: the folder whose ``plugins/profile/<session>`` folders the app shows.
    cache_dir: parsed-frame cache (None: ``trace_parsers``' default).
    max_upload_mb: largest accepted upload.
    frame_cache_sessions: parsed sessions kept in memory (least recently used dropped).
    cluster_manifest: an engine cluster the capture page offers by default (``podscope demo``).
    dask_scheduler: analyse sessions' workers on this Dask scheduler (``tcp://HOST:8786``).
    cluster_min_files: sessions of at least this many files are analysed per worker in the
        background (a LocalCluster without ``dask_scheduler``), with progress in the page.
    """

    logdir: Path = Path("runs")
    cache_dir: Path | None = None
    max_upload_mb: int = 512
    frame_cache_sessions: int = 4
    cluster_manifest: Path | None = None
    dask_scheduler: str | None = None
    cluster_min_files: int = 8

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AppSettings:
        """Settings from ``PODSCOPE_LOGDIR``, ``PODSCOPE_CACHE_DIR``, ``PODSCOPE_MAX_UPLOAD_MB``,
        ``PODSCOPE_FRAME_CACHE_SESSIONS``, ``PODSCOPE_CLUSTER_MANIFEST``,
        ``PODSCOPE_DASK_SCHEDULER``, ``PODSCOPE_CLUSTER_MIN_FILES``."""
        e = os.environ if env is None else env

        def get(name: str) -> str | None:
            return e.get(ENV_PREFIX + name) or None

        manifest = get("CLUSTER_MANIFEST")
        cache = get("CACHE_DIR")
        return cls(
            logdir=Path(get("LOGDIR") or "runs"),
            cache_dir=Path(cache) if cache else None,
            max_upload_mb=int(get("MAX_UPLOAD_MB") or 512),
            frame_cache_sessions=int(get("FRAME_CACHE_SESSIONS") or 4),
            cluster_manifest=Path(manifest) if manifest else None,
            dask_scheduler=get("DASK_SCHEDULER"),
            cluster_min_files=int(get("CLUSTER_MIN_FILES") or 8),
        )
