"""``--mirror-dir DIR``: the endpoint's server blocks, followed through the API and written as files.

Why: a CoreDNS that reads the blocks from a ConfigMap volume sees a change only when kubelet
syncs the volume, at its periodic pod sync (``--sync-frequency``, a minute by default, plus the
ConfigMap cache's TTL): a join (``POST /federations/F``) reached it up to about a minute and a
half after the endpoint answered. The member chart's forwarder mode therefore runs its CoreDNS
as a second container of the endpoint's pod, sharing an ``emptyDir`` with it, and each endpoint
replica keeps that directory equal to the ConfigMap itself: a watch brings a change in well
under a second, and CoreDNS's ``reload`` (every 2 s) applies it. The ConfigMap stays the one
truth: every replica writes its own directory from it, whichever replica took the POST.

How (:class:`ZoneMirror`):

* one ConfigMap, listed then watched by the core's reflector (:class:`feddns.reflector.Reflector`)
  with ``fieldSelector=metadata.name=NAME``, which RBAC authorizes by ``resourceNames``: resumed
  from its ``resourceVersion``, listed again after ``410 Gone``, and after any other failure
  again after a backoff doubling to :attr:`~feddns.reflector.WatchTiming.backoff_max` seconds;
* after each list and each event the directory is made equal to the ConfigMap: every key the
  backend owns (:meth:`stubzone.backends.coredns.CoreDNSBackend.owns`) is the file of the same
  name; every other ``*.server`` file in the directory is removed, and nothing else is touched;
* a file is written atomically (a temporary file in the directory, then ``os.replace``), so
  CoreDNS never reads half of one; its temporary name does not end in ``.server``, so the
  ``import DIR/*.server`` glob never sees it;
* a block that does not parse (:func:`stubzone.backends.corefile.parse`) is not written: CoreDNS
  would refuse the whole Corefile at its next reload, and every later change with it. The file
  it had stays, and the block is logged once;
* a failure (the API, or a file that cannot be written) is logged when it starts and when it
  ends, not at each retry; while it lasts, the files stay as they were;
* :attr:`ZoneMirror.synced` is true once the first list is in the directory: the endpoint
  reports ready only then (``/ready``), so a new pod does not serve an empty forwarder.
"""

import contextlib
import functools
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import kubernetes.client

from feddns.errors import ConfigError, FeddnsError
from feddns.reflector import ListCall, ListSource, Reflector, WatchTiming
from stubzone.backends.corefile import CorefileError, parse
from stubzone.metrics import StubzoneMetrics

log = logging.getLogger(__name__)

SUFFIX = ".server"
"""The files the mirror owns in its directory, as the forwarder's Corefile imports them (``*.server``)."""
TEMPORARY = ".tmp"
"""How a file being written ends: never ``.server``, so CoreDNS's import glob does not see it."""


class MirrorFailed(FeddnsError):
    """A file of the directory could not be written or removed; the reflector lists again after a backoff."""


class BlockOwner(Protocol):
    """The backend whose keys are mirrored (:class:`stubzone.backends.coredns.CoreDNSBackend`)."""

    def owns(self, key: str, text: str) -> bool:
        """Whether ConfigMap key ``key`` holding ``text`` is a block this backend writes."""


@dataclass(frozen=True)
class MirrorSettings:
    """What :class:`ZoneMirror` follows and where it writes (``--mirror-dir`` and the backend's flags)."""

    directory: Path
    """``--mirror-dir``: an existing, writable directory (the pod's ``emptyDir``)."""
    namespace: str
    """The ConfigMap's namespace (``--configmap NS/NAME``)."""
    name: str
    """The ConfigMap's name."""
    configuration: kubernetes.client.Configuration
    """The API server and credentials (``--kubeconfig``, ``--context``, or the service account)."""
    owner: BlockOwner
    """The backend: which keys are its blocks."""
    timing: WatchTiming = field(default_factory=WatchTiming)
    """Watch timeouts and the backoff between failed attempts (seconds)."""

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"


