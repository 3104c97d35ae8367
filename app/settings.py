"""The app's configuration: one frozen dataclass, built once at the edge (CLI flags or env)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from podscope.app.auth import AuthSettings, read_token, read_users

ENV_PREFIX = "PODSCOPE_"


@dataclass(frozen=True)
class AppSettings:
    """Attributes:
    logdir: the folder whose ``plugins/profile/<session>`` folders the app shows.
    cache_dir: parsed-frame cache (None: ``trace_parsers``' default).
    max_upload_mb: largest accepted upload.
    upload_memory_mb: memory the uploads being read at once may use together
        (``app.uploads``; ``PODSCOPE_UPLOAD_MEMORY_MB``).
    upload_cpu_s: CPU seconds one upload's reading may take (``PODSCOPE_UPLOAD_CPU_S``).
    frame_cache_sessions: parsed sessions kept in memory (least recently used dropped).
    cluster_manifest: an engine cluster the capture page offers by default (``podscope demo``).
    dask_scheduler: analyse sessions' workers on this Dask scheduler (``tcp://HOST:8786``).
    cluster_min_files: sessions of at least this many files are analysed per worker in the
        background (without ``dask_scheduler``: a pool of this machine's processes, or a
        LocalCluster for a session with a big worker), with progress in the page.
    agent_token: the agents' shared token, sent by the Capture page (``PODSCOPE_TOKEN``).
    agent_allow: ``host:port`` patterns (``app.targets.address_matches``: ``10.0.1.*:6010``
        label by label, ``10.0.1.0/24:6010`` as a network) of the agents the
        Capture page may call, beside the workers of the cluster manifests it may read
        (``PODSCOPE_AGENT_ALLOW``, comma-separated). A dashboard with a login calls no other
        address; a loopback one without a login calls what its user types.
    allowed_hosts: the names the server answers to (``Host`` header), beside loopback's and
        this machine's (``PODSCOPE_ALLOWED_HOSTS``, comma-separated; ``.example.com`` covers
        its subdomains).
    host, port: where ``podscope serve`` listens (``PODSCOPE_HOST``, ``PODSCOPE_PORT``).
    auth: who may use the dashboard (``app.auth``; nobody is asked when it has no credentials).
    """

    logdir: Path = Path("runs")
    cache_dir: Path | None = None
    max_upload_mb: int = 512
    upload_memory_mb: int = 2048
    upload_cpu_s: int = 120
    frame_cache_sessions: int = 4
    cluster_manifest: Path | None = None
    dask_scheduler: str | None = None
    cluster_min_files: int = 8
    agent_token: str | None = None
    agent_allow: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    auth: AuthSettings = field(default_factory=AuthSettings)
    host: str = "127.0.0.1"
    port: int = 8050

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AppSettings:
        """Settings from ``PODSCOPE_LOGDIR``, ``PODSCOPE_CACHE_DIR``, ``PODSCOPE_MAX_UPLOAD_MB``,
        ``PODSCOPE_UPLOAD_MEMORY_MB``, ``PODSCOPE_UPLOAD_CPU_S``,
        ``PODSCOPE_FRAME_CACHE_SESSIONS``, ``PODSCOPE_CLUSTER_MANIFEST``,
        ``PODSCOPE_DASK_SCHEDULER``, ``PODSCOPE_CLUSTER_MIN_FILES``, ``PODSCOPE_TOKEN``,
        ``PODSCOPE_AGENT_ALLOW``, ``PODSCOPE_ALLOWED_HOSTS``, ``PODSCOPE_HOST``,
        ``PODSCOPE_PORT`` and the login's (``auth_from_env``).

        Raises:
            app.auth.AuthError: a credentials file that cannot be used.
            ValueError: a number that is not one."""
        e = os.environ if env is None else env

        def get(name: str) -> str | None:
            return e.get(ENV_PREFIX + name) or None

        manifest = get("CLUSTER_MANIFEST")
        cache = get("CACHE_DIR")
        return cls(
            logdir=Path(get("LOGDIR") or "runs"),
            cache_dir=Path(cache) if cache else None,
            max_upload_mb=int(get("MAX_UPLOAD_MB") or 512),
            upload_memory_mb=int(get("UPLOAD_MEMORY_MB") or 2048),
            upload_cpu_s=int(get("UPLOAD_CPU_S") or 120),
            frame_cache_sessions=int(get("FRAME_CACHE_SESSIONS") or 4),
            cluster_manifest=Path(manifest) if manifest else None,
            dask_scheduler=get("DASK_SCHEDULER"),
            cluster_min_files=int(get("CLUSTER_MIN_FILES") or 8),
            agent_token=get("TOKEN"),
            agent_allow=_list(get("AGENT_ALLOW")),
            allowed_hosts=_list(get("ALLOWED_HOSTS")),
            host=get("HOST") or "127.0.0.1",
            port=int(get("PORT") or 8050),
            auth=auth_from_env(e),
        )


def _list(value: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in (value or "").split(",") if v.strip())


def auth_from_env(env: Mapping[str, str]) -> AuthSettings:
    """The login from ``PODSCOPE_DASHBOARD_TOKEN`` (or ``PODSCOPE_DASHBOARD_TOKEN_FILE``),
    ``PODSCOPE_USERS_FILE``, ``PODSCOPE_TRUST_PROXY_HEADER`` with ``PODSCOPE_TRUSTED_PROXIES``,
    ``PODSCOPE_PROXY_GROUPS_HEADER`` and ``PODSCOPE_CAPTURE_GROUPS`` (comma-separated lists),
    ``PODSCOPE_SECURE_COOKIES`` (1/true/yes) and ``PODSCOPE_SECRET_KEY``.

    Raises:
        app.auth.AuthError: a file that cannot be read or has no credentials in it, or a
            proxy header without the proxy's addresses.
    """

    def get(name: str) -> str | None:
        return env.get(ENV_PREFIX + name) or None

    token_file, users_file = get("DASHBOARD_TOKEN_FILE"), get("USERS_FILE")
    users, capture_users = read_users(Path(users_file)) if users_file else ({}, frozenset())
    return AuthSettings(
        token=get("DASHBOARD_TOKEN") or (read_token(Path(token_file)) if token_file else None),
        users=users,
        capture_users=capture_users,
        proxy_header=get("TRUST_PROXY_HEADER"),
        trusted_proxies=_list(get("TRUSTED_PROXIES")),
        proxy_groups_header=get("PROXY_GROUPS_HEADER"),
        capture_groups=frozenset(_list(get("CAPTURE_GROUPS"))),
        secure_cookies=(get("SECURE_COOKIES") or "").lower() in ("1", "true", "yes"),
        secret_key=get("SECRET_KEY"),
    )
