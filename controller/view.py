"""The in-memory view of one member cluster, kept by its list/watch streams.

A :class:`ClusterView` holds the cluster's Services, EndpointSlices and (with
``serviceExports``) ServiceExports, each shrunk by :mod:`controller.shards` in the
watch thread that read it (:meth:`ClusterView.shrinker`).
Every change returns the federated services it touched, ``(namespace,
service)`` pairs, so that the writer looks at those shards only. The view lives
on the controller's event loop; the watch threads hand it objects through
``call_soon_threadsafe``, so it needs no lock.
"""

import logging
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from typing import Any

from controller import shards
from controller.config import SelectorConfig
from controller.metrics import Metrics
from feddns.records import MAX_ENDPOINTS, IPAddress, Policy, ShardRecord

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""``(namespace, name)``."""

SERVICES = "services"
ENDPOINT_SLICES = "endpointslices"
SERVICE_EXPORTS = "serviceexports"


class ClusterView:
    """What cluster ``cluster`` says about the federated services of ``federation``.

    ``synced`` is true once every resource has been listed; until then the
    view must not be taken as the cluster's state (an unlisted cluster keeps
    its shards in etcd). ``clusters`` are the configured cluster names (what a
    failover order may name).
    """

    def __init__(self, cluster: str, federation: str, selector: SelectorConfig, metrics: Metrics,
                 clusters: AbstractSet[str] = frozenset()) -> None:
        self.cluster = cluster
        self.federation = federation
        self.selector = selector
        self.metrics = metrics
        self.resources: tuple[str, ...] = (SERVICES, ENDPOINT_SLICES) + (
            (SERVICE_EXPORTS,) if selector.service_exports else ()
        )
        self.listed: set[str] = set()
        self.services: dict[Key, shards.ServiceInfo] = {}
        self.slices: dict[Key, shards.SliceInfo] = {}
        self.slices_by_service: dict[Key, dict[str, shards.SliceInfo]] = {}
        self.exports: set[Key] = set()
        self.selected: set[Key] = set()
        """Federated services of this cluster that are shards (labelled or exported, not skipped)."""
        self._skips: dict[Key, shards.Skip] = {}
        self._policy_problems: dict[Key, str] = {}
        self._trimmed: dict[Key, int] = {}
        self._shrink: dict[str, Callable[[Any], Any]] = {
            SERVICES: lambda obj: shards.service_info(obj, federation, selector.label, clusters),
            ENDPOINT_SLICES: shards.slice_info,
            SERVICE_EXPORTS: lambda obj: True,
        }

    @property
    def synced(self) -> bool:
        """True once every resource has been listed at least once."""
        return self.listed.issuperset(self.resources)

    def shrinker(self, resource: str) -> Callable[[Any], tuple[Key | None, Any]]:
        """What the watch thread of ``resource`` applies to each decoded object: its key
        and its shrunk form; ``(key, None)`` when only the key could be read, ``(None,
        None)`` when not even that (logged and counted here; thread-safe)."""
        return lambda obj: self._parse(resource, obj)

    def replace(self, resource: str, objects: Iterable[tuple[Key | None, Any]]) -> set[Key]:
        """Take a complete list of ``resource`` (shrunk objects); returns the services
        whose shard may have changed."""
        fresh = {key: info for key, info in objects if key is not None and info is not None}
        touched: set[Key] = set()
        for key in self._store(resource).keys() - fresh.keys():
            touched |= self._put(resource, key, None)
        for key, info in fresh.items():
            touched |= self._put(resource, key, info)
        self.listed.add(resource)
        return self._refresh(touched)

    def apply(self, resource: str, event_type: str, obj: tuple[Key | None, Any]) -> set[Key]:
        """Apply one watch event (``ADDED``, ``MODIFIED``, ``DELETED``) of a shrunk object;
        returns the services touched."""
        key, info = obj
        if key is None:
            return set()
        return self._refresh(self._put(resource, key, None if event_type == "DELETED" else info))

    def shard(self, key: Key) -> ShardRecord | None:
        """The shard record of service ``key`` in this cluster, or ``None`` when it is not a shard.

        A headless shard with more ready endpoints than a record keeps is trimmed;
        that is logged once (and counted) when it starts."""
        if key not in self.selected:
            return None
        record, beyond = shards.shard_record(self.services[key], self.slices_by_service.get(key, {}).values())
        if beyond and key not in self._trimmed:
            log.warning("shard %s/%s in %s: %d ready endpoints; keeping the first %d (by address)", key[0], key[1],
                        self.cluster, beyond + MAX_ENDPOINTS, MAX_ENDPOINTS)
            self.metrics.trimmed.labels(self.cluster).inc()
        if beyond:
            self._trimmed[key] = beyond
        else:
            self._trimmed.pop(key, None)
        return record

    def policy(self, key: Key) -> Policy | None:
        """The answer policy service ``key``'s annotations set in this cluster (the
        default when they are bad), or ``None`` when it is not a shard here."""
        if key not in self.selected:
            return None
        record = self.services[key].record
        return record.policy if record is not None else None

    def load_balancer_ips(self, key: Key) -> tuple[tuple[IPAddress, ...], bool]:
        """``(ingress IPs, ready)`` of ``key`` when it is a shard of type LoadBalancer
        (``status.loadBalancer.ingress[].ip``, never ``spec.externalIPs``; ``ready``:
        the shard has a ready endpoint), else ``((), False)``."""
        record = self.shard(key)
        if record is None or not self.services[key].load_balancer:
            return (), False
        return self.services[key].ingress_ips, record.healthy

    def _store(self, resource: str) -> dict[Key, Any]:
        if resource == SERVICES:
            return self.services
        if resource == ENDPOINT_SLICES:
            return self.slices
        return dict.fromkeys(self.exports, True)

    def _parse(self, resource: str, obj: Any) -> tuple[Key | None, Any]:
        """``(key, shrunk object)``; ``(key, None)`` when only the key could be read."""
        try:
            key = shards.object_key(obj)
        except shards.ShapeError as exc:
            self._malformed(resource, "?", exc)
            return None, None
        try:
            return key, self._shrink[resource](obj)
        except shards.ShapeError as exc:
            self._malformed(resource, f"{key[0]}/{key[1]}", exc)
            return key, None

    def _malformed(self, resource: str, name: str, exc: Exception) -> None:
        log.warning("cluster %s: skipping %s %s: %s", self.cluster, resource, name, exc)
        self.metrics.skipped_objects.labels(self.cluster, resource).inc()

    def _put(self, resource: str, key: Key, info: Any) -> set[Key]:
        """Store (``info``) or drop (``None``) one object; returns the services it touches."""
        if resource == SERVICES:
            if info is None:
                self.services.pop(key, None)
            else:
                self.services[key] = info
            return {key}
        if resource == SERVICE_EXPORTS:
            (self.exports.add if info is not None else self.exports.discard)(key)
            return {key}
        return self._put_slice(key, info)

    def _put_slice(self, key: Key, info: shards.SliceInfo | None) -> set[Key]:
        touched = set()
        old = self.slices.pop(key, None)
        if old is not None and old.service is not None:
            owner = (old.namespace, old.service)
            self.slices_by_service.get(owner, {}).pop(old.name, None)
            touched.add(owner)
        if info is not None:
            self.slices[key] = info
            if info.service is not None:
                owner = (info.namespace, info.service)
                self.slices_by_service.setdefault(owner, {})[info.name] = info
                touched.add(owner)
        return touched

    def _refresh(self, keys: set[Key]) -> set[Key]:
        """Recompute which of ``keys`` are shards, log new skip reasons, update the gauge."""
        for key in keys:
            info = self.services.get(key)
            wanted = info is not None and (info.labelled or key in self.exports)
            if wanted and info is not None and info.skip is not None:
                self._note_skip(key, info.skip)
            else:
                self._skips.pop(key, None)
            if wanted and info is not None and info.record is not None:
                self.selected.add(key)
                self._note_policy(key, info.policy_problem)
            else:
                self.selected.discard(key)
                self._policy_problems.pop(key, None)
                self._trimmed.pop(key, None)
            if not self.slices_by_service.get(key):
                self.slices_by_service.pop(key, None)
        self.metrics.services.labels(self.cluster).set(len(self.selected))
        return keys

    def _note_policy(self, key: Key, problem: str | None) -> None:
        """Log a bad policy annotation once per Service and reason, and count it."""
        if problem is None:
            self._policy_problems.pop(key, None)
            return
        if self._policy_problems.get(key) == problem:
            return
        self._policy_problems[key] = problem
        log.warning("shard %s/%s in %s: %s; writing it with the default policy (locality)", key[0], key[1],
                    self.cluster, problem)
        self.metrics.bad_annotations.labels(self.cluster).inc()

    def _note_skip(self, key: Key, skip: shards.Skip) -> None:
        if self._skips.get(key) == skip:
            return
        self._skips[key] = skip
        log.info("shard %s/%s in %s: skipped: %s", key[0], key[1], self.cluster, skip.message)
        self.metrics.skipped.labels(self.cluster, skip.code).inc()
