"""The local cluster's shards of federated services, kept in memory by list and watch.

A link takes its ports from the local shard: the Service of the link's name and
namespace that carries the federation label (``federation.feddns.io/name:
<federation>``, the controller's default selector). Reading the Service per
AdmissionReview would put an API round trip on every pod creation, so the
webhook keeps every labelled Service's ports, as an informer does:

1. list ``/api/v1/services?labelSelector=<label>`` in pages; the list's
   ``resourceVersion`` is where the watch starts;
2. watch from it with bookmarks; each event replaces or removes one Service;
   when the server ends the watch, watch again from the last version;
3. ``410 Gone`` (HTTP status or ``ERROR`` event): list again;
4. any other failure: keep what is known, back off (full jitter, doubling to
   30 s), list again. The first failure and the recovery are logged once each.

The official ``kubernetes`` client reads the kubeconfig or the pod's service
account and builds the requests; responses are read raw
(``_preload_content=False``) and only each Service's label and ports are kept,
so memory grows with the number of federated Services, not their size.
Lookups (:meth:`LocalShards.ports`) take a lock held only for a dict read.
"""

import contextlib
import json
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3

from feddns.errors import FeddnsError
from feddns.kubeapi import describe_failure, load_configuration, watch_lines
from links.link import MAX_PORT, LinkPort

log = logging.getLogger(__name__)

FEDERATION_LABEL = "federation.feddns.io/name"
"""The label whose value names a shard's federation (the controller's ``selector.label``)."""

PAGE_SIZE = 500


class _Gone(FeddnsError):
    """The watched version is too old (410): list again."""


class _Broken(FeddnsError):
    """The server sent something that is not an event."""


@dataclass(frozen=True, slots=True)
class LocalShard:
    """What is kept of a labelled Service: its federation and its ports, in ``spec.ports`` order."""

    federation: str
    ports: tuple[LinkPort, ...]


@dataclass(frozen=True, slots=True)
class ShardWatchTiming:
    """How the Services are listed and watched, and how failures are backed off from."""

    watch_timeout: int = 300
    """Seconds: the watch's ``timeoutSeconds``, after which the API server ends it and it is opened again."""
    connect_timeout: float = 10.0
    """Seconds to open a connection to the API server."""
    read_slack: float = 30.0
    """Seconds a watch read may wait beyond ``watch_timeout`` before the connection counts as dead."""
    list_timeout: float = 60.0
    """Seconds a read of one page of the list may wait."""
    backoff_initial: float = 0.5
    """Seconds of the first pause after a failure (full jitter: a random part of it), doubled at each failure."""
    backoff_max: float = 30.0
    """Seconds the pause after failures grows to at most."""


def connector(kubeconfig: str | None, context: str | None) -> Callable[[], kubernetes.client.ApiClient]:
    """A function making an API client from ``kubeconfig`` (and ``context``), or the pod's service account.

    The configuration is read once now, so that a bad file raises :class:`ConfigError`
    before anything listens; each call then makes a client from it (urllib3's own
    retries off: the reflector backs off itself).
    """
    configuration = kubernetes.client.Configuration()
    configuration.retries = False
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


