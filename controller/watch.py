"""List, then watch, one resource of one member cluster (:class:`ResourceWatch`) over the core's reflector.

The protocol itself (paged list, watch with bookmarks from the list's version,
``410 Gone`` -> list again, any other failure -> back off with jitter and list
again, ``stop`` cutting a blocked read) is :class:`feddns.reflector.Reflector`,
shared with the links webhook. This module adds what is the controller's: the
API client of a member cluster (:func:`api_client`, with TCP keep-alive), the
list method of each resource (:func:`list_call`), the cluster and resource in
every log line, the metrics, and the :class:`Sink` that hands decoded objects to
the event loop. docs/controller.md says more.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import kubernetes.client
import kubernetes.config
from kubernetes.utils.keepalive import tcp_keepalive_socket_options

from controller.config import ClusterConfig
from controller.metrics import Metrics
from controller.view import ENDPOINT_SLICES, SERVICE_EXPORTS, SERVICES
from feddns import reflector
from feddns.kubeapi import KEEPALIVE, load_configuration
from feddns.reflector import PAGE_SIZE, Gone, ListCall, WatchFailed, WatchTiming

__all__ = ["PAGE_SIZE", "Gone", "ListCall", "ResourceWatch", "Sink", "Target", "WatchFailed", "api_client", "list_call"]

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Where a :class:`ResourceWatch` delivers, from its thread. Implementations hop to the event loop.

    Objects arrive as the watch's ``shrink`` made them, never as the API's JSON."""

    def listed(self, resource: str, objects: list[Any]) -> None:
        """A complete list of ``resource`` (replaces what was known)."""

    def event(self, resource: str, event_type: str, obj: Any) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED``."""

    def failed(self, resource: str, error: str) -> None:
        """Listing or watching failed; the watch will retry after a backoff."""


@dataclass(frozen=True, slots=True)
class Target:
    """What one :class:`ResourceWatch` lists and watches: ``resource`` of ``cluster``.

    ``label_selector`` narrows the list and watch on the server; an ``optional``
    resource (a CRD that a cluster may not have) that answers 404 counts as
    listed and empty.
    """

    cluster: str
    resource: str
    label_selector: str | None = None
    optional: bool = False


def api_client(cluster: ClusterConfig) -> kubernetes.client.ApiClient:
    """A client for ``cluster``: its kubeconfig and context, or the pod's service
    account when it has no kubeconfig (read as ``feddns links`` reads its own:
    :func:`feddns.kubeapi.load_configuration`, which raises :class:`ConfigError` naming
    the cluster and the file). May run exec credential plugins; called again after each failure, so
    that rotated credentials are read.

    urllib3's own retries are off (the reflector backs off itself), and refreshed
    credentials are not written back to the kubeconfig (it is often a read-only
    mounted Secret)."""
    configuration = kubernetes.client.Configuration()
    configuration.retries = False
    configuration.socket_options = tcp_keepalive_socket_options(*KEEPALIVE)
    load_configuration(kubernetes.config, configuration, cluster.kubeconfig, cluster.context,
                       source=f"kubeconfig of cluster {cluster.name}")
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


class ResourceWatch:
    """Keeps ``sink`` in step with ``target.resource`` of ``target.cluster``, in a daemon thread
    (:class:`feddns.reflector.Reflector`, which says how).

    ``connect`` builds the cluster's API client (called in the thread, again after
    each failure, so that credentials are re-read). ``shrink`` turns each decoded
    object into what the sink keeps, as each list page or event arrives (a Service
    is a few kilobytes of JSON and a hundred bytes shrunk). Each list is logged with
    its count and time (and every :data:`feddns.reflector.PROGRESS_SECONDS` while it
    runs), each failure counted in ``list_failures`` and each watch restart in
    ``watch_restarts``. ``start()``/``stop()``; ``stop`` ends a blocked read at once.
    """

    def __init__(
        self,
        target: Target,
        connect: Callable[[], kubernetes.client.ApiClient],
        sink: Sink,
        metrics: Metrics,
        *,
        timing: WatchTiming | None = None,
        shrink: Callable[[Any], Any] = lambda obj: obj,
    ) -> None:
        self.cluster, self.resource = target.cluster, target.resource
        self._sink, self._metrics = sink, metrics
        source = reflector.ListSource(connect, lambda client: list_call(client, target.resource),
                                  label_selector=target.label_selector, optional=target.optional)
        self._loop = reflector.Reflector(source, self, name=f"watch-{self.cluster}-{self.resource}",
                                         timing=timing, shrink=shrink)

    def start(self) -> None:
        self._loop.start()

    @property
    def alive(self) -> bool:
        """True while the thread runs."""
        return self._loop.alive

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and wait up to ``timeout`` seconds for the thread (0: do not wait)."""
        self._loop.stop(timeout)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread, once stopped."""
        self._loop.join(timeout)

    # -- feddns.reflector.ReflectorSink, called from the thread -------------------------------

    def listing(self, count: int, seconds: float) -> None:
        log.info("cluster %s: listing %s: %d so far (%.0f s)", self.cluster, self.resource, count, seconds)

    def listed(self, objects: list[Any], seconds: float) -> None:
        log.info("cluster %s: listed %d %s in %.1f s", self.cluster, len(objects), self.resource, seconds)
        self._sink.listed(self.resource, objects)

    def event(self, event_type: str, obj: Any) -> None:
        self._sink.event(self.resource, event_type, obj)

    def failed(self, error: str) -> None:
        self._metrics.list_failures.labels(self.cluster).inc()
        self._sink.failed(self.resource, error)

    def restarted(self, reason: str) -> None:
        """Count a watch restart; a watch the server ended at ``timeoutSeconds`` (every
        ``watch_timeout``) is routine and logged at debug level only."""
        log.log(logging.DEBUG if reason == "closed" else logging.INFO, "cluster %s: %s watch restarts (%s)",
                self.cluster, self.resource, reason)
        self._metrics.watch_restarts.labels(self.cluster, self.resource, reason).inc()