def mirror_settings(directory: Path, backend: object) -> MirrorSettings:
    """The settings of ``--mirror-dir directory`` for ``backend`` (one kept in a ConfigMap's keys).

    Raises :class:`ConfigError` naming ``--mirror-dir`` when ``directory`` is not a directory this
    process can write, or the backend keeps no server blocks in a ConfigMap."""
    from stubzone.backends.configmap import ConfigMapStore  # noqa: PLC0415 - only the coredns family mirrors
    from stubzone.backends.coredns import CoreDNSBackend  # noqa: PLC0415

    if not isinstance(backend, CoreDNSBackend) or not isinstance(backend.store, ConfigMapStore):
        raise ConfigError(f"--mirror-dir mirrors CoreDNS server blocks: --backend {getattr(backend, 'name', '?')} "
                          "writes none")
    if not directory.is_dir():
        raise ConfigError(f"--mirror-dir {directory}: not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"--mirror-dir {directory}: not writable by this process")
    store = backend.store
    return MirrorSettings(directory, store.namespace, store.name, store.configuration, backend)


def _data(obj: Any) -> dict[str, str]:
    """A ConfigMap of the API's JSON shrunk to its ``data``."""
    return {str(key): str(value) for key, value in ((obj or {}).get("data") or {}).items()}


class ZoneMirror:
    """Keeps ``settings.directory`` equal to the endpoint's blocks in its ConfigMap, in a thread (module doc).

    ``start()``/``stop()``; :attr:`synced` once the first list is written. Its metrics are
    ``feddns_stubzone_mirror_*`` of ``metrics``.
    """

    def __init__(self, settings: MirrorSettings, metrics: StubzoneMetrics) -> None:
        self.settings = settings
        self._metrics = metrics
        self._refused: dict[str, str] = {}
        """Key to the text not written because it does not parse: logged once, not at each event."""
        self._failing = False
        self._listed = False
        source = ListSource(self._connect, self._list_call, field_selector=f"metadata.name={settings.name}")
        self._reflector = Reflector(source, self, name=f"mirror {settings.where}", timing=settings.timing,
                                    shrink=_data)

    @property
    def synced(self) -> bool:
        """True once the directory holds the blocks of the first complete list."""
        return self._listed

    def start(self) -> None:
        self._remove_temporaries()
        self._reflector.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the watch (cutting a blocked read) and wait up to ``timeout`` seconds; the files stay."""
        self._reflector.stop(timeout)

    def _connect(self) -> kubernetes.client.ApiClient:
        return kubernetes.client.ApiClient(self.settings.configuration)

    def _list_call(self, client: kubernetes.client.ApiClient) -> ListCall:
        return functools.partial(kubernetes.client.CoreV1Api(client).list_namespaced_config_map,
                                 self.settings.namespace)

    # -- feddns.reflector.ReflectorSink, called from the reflector's thread ----------------------

    def listing(self, count: int, seconds: float) -> None:
        pass  # one object: a list is never long

    def listed(self, objects: list[Any], seconds: float) -> None:
        data = objects[0] if objects else {}  # the field selector lets one ConfigMap through, or none
        self._apply(data)
        if not self._listed:
            log.info("mirrored %s into %s: %d blocks", self.settings.where, self.settings.directory,
                     len(self._files()))
            self._listed = True

    def event(self, event_type: str, obj: Any) -> None:
        self._apply({} if event_type == "DELETED" else obj)

    def failed(self, error: str) -> None:
        if not self._failing:
            log.warning("mirror of %s into %s: %s; the files stay as they are, retrying with backoff",
                        self.settings.where, self.settings.directory, error)
            self._failing = True

    def restarted(self, reason: str) -> None:
        if reason == "expired":
            log.info("watch of %s expired (410 Gone): listing it again", self.settings.where)

    # -- the directory --------------------------------------------------------------------------

    def _apply(self, data: dict[str, str]) -> None:
        """Make the directory equal to ``data``'s blocks; raises :class:`MirrorFailed` when a file cannot
        be written or removed (the reflector then lists again after its backoff)."""
        owner = self.settings.owner
        wanted = {key: text for key, text in data.items() if key.endswith(SUFFIX) and owner.owns(key, text)}
        try:
            for key, text in sorted(wanted.items()):
                self._write(key, text)
            for name in self._files() - set(wanted):
                (self.settings.directory / name).unlink(missing_ok=True)
                self._metrics.mirror_changes.labels("removed").inc()
                log.info("mirror: removed %s (no longer in %s)", name, self.settings.where)
        except OSError as exc:
            raise MirrorFailed(f"cannot write {self.settings.directory}: {exc}") from exc
        self._refused = {key: text for key, text in self._refused.items() if key in wanted}
        self._metrics.mirror_synced.set_to_current_time()
        if self._failing:
            log.info("mirror of %s into %s is in step again", self.settings.where, self.settings.directory)
            self._failing = False

    def _files(self) -> set[str]:
        return {path.name for path in self.settings.directory.glob("*" + SUFFIX)}

    def _write(self, key: str, text: str) -> None:
        """File ``key`` with ``text``, unless it holds that already or ``text`` does not parse."""
        path = self.settings.directory / key
        with contextlib.suppress(FileNotFoundError):
            if path.read_text(encoding="utf-8") == text:
                return
        try:
            parse(text)
        except CorefileError as exc:
            if self._refused.get(key) != text:
                log.warning("mirror: %s key %s is not written (CoreDNS would refuse the Corefile): %s; "
                            "the file it had stays", self.settings.where, key, exc)
                self._metrics.mirror_changes.labels("refused").inc()
            self._refused[key] = text
            return
        self._refused.pop(key, None)
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=self.settings.directory, prefix=f".{key}.",
                                         suffix=TEMPORARY, delete=False) as temporary:
            temporary.write(text)
        try:
            os.chmod(temporary.name, 0o644)  # CoreDNS's container reads it (mkstemp makes it 0600)
            os.replace(temporary.name, path)
        except OSError:
            Path(temporary.name).unlink(missing_ok=True)
            raise
        self._metrics.mirror_changes.labels("written").inc()
        log.info("mirror: wrote %s", key)

    def _remove_temporaries(self) -> None:
        """Temporary files a stopped process left behind (``.KEY.*.tmp``)."""
        for path in self.settings.directory.glob(f".*{SUFFIX}.*{TEMPORARY}"):
            path.unlink(missing_ok=True)