class LocalShards:
    """Every Service labelled with ``label`` in the local cluster, kept current by a daemon thread.

    ``connect`` makes an API client (called again after each failure, so that
    credentials are read anew). ``synced`` is set once the first list is in.
    """

    def __init__(self, connect: Callable[[], kubernetes.client.ApiClient], label: str = FEDERATION_LABEL,
                 timing: ShardWatchTiming = ShardWatchTiming()) -> None:
        self.label = label
        self.synced = threading.Event()
        self._connect = connect
        self._timing = timing
        self._lock = threading.Lock()
        self._shards: dict[tuple[str, str], LocalShard] = {}
        self._stop = threading.Event()
        self._response: urllib3.HTTPResponse | None = None
        self._failing = False
        self._just_listed = False
        """Listed, and no event since: a 410 now means the server is confused (do not spin)."""
        self._delay = timing.backoff_initial
        self._thread = threading.Thread(target=self._run, name="links-shards", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop, cutting a blocked read, and wait up to ``timeout`` seconds for the thread."""
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(OSError, RuntimeError, ValueError):  # already released
                response.shutdown()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout)

    @property
    def ready(self) -> bool:
        """True once the first list is in (lookups before that find no shard)."""
        return self.synced.is_set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._shards)

    def ports(self, namespace: str, name: str, federation: str) -> tuple[LinkPort, ...] | None:
        """The ports of the local shard ``namespace/name`` of ``federation``; ``None`` when there is none."""
        with self._lock:
            shard = self._shards.get((namespace, name))
        if shard is None or shard.federation != federation:
            return None
        return shard.ports

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            client = None
            try:
                client = self._connect()
                api = kubernetes.client.CoreV1Api(client)
                version = self._list(api)
                self._just_listed = True
                self._watch(api, version)
            except _Gone:
                log.info("Service watch expired (410); listing again")
                if self._just_listed:
                    self._pause()
            except Exception as exc:  # noqa: BLE001 - any failure means: keep what is known, back off, list again
                if self._stop.is_set():
                    break
                if not self._failing:
                    log.warning("Kubernetes API: %s; keeping %d known shards, retrying",
                                describe_failure(exc), len(self))
                    self._failing = True
                self._pause()
            finally:
                if client is not None:
                    client.close()  # type: ignore[no-untyped-call]

    def _pause(self) -> None:
        self._stop.wait(random.uniform(self._delay / 2, self._delay))
        self._delay = min(self._delay * 2, self._timing.backoff_max)

    def _list(self, api: kubernetes.client.CoreV1Api) -> str:
        shards: dict[tuple[str, str], LocalShard] = {}
        token: str | None = None
        while True:
            page = json.loads(self._open(api, self._timing.list_timeout, limit=PAGE_SIZE, _continue=token).data)
            self._release()
            for item in page.get("items") or []:
                key, shard = shard_of(item, self.label)
                if shard is not None:
                    shards[key] = shard
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
        with self._lock:
            self._shards = shards
        if self._failing or not self.synced.is_set():
            log.info("Kubernetes API: listed %d Services labelled %s", len(shards), self.label)
        self._failing = False
        self._delay = self._timing.backoff_initial
        self.synced.set()
        return str(meta.get("resourceVersion", ""))

    def _watch(self, api: kubernetes.client.CoreV1Api, version: str) -> None:
        while not self._stop.is_set():
            response = self._open(api, self._timing.watch_timeout + self._timing.read_slack, watch=True,
                                  resource_version=version, allow_watch_bookmarks=True,
                                  timeout_seconds=self._timing.watch_timeout)
            try:
                for line in watch_lines(response):
                    version = self._apply(line, version)
            finally:
                self._release()

    def _apply(self, line: bytes, version: str) -> str:
        """Apply one watch event; returns the version to resume from."""
        try:
            event = json.loads(line)
            kind, obj = event["type"], event["object"]
        except (ValueError, KeyError, TypeError) as exc:
            raise _Broken(f"watch sent a line that is not an event: {line[:200]!r}") from exc
        if kind == "ERROR":
            if isinstance(obj, dict) and obj.get("code") == HTTPStatus.GONE:
                raise _Gone()
            raise _Broken(f"watch error: {obj.get('message') if isinstance(obj, dict) else obj}")
        self._just_listed = False
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            key, shard = shard_of(obj, self.label)
            with self._lock:
                if kind == "DELETED" or shard is None:
                    self._shards.pop(key, None)
                else:
                    self._shards[key] = shard
        new_version = ((obj.get("metadata") or {}) if isinstance(obj, dict) else {}).get("resourceVersion")
        return str(new_version) if new_version else version

    def _open(self, api: kubernetes.client.CoreV1Api, read_timeout: float, **params: Any) -> urllib3.HTTPResponse:
        try:
            response: urllib3.HTTPResponse = api.list_service_for_all_namespaces(  # type: ignore[assignment]
                label_selector=self.label, _preload_content=False,
                _request_timeout=(self._timing.connect_timeout, read_timeout),
                **{key: value for key, value in params.items() if value is not None},
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == HTTPStatus.GONE:
                raise _Gone() from exc
            raise
        self._response = response
        if self._stop.is_set():
            self._release()
            raise _Broken("stopping")
        return response

    def _release(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            response.release_conn()
