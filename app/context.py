"""The app's context: settings, the session store and capture targets, held by the Dash app.

``create_app`` builds one ``AppContext`` and attaches it to the app's Flask server; pages and
callbacks reach it through ``current()``. Two apps in one process each keep their own.

    >>> from podscope.app.context import current
    >>> analysis = current().store.get("2026_12_01_10_00_00")
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import flask

from podscope.analyzers.execution import ExecConfig
from podscope.app.history import Watching
from podscope.app.settings import AppSettings
from podscope.app.store import SessionStore
from podscope.app.targets import address_matches, targets_from
from podscope.app.uploads import UploadBudget
from podscope.collectors.capture import Target
from podscope.collectors.errors import CaptureError

#: Key of the context in ``flask.Flask.extensions``.
EXTENSION = "podscope"
#: An engine manifest lists a few hundred tasks at most.
MAX_MANIFEST_BYTES = 1 << 20


class HostMaps:
    """Host → group mappings users uploaded on the Pod Viewer, by their content's digest (the
    URL names the digest, never the mapping); the last ``keep`` are kept in memory, and no
    more than ``max_hosts`` hosts in all (32 maps of 36 MiB held 370 MB each)."""

    def __init__(self, keep: int = 32, max_hosts: int = 200_000) -> None:
        self._maps: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._lock = threading.Lock()
        self._keep, self._max_hosts = keep, max_hosts

    def add(self, mapping: dict[str, str]) -> str:
        key = hashlib.blake2b(repr(sorted(mapping.items())).encode(), digest_size=8).hexdigest()
        with self._lock:
            self._maps[key] = mapping
            self._maps.move_to_end(key)
            while len(self._maps) > 1 and (
                len(self._maps) > self._keep or sum(map(len, self._maps.values())) > self._max_hosts
            ):
                self._maps.popitem(last=False)
        return key

    def get(self, key: str) -> dict[str, str] | None:
        with self._lock:
            return self._maps.get(key)


@dataclass(frozen=True)
class AppContext:
    """What every page of one app shares (read-only after ``build``, except the store's cache).

    Attributes:
        settings: the app's configuration.
        store: sessions of ``settings.logdir``: listing, import, parsed analyses.
        host_maps: the host → group mappings uploaded on the Pod Viewer.
        watching: the logdir's watcher (Capture page) and history (History page).
    """

    settings: AppSettings
    store: SessionStore
    watching: Watching
    host_maps: HostMaps = field(default_factory=HostMaps)

    @classmethod
    def build(cls, settings: AppSettings) -> AppContext:
        execution = ExecConfig(
            scheduler=settings.dask_scheduler,
            in_process_below=settings.cluster_min_files,
            fork=False,  # the server is threaded
        )
        return cls(
            settings,
            SessionStore(
                settings.logdir,
                settings.cache_dir,
                settings.frame_cache_sessions,
                execution,
                UploadBudget(settings.upload_memory_mb, cpu_s=settings.upload_cpu_s),
            ),
            Watching(settings.logdir, settings.cache_dir),
        )

    def capture_targets(self, addresses: str | None, manifest: str | None) -> list[Target]:
        """Workers to capture: the addresses given, else an engine cluster manifest, read only
        under the logdir or the served cluster's run folder, and only when it is a regular
        file of at most ``MAX_MANIFEST_BYTES``. Behind a login, an address given must be one
        the dashboard may call (``may_call``): the agents' token goes nowhere else.

        Raises:
            collectors.errors.CaptureError: neither given, a manifest elsewhere, too big or
                unreadable, or an address the dashboard may not call.
        """
        path = self.allowed_manifest(manifest) if manifest and not addresses else None
        targets = targets_from(addresses or None, path)
        if self.settings.auth.enabled:  # typed or from a manifest: the same check
            refused = [t.address for t in targets if not self.may_call(t.address)]
            if refused:
                raise CaptureError(
                    f"{', '.join(refused[:5])}: not an agent this dashboard may call. It calls "
                    "the workers of the served cluster and the addresses matching "
                    "PODSCOPE_AGENT_ALLOW (host:port patterns matched label by label, e.g. "
                    "10.0.1.*:6010, or networks, e.g. 10.0.1.0/24:6010), which the operator "
                    "sets"
                )
        return targets

    def may_call(self, address: str) -> bool:
        """Whether ``address`` is the served cluster's worker or matches ``agent_allow``
        (``app.targets.address_matches``)."""
        if any(address_matches(address, p) for p in self.settings.agent_allow):
            return True
        served = self.settings.cluster_manifest
        if served is None:
            return False
        try:
            return address in {t.address for t in targets_from(None, served)}
        except CaptureError:
            return False

    def allowed_manifest(self, manifest: str) -> Path:
        """``manifest`` (a file, or a folder holding ``cluster.json``), when it may be read.

        Raises:
            collectors.errors.CaptureError: outside the allowed folders, not a regular file,
                or over ``MAX_MANIFEST_BYTES``.
        """
        from podscope.reference_engine.cluster import (
            MANIFEST,  # the engine only when a manifest is named
        )

        path = Path(manifest).expanduser().resolve()
        if path.is_dir():
            path = path / MANIFEST
        roots = [self.settings.logdir.resolve()]
        if self.settings.cluster_manifest is not None:
            served = self.settings.cluster_manifest.resolve()
            roots.append(served.parent if served.is_file() or not served.exists() else served)
        if not any(path == r or r in path.parents for r in roots):
            raise CaptureError(
                f"{manifest}: cluster manifests are read only under "
                + " or ".join(str(r) for r in roots)
            )
        if not path.is_file():
            raise CaptureError(f"{manifest}: no cluster manifest there")
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise CaptureError(f"{manifest}: over {MAX_MANIFEST_BYTES:,} bytes, not a manifest")
        return path


def attach(server: flask.Flask, context: AppContext) -> None:
    """Makes ``context`` the one ``current()`` returns inside this server's requests."""
    server.extensions[EXTENSION] = context


def current() -> AppContext:
    """The context of the app serving this request (or running this background callback,
    which inherits the request's Flask app context).

    Raises:
        RuntimeError: called outside a request of an app made by ``create_app``.
    """
    if not flask.has_app_context():
        raise RuntimeError("no PodScope app context: call this inside a request or callback")
    context: AppContext = flask.current_app.extensions[EXTENSION]
    return context
