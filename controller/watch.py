"""List, then watch, one resource of one member cluster, in a thread of its own.

The official ``kubernetes`` client is used for what it is good at: reading
kubeconfig files or the in-cluster service account, authentication and TLS,
and building the list/watch requests. Its ``Watch`` helper is not used: it
neither lists first, nor handles ``410 Gone``, nor reconnects, and it turns
every object into a model class, which costs more than the rest of the
controller together at 10,000 Services. Responses are read raw
(``_preload_content=False``) and decoded with ``json`` instead.

The protocol (Kubernetes API concepts, "Efficient detection of changes"):

1. list, in pages of :data:`PAGE_SIZE` (``limit``/``continue``); the list's
   ``metadata.resourceVersion`` is where the watch starts;
2. watch from that version with ``allowWatchBookmarks``; each event, and each
   ``BOOKMARK``, moves the version on; when the server ends the watch
   (``timeoutSeconds``), watch again from the last version;
3. ``410 Gone`` (as the HTTP status or as an ``ERROR`` event with code 410, or
   an expired ``continue`` token): the version is too old, list again;
4. any other failure (connection refused or reset, a 5xx, a line that is not
   JSON): the cluster is unreachable; wait (exponential backoff with jitter)
   and list again.

Blocking reads in threads were chosen over ``kubernetes_asyncio`` and the new
``kubernetes.aio`` so that the one maintained client, with its
authentication plugins, is used as is; the threads only hand decoded objects
to the event loop (:class:`Sink`). docs/controller.md says more.
"""

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol

import kubernetes.client
import kubernetes.config
import urllib3
from kubernetes.utils.keepalive import tcp_keepalive_socket_options

from controller.config import ClusterConfig
from controller.metrics import Metrics
from controller.settings import WatchSettings
from controller.view import ENDPOINT_SLICES, SERVICE_EXPORTS, SERVICES
from feddns.errors import FeddnsError
from feddns.kubeapi import describe_failure, watch_lines

log = logging.getLogger(__name__)

PAGE_SIZE = 500
"""Objects per list page (``limit``), as client-go's reflector uses."""
PROGRESS_SECONDS = 5.0
"""A list that takes longer says how far it got this often (one log line)."""

ListCall = Callable[..., Any]
"""A generated ``list_*`` method of the client, called with ``_preload_content=False``."""


class Gone(FeddnsError):
    """The resource version is too old (410): list again."""


class WatchFailed(FeddnsError):
    """The server sent something other than events (an ``ERROR`` event, a bad line)."""


