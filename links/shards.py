"""The local cluster's shards of federated services, kept in memory by list and watch.

A link takes its ports from the local shard: the Service of the link's name and
namespace that carries the federation label (``federation.feddns.io/name:
<federation>``, the controller's default selector). Reading the Service per
AdmissionReview would put an API round trip on every pod creation, so the
webhook keeps every labelled Service's ports, as an informer does.

The reflector of the core (:class:`feddns.reflector.Reflector`, the controller's
too) lists ``/api/v1/services?labelSelector=<label>`` in pages and watches from
the list's version; each event replaces or removes one Service; ``410 Gone``
lists again; any other failure keeps what is known, backs off (full jitter,
doubling to 30 s) and lists again. This module only keeps, of each Service,
its label and ports (:func:`shard_of`, the reflector's ``shrink``), so memory
grows with the number of federated Services, not their size; the first
failure and the recovery are logged once each. Lookups
(:meth:`LocalShards.ports`) take a lock held only for a dict read.
"""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import kubernetes.config
from kubernetes.utils.keepalive import tcp_keepalive_socket_options

from feddns.kubeapi import KEEPALIVE, load_configuration
from feddns.records import MAX_PORT
from feddns.reflector import ListCall, ListSource, Reflector, WatchTiming
from links.link import LinkPort

log = logging.getLogger(__name__)

FEDERATION_LABEL = "federation.feddns.io/name"
"""The label whose value names a shard's federation (the controller's ``selector.label``)."""


@dataclass(frozen=True, slots=True)
class LocalShard:
    """What is kept of a labelled Service: its federation and its ports, in ``spec.ports`` order."""

    federation: str
    ports: tuple[LinkPort, ...]


SHARD_TIMING = WatchTiming(watch_timeout=300, read_slack=30.0, list_timeout=60.0)
"""How the Services are listed and watched: the core's defaults but longer watches (one
request every 5 minutes), so that a black-holed API server is noticed within 330 s."""


def connector(kubeconfig: str | None, context: str | None) -> Callable[[], kubernetes.client.ApiClient]:
    """A function making an API client from ``kubeconfig`` (and ``context``), or the pod's service account.

    The configuration is read once now, so that a bad file raises :class:`ConfigError`
    before anything listens; each call then makes a client from it (urllib3's own
    retries off: the reflector backs off itself; TCP keep-alive :data:`feddns.kubeapi.KEEPALIVE`,
    so a watch on an API server that vanished ends in 30 s instead of at the watch's timeout).
    """
    configuration = kubernetes.client.Configuration()
    configuration.retries = False
    configuration.socket_options = tcp_keepalive_socket_options(*KEEPALIVE)
    load_configuration(kubernetes.config, configuration, kubeconfig, context)
    return lambda: kubernetes.client.ApiClient(configuration)


def shard_of(service: Any, label: str) -> tuple[tuple[str, str], LocalShard | None]:
    """``((namespace, name), shard)`` of a Service object; the shard is ``None`` when it lacks ``label``."""
    meta = service.get("metadata") or {}
    key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
    federation = (meta.get("labels") or {}).get(label)
    if not isinstance(federation, str):
        return key, None
    ports = []
    for entry in (service.get("spec") or {}).get("ports") or []:
        number = entry.get("port") if isinstance(entry, dict) else None
        if isinstance(number, int) and 0 < number <= MAX_PORT:
            ports.append(LinkPort(str(entry.get("name") or ""), number))
    return key, LocalShard(federation, tuple(ports))


def _list_services(client: kubernetes.client.ApiClient) -> ListCall:
    """The list method of Services in all namespaces (``/api/v1/services``)."""
    return kubernetes.client.CoreV1Api(client).list_service_for_all_namespaces


class _Table:
    """The reflector's sink: the shards by ``(namespace, name)``, each list replacing them,
    each event changing one. Says once when the API fails, and once when it is listed again."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lock = threading.Lock()
        self.shards: dict[tuple[str, str], LocalShard] = {}
        self.synced = threading.Event()
        self._failing = False

    def listing(self, count: int, seconds: float) -> None:
        pass

    def listed(self, objects: list[Any], seconds: float) -> None:
        shards = {key: shard for key, shard in objects if shard is not None}
        with self.lock:
            self.shards = shards
        if self._failing or not self.synced.is_set():
            log.info("Kubernetes API: listed %d Services labelled %s", len(shards), self.label)
        self._failing = False
        self.synced.set()

    def event(self, event_type: str, obj: Any) -> None:
        key, shard = obj
        with self.lock:
            if event_type == "DELETED" or shard is None:
                self.shards.pop(key, None)
            else:
                self.shards[key] = shard

    def failed(self, error: str) -> None:
        if not self._failing:
            with self.lock:
                known = len(self.shards)
            log.warning("Kubernetes API: %s; keeping %d known shards, retrying", error, known)
            self._failing = True

    def restarted(self, reason: str) -> None:
        if reason == "expired":
            log.info("Service watch expired (410); listing again")


class LocalShards:
    """Every Service labelled with ``label`` in the local cluster, kept current by a daemon thread.

    ``connect`` makes an API client (called again after each failure, so that
    credentials are read anew). ``synced`` is set once the first list is in.
    """

    def __init__(self, connect: Callable[[], kubernetes.client.ApiClient], label: str = FEDERATION_LABEL,
                 timing: WatchTiming = SHARD_TIMING) -> None:
        self.label = label
        self._table = _Table(label)
        self.synced = self._table.synced
        source = ListSource(connect, _list_services, label_selector=label)
        self._reflector = Reflector(source, self._table, name="links-shards", timing=timing,
                                    shrink=lambda service: shard_of(service, label))

    def start(self) -> None:
        self._reflector.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop, cutting a blocked read, and wait up to ``timeout`` seconds for the thread."""
        self._reflector.stop(timeout)

    @property
    def ready(self) -> bool:
        """True once the first list is in (lookups before that find no shard)."""
        return self.synced.is_set()

    def __len__(self) -> int:
        with self._table.lock:
            return len(self._table.shards)

    def ports(self, namespace: str, name: str, federation: str) -> tuple[LinkPort, ...] | None:
        """The ports of the local shard ``namespace/name`` of ``federation``; ``None`` when there is none."""
        with self._table.lock:
            shard = self._table.shards.get((namespace, name))
        if shard is None or shard.federation != federation:
            return None
        return shard.ports