class Sink(Protocol):
    """Where a reflector delivers, from its thread. Implementations hop to the event loop.

    Objects arrive as the reflector's ``shrink`` made them, never as the API's JSON."""

    def listed(self, resource: str, objects: list[Any]) -> None:
        """A complete list of ``resource`` (replaces what was known)."""

    def event(self, resource: str, event_type: str, obj: Any) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED``."""

    def failed(self, resource: str, error: str) -> None:
        """Listing or watching failed; the reflector will retry after a backoff."""


@dataclass(frozen=True, slots=True)
class Target:
    """What one reflector lists and watches: ``resource`` of ``cluster``.

    ``label_selector`` narrows the list and watch on the server; an ``optional``
    resource (a CRD that a cluster may not have) that answers 404 counts as
    listed and empty.
    """

    cluster: str
    resource: str
    label_selector: str | None = None
    optional: bool = False


KEEPALIVE = (15, 5, 3)
"""TCP keep-alive of the API connections: first probe after 15 s of silence, then every
5 s, 3 unanswered probes end the connection (client-go asks for 30 s, 15 s, 9)."""


def api_client(cluster: ClusterConfig) -> kubernetes.client.ApiClient:
    """A client for ``cluster``: its kubeconfig and context, or the pod's service
    account when it has no kubeconfig. May run exec credential plugins.

    urllib3's own retries are off (the reflector backs off itself), and refreshed
    credentials are not written back to the kubeconfig (it is often a read-only
    mounted Secret)."""
    configuration = kubernetes.client.Configuration()
    configuration.retries = False
    configuration.socket_options = tcp_keepalive_socket_options(*KEEPALIVE)
    if cluster.kubeconfig is None:
        kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=cluster.kubeconfig, context=cluster.context,
            client_configuration=configuration, persist_config=False,
        )
    return kubernetes.client.ApiClient(configuration)


def list_call(client: kubernetes.client.ApiClient, resource: str) -> ListCall:
    """The generated list method of ``resource`` across all namespaces."""
    if resource == SERVICES:
        return kubernetes.client.CoreV1Api(client).list_service_for_all_namespaces
    if resource == ENDPOINT_SLICES:
        return kubernetes.client.DiscoveryV1Api(client).list_endpoint_slice_for_all_namespaces
    if resource == SERVICE_EXPORTS:
        custom = kubernetes.client.CustomObjectsApi(client)
        return lambda **kw: custom.list_cluster_custom_object(
            "multicluster.x-k8s.io", "v1alpha1", "serviceexports", **kw
        )
    raise ValueError(f"unknown resource {resource!r}")


class Reflector:
    """Keeps ``sink`` in step with one resource of one cluster, in a daemon thread.

    ``connect`` builds the API client (called in the thread, again after each
    failure, so that credentials are re-read); ``target.label_selector`` narrows the
    list and watch on the server. ``shrink`` turns each decoded object into what
    the sink keeps, in this thread as each list page or event arrives, so that
    no more than one page of the API's JSON is alive at a time (a Service is a
    few kilobytes of JSON and a hundred bytes shrunk). A ``target.optional`` resource (a CRD that a
    cluster may not have) that answers 404 counts as listed and empty, and is
    looked for again every ``backoff_max`` seconds. ``start()``/``stop()``; ``stop`` ends a
    blocked read at once by shutting its socket.
    """

    def __init__(
        self,
        target: Target,
        connect: Callable[[], kubernetes.client.ApiClient],
        sink: Sink,
        metrics: Metrics,
        *,
        timing: WatchSettings | None = None,
        shrink: Callable[[Any], Any] = lambda obj: obj,
    ) -> None:
        self.cluster, self.resource = target.cluster, target.resource
        self._connect, self._sink, self._metrics = connect, sink, metrics
        self._shrink = shrink
        self._selector = target.label_selector
        self._optional = target.optional
        self._timing = timing = timing or WatchSettings()
        self._stop = threading.Event()
        self._delay = timing.backoff_initial
        self._just_listed = False
        """Listed, and no event or bookmark since: a 410 now means the server is confused."""
        self._response: urllib3.HTTPResponse | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.cluster}-{self.resource}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """True while the thread runs."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and wait up to ``timeout`` seconds for the thread."""
        self._stop.set()
        self._abort_read()
        self._thread.join(timeout)

    def _abort_read(self) -> None:
        response = self._response
        if response is not None:
            with contextlib.suppress(OSError, RuntimeError, ValueError):  # already released or closed
                response.shutdown()

    def _run(self) -> None:
        client: kubernetes.client.ApiClient | None = None
        while not self._stop.is_set():
            try:
                client = client or self._connect()
                call = list_call(client, self.resource)
                version = self._list(call)
                self._watch(call, version)
            except Gone:
                self._restarted("expired")
                if self._just_listed:  # 410 right after a list: do not spin on a confused server
                    self._pause()
            except Exception as exc:  # noqa: BLE001 - any failure means: back off, list again
                if client is not None:
                    client.close()  # type: ignore[no-untyped-call]
                    client = None
                if self._stop.is_set():
                    break
                if self._absent(exc):
                    self._sink.listed(self.resource, [])
                    self._stop.wait(self._timing.backoff_max)
                    continue
                self._metrics.list_failures.labels(self.cluster).inc()
                self._sink.failed(self.resource, describe_failure(exc))
                self._pause()
        if client is not None:
            client.close()  # type: ignore[no-untyped-call]

    def _pause(self) -> None:
        """Wait the backoff delay (full jitter over its upper half), then double it."""
        self._stop.wait(random.uniform(self._delay / 2, self._delay))
        self._delay = min(self._delay * 2, self._timing.backoff_max)

    def _absent(self, exc: Exception) -> bool:
        """An optional resource the cluster does not serve (404): listed and empty."""
        return (self._optional and isinstance(exc, kubernetes.client.ApiException)
                and exc.status == HTTPStatus.NOT_FOUND)

    def _restarted(self, reason: str, quiet: bool = False) -> None:
        """Count a watch restart; a watch the server ended at ``timeoutSeconds`` (every
        ``watch_timeout``) is routine and logged at debug level only."""
        log.log(logging.DEBUG if quiet else logging.INFO, "cluster %s: %s watch restarts (%s)",
                self.cluster, self.resource, reason)
        self._metrics.watch_restarts.labels(self.cluster, self.resource, reason).inc()

    def _list(self, call: ListCall) -> str:
        """List every page; hands the objects to the sink; returns the list's resourceVersion.
        Logs the count and the time it took, and every :data:`PROGRESS_SECONDS` how far it got."""
        objects: list[Any] = []
        token: str | None = None
        started = reported = time.monotonic()
        while True:
            page = self._request(call, limit=PAGE_SIZE, _continue=token)
            items = page.get("items") or []
            if not isinstance(items, list):
                raise WatchFailed("list has no items array")
            objects.extend(map(self._shrink, items))
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
            if time.monotonic() - reported >= PROGRESS_SECONDS:
                reported = time.monotonic()
                log.info("cluster %s: listing %s: %d so far (%.0f s)", self.cluster, self.resource, len(objects),
                         reported - started)
        log.info("cluster %s: listed %d %s in %.1f s", self.cluster, len(objects), self.resource,
                 time.monotonic() - started)
        self._sink.listed(self.resource, objects)
        self._just_listed = True
        return str(meta.get("resourceVersion", ""))

    def _request(self, call: ListCall, **params: Any) -> Any:
        """One non-watch list request; raises :class:`Gone` on 410."""
        response = self._open(call, params, read_timeout=self._timing.list_timeout)
        try:
            return json.loads(response.data)
        finally:
            self._release()

    def _open(self, call: ListCall, params: dict[str, Any], read_timeout: float) -> urllib3.HTTPResponse:
        if self._selector:
            params["label_selector"] = self._selector
        try:
            response: urllib3.HTTPResponse = call(
                **{k: v for k, v in params.items() if v is not None},
                _preload_content=False,
                _request_timeout=(self._timing.connect_timeout, read_timeout),
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == HTTPStatus.GONE:
                raise Gone(str(exc.reason)) from exc
            raise
        self._response = response  # from here on stop() can end a blocked read
        if self._stop.is_set():
            self._release()
            raise WatchFailed("stopping")
        return response

    def _release(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            response.release_conn()

    def _watch(self, call: ListCall, version: str) -> None:
        """Watch from ``version`` until stopped; returns only through an exception or stop."""
        timing = self._timing
        while not self._stop.is_set():
            params = {
                "watch": True,
                "resource_version": version,
                "allow_watch_bookmarks": True,
                "timeout_seconds": timing.watch_timeout,
            }
            response = self._open(call, params, read_timeout=timing.watch_timeout + timing.read_slack)
            try:
                for line in watch_lines(response):
                    version = self._handle(line, version)
            finally:
                self._release()
            if not self._stop.is_set():
                self._restarted("closed", quiet=True)

    def _handle(self, line: bytes, version: str) -> str:
        """Deliver one event line; returns the resourceVersion to resume from."""
        try:
            event = json.loads(line)
            event_type, obj = event["type"], event["object"]
        except (ValueError, KeyError, TypeError) as exc:
            raise WatchFailed(f"watch sent a line that is not an event: {line[:200]!r}") from exc
        if event_type == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else None
            if code == HTTPStatus.GONE:
                raise Gone(str(obj.get("message")))
            raise WatchFailed(f"watch error {code}: {obj.get('message') if isinstance(obj, dict) else obj}")
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        new_version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        self._just_listed = False
        self._delay = self._timing.backoff_initial
        if event_type in ("ADDED", "MODIFIED", "DELETED"):
            self._sink.event(self.resource, event_type, self._shrink(obj))
        elif event_type != "BOOKMARK":
            log.warning("cluster %s: ignoring %s watch event of type %r", self.cluster, self.resource, event_type)
        return str(new_version) if new_version else version
