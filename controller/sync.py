"""The writer: keeps etcd under ``P/F/`` equal to what the member clusters say.

It holds ``known``, the values etcd has under ``P/F/`` as last read or
written, and compares before it puts: a record is written only when its
canonical bytes (:func:`feddns.records.encode`) differ from ``known``.

Three kinds of work, all only while this replica is the leader:

* **flush** — the services the watch streams touched (``touched()``), a few
  milliseconds after the first touch so that a burst is written together;
* **reconcile** — every shard of a cluster whose complete state just became
  known (its first list), compared with ``known``: shards it no longer has are deleted;
* **resync** — on becoming leader and every ``resyncSeconds``: read ``P/F/``
  again and compare everything, deleting the shards and cluster records of
  clusters that are no longer configured. The shards of a configured cluster
  that has never been listed (unreachable since start) are kept, logged and
  counted (``feddns_controller_cluster_kept_shards``);
* **repair** — while leading, ``P/F/`` is watched from the resync's revision:
  a record someone else edits or deletes is compared again at once and put
  back (``feddns_controller_etcd_repairs_total``), not at the next resync.

Writes go through guarded transactions (:mod:`controller.etcdlink`). An etcd
failure leaves the work queued and is retried with backoff; nothing is lost.
The writer and the prefix watch each own their etcd connection.

A service's answer policy must be the same on every shard (docs/reference.md
section 2): when the listed clusters' Services set different policies, every
shard is written with the default policy, and the conflict is logged once (again
when its sides change) and counted once. A change in one cluster can so change the records of the others: when
a service's agreement changes, its shards in every cluster are looked at again.
"""

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, assert_never

import aetcd

from controller import etcdlink, shards
from controller.config import ControllerConfig
from controller.metrics import Metrics
from controller.settings import SyncSettings
from controller.view import ClusterView, Key
from feddns.backoff import Backoff
from feddns.errors import EtcdCompacted, EtcdError, RecordError
from feddns.etcd.client import prefix_range_end
from feddns.etcd.endpoints import unless_changed
from feddns.etcd.failures import cancelled_by_client, describe
from feddns.keys import ClusterKey, ShardKey
from feddns.records import DEFAULT_POLICY, IPAddress, ShardRecord, decode_json, encode

log = logging.getLogger(__name__)

DETAILED_WRITES = 3
"""A write of at most this many keys names each in its info line; a larger one only counts them."""


@dataclass(frozen=True, slots=True)
class Delete:
    """A key etcd holds and the views do not want: a shard of a listed cluster, or any key
    of a cluster no longer configured. It is deleted."""


@dataclass(frozen=True, slots=True)
class KeepShard:
    """A shard of ``cluster``, configured but never listed (unreachable since start): its last
    known state is kept in etcd and counted (``feddns_controller_cluster_kept_shards``)."""

    cluster: str


@dataclass(frozen=True, slots=True)
class LeaveAlone:
    """A key this plan does not judge: outside its scope of clusters, a configured cluster's
    record (written from the config), or a key the controller does not own."""


Disposal = Delete | KeepShard | LeaveAlone
"""What :meth:`Syncer._disposal` decides for a key that etcd holds and the views do not want."""


class Leadership(Protocol):
    """What the writer needs of the elector (:class:`controller.leader.Elector`)."""

    @property
    def is_leader(self) -> bool: ...

    def guard(self) -> etcdlink.Guard: ...

    def lost(self) -> None: ...

    def holds_lease(self) -> bool: ...


class ExternalSink(Protocol):
    """Where the writer hands the external DNS state: the publisher
    (:class:`controller.external.publisher.ExternalPublisher`): ``desired`` maps
    each service to its addresses, ``unready`` the services none of whose shards is ready.

    ``stop()`` is called when this replica stops leading: the publisher drops
    what it was about to send and sends nothing until the next ``resync``."""

    async def publish(self, desired: Mapping[Key, Sequence[IPAddress]], unready: Collection[Key] = ...) -> None: ...

    async def resync(self, desired: Mapping[Key, Sequence[IPAddress]], unready: Collection[Key] = ...) -> None: ...

    def stop(self) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class KeyChange:
    """One key to write: ``new`` is ``None`` for a delete; ``old`` is what etcd held."""

    key: str
    old: bytes | None
    new: bytes | None

    def op(self) -> etcdlink.Op:
        return etcdlink.delete(self.key) if self.new is None else etcdlink.put(self.key, self.new)


class Syncer:
    """The writer; ``run()`` is its task. ``views`` maps each configured cluster to its view."""

    def __init__(
        self,
        config: ControllerConfig,
        views: Mapping[str, ClusterView],
        leadership: Leadership,
        metrics: Metrics,
        new_link: Callable[[], etcdlink.EtcdLink],
        *,
        timing: SyncSettings | None = None,
    ) -> None:
        """``new_link`` makes an etcd connection: one for the writer, one for its prefix watch."""
        self.config, self.views = config, views
        self.link, self.watch_link = new_link(), new_link()
        self.leadership, self.metrics = leadership, metrics
        self.publisher: ExternalSink | None = None
        """Set by the controller before ``run`` when external DNS is configured."""
        self.metrics.resync_period.set(config.resync_seconds)
        self.timing = timing or SyncSettings()
        self.layout = config.layout
        self.prefix = self.layout.federation_prefix(config.federation)
        self.known: dict[str, bytes] | None = None
        self.resynced = False
        """True once a resync completed since this replica last became leader."""
        self.stale: dict[str, bool] = {c.name: False for c in config.clusters}
        """Clusters unreachable for longer than their ``staleAfterSeconds``."""
        self._dirty: set[tuple[str, str, str]] = set()
        self._dirty_clusters: set[str] = set()
        self._reconcile: set[str] = set()
        self._foreign: set[str] = set()
        """Keys another writer changed since we last wrote them (counted when put back)."""
        self._in_flight: dict[str, bytes | None] = {}
        """Keys of the transaction being committed, with the values it writes (``None``: deletes)."""
        self._wake = asyncio.Event()
        self._last_write = -math.inf
        """When the writer last began a write (time.monotonic()); -inf: never."""
        self._next_resync = 0.0
        self._unparsable: set[str] = set()
        self._watch: asyncio.Task[None] | None = None
        self._conflicts: dict[Key, str] = {}
        """Services whose shards set different policies, as last worked out, with what each cluster sets."""
        self._flipped: set[Key] = set()
        """Services whose agreement changed since the last plan (their shards elsewhere change)."""
        self._term: tuple[float, Counter[str], bool] = (time.monotonic(), Counter(), True)
        """Since this replica last became leader: (when, keys written by kind, first sync summarized)."""
        self.unreachable: Callable[[], Collection[str]] = frozenset
        """The clusters whose lists or watches fail now (the controller sets it)."""

    # -- called on the event loop by the controller ------------------------------

    def touched(self, cluster: str, keys: Iterable[Key]) -> None:
        """The shards of ``keys`` in ``cluster`` may have changed."""
        if self.leadership.is_leader:
            self._dirty.update((cluster, ns, svc) for ns, svc in keys)
            self._wake.set()

    def cluster_synced(self, cluster: str) -> None:
        """``cluster`` has been listed completely for the first time: reconcile all its shards."""
        if self.leadership.is_leader:
            self._reconcile.add(cluster)
            self._wake.set()

    def cluster_failed(self, cluster: str) -> None:
        """``cluster``'s list or watch failed: the first sync may now be complete without it."""
        if self.leadership.is_leader and not self._term[2]:
            self._wake.set()

    def set_stale(self, cluster: str, stale: bool) -> None:
        """``cluster`` has been unreachable longer than its ``staleAfterSeconds`` (or is back):
        its cluster record is rewritten with (or without) ``"stale": true``."""
        self.stale[cluster] = stale
        if self.leadership.is_leader:
            self._dirty_clusters.add(cluster)
            self._wake.set()

    def leadership_changed(self, leader: bool) -> None:
        """Elector callback: forget what etcd held; a new leader starts with a resync.
        A replica that stops leading stops its prefix watch and the external publisher."""
        self.known, self.resynced = None, False
        self._term = (time.monotonic(), Counter(), not leader)
        self._dirty.clear()
        self._dirty_clusters.clear()
        self._reconcile.clear()
        self._foreign.clear()
        self._stop_watch()
        if not leader and self.publisher is not None:
            self.publisher.stop()
        self.metrics.leader.set(1 if leader else 0)
        self._wake.set()

    def reconfigured(self) -> None:
        """The controller's config changed (clusters joined or left; ``config`` and the views are the
        new ones already): resync now, which deletes what a cluster that left had in etcd and writes the
        new clusters' records."""
        self.stale = {c.name: self.stale.get(c.name, False) for c in self.config.clusters}
        self._next_resync = 0.0
        self._wake.set()

    async def close(self) -> None:
        """Stop the prefix watch and close the connections."""
        self._stop_watch()
        await self.link.close()
        await self.watch_link.close()

    # -- the task ------------------------------------------------------------------

    async def run(self) -> None:
        """Write what is queued, resync on schedule; forever. Failures are retried with backoff
        (:class:`feddns.backoff.Backoff` from ``retry_initial`` to ``retry_max`` seconds)."""
        backoff = Backoff(self.timing.retry_initial, self.timing.retry_max)
        while True:
            await self._wait()
            if not self.leadership.is_leader:
                continue
            # Leading edge: at once after an idle spell (sleep(0) lets the events already queued join
            # this write), else the rest of the window since the last write began (SyncSettings.debounce).
            await asyncio.sleep(max(0.0, self._last_write + self.timing.debounce - time.monotonic()))
            self._last_write = time.monotonic()
            client = self.link.client
            try:
                await self._work(client)
                self._summarize()
                backoff.reset()
                continue
            except etcdlink.NotLeader as exc:
                log.warning("etcd refused a write: %s; stepping down", exc)
                self.leadership.lost()
                continue
            except EtcdError as exc:
                self.metrics.etcd_errors.inc()
                log.warning("etcd %s: %s; retrying in %.1fs", self.link.endpoints.current, describe(exc),
                            backoff.delay)
                await self.link.failed(client)
            except asyncio.CancelledError as exc:
                if not cancelled_by_client(exc):
                    raise  # the controller is stopping
                self.metrics.etcd_errors.inc()
                log.warning("etcd %s: the call was cancelled by its channel; retrying in %.1fs",
                            self.link.endpoints.current, backoff.delay)
                await self.link.failed(client)
            except Exception:  # a bug must not stop the writer: log it, start again from a resync
                log.exception("writer failed; resyncing in %.1fs", backoff.delay)
                self.known = None
            await backoff.sleep()
            self._wake.set()

    async def _wait(self) -> None:
        timeout = max(0.0, self._next_resync - time.monotonic()) if self.known is not None else None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: see controller.stubzones._sleep
                await self._wake.wait()
        self._wake.clear()

    async def _work(self, client: aetcd.Client) -> None:
        if self.known is None or time.monotonic() >= self._next_resync:
            await self.resync(client)
        elif self._dirty or self._reconcile or self._dirty_clusters:
            await self.flush(client)

    async def resync(self, client: aetcd.Client) -> None:
        """Read ``P/F/`` and make it equal to the configured clusters and their views (leader only)."""
        if not self.leadership.is_leader:
            return
        self.metrics.resyncs.inc()
        self._stop_watch()
        known, revision = await etcdlink.read_prefix(client, self.prefix)
        if not self._leading():
            return  # stepped down during the read
        self.known = known
        self._next_resync = time.monotonic() + self.config.resync_seconds
        self._dirty.clear()
        self._dirty_clusters.clear()
        self._reconcile.clear()
        self._start_watch(self.known, revision)
        await self._apply(client, self._plan(None))
        self._flipped.clear()  # every shard was planned with the agreement as it is now
        self.resynced = True
        self.metrics.last_resync.set(time.time())
        if self.publisher is not None:
            await self.publisher.resync(*self.external_desired())

    def _leading(self) -> bool:
        """``is_leader`` asked anew: a call, so that mypy does not keep its value across an await."""
        return self.leadership.is_leader

    async def flush(self, client: aetcd.Client) -> None:
        """Write the touched shards, the changed cluster records, and reconcile the newly listed clusters."""
        assert self.known is not None
        dirty, self._dirty = self._dirty, set()
        reconcile, self._reconcile = self._reconcile, set()
        clusters, self._dirty_clusters = self._dirty_clusters, set()
        try:
            changes = self._plan(reconcile) if reconcile else []
            done = {d for d in dirty if d[0] not in reconcile}
            changes += self._touched_changes(done)
            changes += self._spread_flips(done, reconcile)
            changes += self._cluster_changes(clusters)
            await self._apply(client, changes)
        except BaseException:
            self._dirty |= dirty
            self._reconcile |= reconcile
            self._dirty_clusters |= clusters
            raise
        if changes and self.publisher is not None:
            await self.publisher.publish(*self.external_desired())

    # -- repair: the watch of P/F/ ---------------------------------------------------------

    def _start_watch(self, known: dict[str, bytes], revision: int) -> None:
        self._stop_watch()
        self._watch = asyncio.get_running_loop().create_task(self._watch_prefix(known, revision + 1),
                                                             name="etcd-prefix-watch")

    def _stop_watch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def _watch_prefix(self, known: dict[str, bytes], start: int) -> None:
        """Watch ``P/F/`` from ``start`` while ``known`` is this leadership's view of etcd;
        reconnect after failures (from the last revision seen), waiting
        :class:`feddns.backoff.Backoff` from ``retry_initial`` to ``retry_max`` seconds, reset once
        the watch is back; a compacted revision means a resync. The loss and the return are
        logged once each. Ends only when cancelled (a new resync, a step-down, shutdown)."""
        raw = self.prefix.encode()
        backoff = Backoff(self.timing.retry_initial, self.timing.retry_max)
        failing = False
        position = [start]
        while known is self.known:
            client = self.watch_link.client  # a new one after a failure, or when the files changed
            try:
                watch = await client.watch(raw, range_end=prefix_range_end(raw), start_revision=position[0])
                if failing:
                    log.info("etcd: watching %s again", self.prefix)
                failing = False
                backoff.reset()
                await unless_changed(self.watch_link.endpoints, client, self._follow(known, watch, position))
                continue
            except EtcdCompacted:
                log.info("etcd: revision %d of %s is compacted; resyncing", position[0], self.prefix)
                self.known = None
                self._wake.set()
                return
            except asyncio.CancelledError as exc:
                if not cancelled_by_client(exc):
                    raise
                error: BaseException = exc
            except Exception as exc:  # noqa: BLE001 - etcd and gRPC failures: reconnect and resume
                error = exc
            if not failing:
                log.warning("etcd %s: watch of %s failed (%s); resuming from revision %d, retrying in at most %.1fs",
                            self.watch_link.endpoints.current, self.prefix, describe(error), position[0],
                            backoff.delay)
            failing = True
            await self.watch_link.failed(client)
            await backoff.sleep()

    async def _follow(self, known: dict[str, bytes], watch: Any, position: list[int]) -> None:
        """Hand each event to :meth:`_foreign_change`; ``position[0]`` is the next revision."""
        async for event in watch:
            position[0] = event.kv.mod_revision + 1
            self._foreign_change(known, event)
        raise ConnectionError("the watch ended")

    def _foreign_change(self, known: dict[str, bytes], event: aetcd.Event) -> None:
        """One event under ``P/F/``: our own writes match ``known``; anything else is
        another writer's, recorded in ``known`` and compared again at once."""
        key = event.kv.key.decode("utf-8", "replace")
        value = event.kv.value if event.kind == aetcd.EventKind.PUT else None
        if known.get(key) == value or self._in_flight.get(key, b"\0not ours") == value:
            return  # our own write (or nothing changed)
        if value is None:
            known.pop(key, None)
        else:
            known[key] = value
        parsed = self._parse(key)
        if parsed is None or parsed.cluster not in self.views:
            return  # not ours to repair now; the next resync deals with unconfigured clusters
        self._foreign.add(key)
        if isinstance(parsed, ShardKey):
            self._dirty.add((parsed.cluster, parsed.namespace, parsed.service))
        else:
            self._dirty_clusters.add(parsed.cluster)
        self._wake.set()

    # -- planning --------------------------------------------------------------------

    def _touched_changes(self, dirty: Iterable[tuple[str, str, str]]) -> list[KeyChange]:
        assert self.known is not None
        changes = []
        for cluster, namespace, service in dirty:
            view = self.views.get(cluster)
            if view is None or not view.synced:
                continue
            key = self.layout.shard_key(ShardKey(self.config.federation, namespace, service, cluster))
            record = self._shard_record(view, (namespace, service))
            new = encode(record) if record is not None else None
            old = self.known.get(key)
            if new != old:
                changes.append(KeyChange(key, old, new))
        return changes

    def _cluster_changes(self, clusters: Iterable[str]) -> list[KeyChange]:
        """The cluster records of ``clusters`` (configured ones) that differ from ``known``."""
        assert self.known is not None
        changes = []
        for cluster in self.config.clusters:
            if cluster.name in clusters:
                key = self.layout.cluster_key(ClusterKey(self.config.federation, cluster.name))
                new, old = encode(cluster.record(self.stale[cluster.name])), self.known.get(key)
                if new != old:
                    changes.append(KeyChange(key, old, new))
        return changes

    def _spread_flips(self, done: set[tuple[str, str, str]], reconciled: set[str]) -> list[KeyChange]:
        """The changes to the shards, in every other cluster, of the services whose
        policy agreement changed while planning (none were planned yet)."""
        flipped, self._flipped = self._flipped, set()
        others = {(cluster, ns, svc) for ns, svc in flipped for cluster in self.views
                  if cluster not in reconciled} - done
        return self._touched_changes(others)

    def _shard_record(self, view: ClusterView, key: Key) -> ShardRecord | None:
        """The record to write for ``key`` in ``view``'s cluster: its own, with the
        default policy when the service's shards set different policies."""
        record = view.shard(key)
        if record is None:
            return None
        if self._agreed(key) or record.policy == DEFAULT_POLICY:  # agreement looked at always: it may have changed
            return record
        return replace(record, policy=DEFAULT_POLICY)

    def _agreed(self, key: Key) -> bool:
        """True when every listed cluster where ``key`` is a shard sets the same policy
        (name and failover order); a change of that is logged once and counted."""
        policies = {}
        for cluster, view in self.views.items():
            policy = view.policy(key) if view.synced else None
            if policy is not None:
                policies[cluster] = policy
        agreed = len({(p.name, p.failover_order) for p in policies.values()}) <= 1
        sides = "" if agreed else ", ".join(f"{cluster}: {shards.describe_policy(p)}"
                                            for cluster, p in sorted(policies.items()))
        before = self._conflicts.get(key)
        if agreed == (before is None) and (agreed or sides == before):
            return agreed
        if agreed:
            self._flipped.add(key)
            del self._conflicts[key]
            log.info("service %s/%s: its shards set the same policy again", *key)
            return agreed
        if before is None:  # a new conflict is counted; one whose sides change is logged again, not counted
            self._flipped.add(key)
            self.metrics.policy_conflicts.inc()
        self._conflicts[key] = sides
        log.warning("service %s/%s: its shards set different policies (%s); writing every shard with the "
                    "default policy (locality)", key[0], key[1], sides)
        return agreed

    def _plan(self, scope: set[str] | None) -> list[KeyChange]:
        """The changes that make ``known`` equal to the views: all of it (``scope`` None,
        cluster records included) or the shards of the clusters in ``scope``."""
        assert self.known is not None
        wanted = self._wanted(scope)
        changes = [KeyChange(key, self.known.get(key), value) for key, value in wanted.items()
                   if self.known.get(key) != value]
        kept: dict[str, int] = {c.name: 0 for c in self.config.clusters}
        for key, old in self.known.items():
            if key in wanted:
                continue
            match self._disposal(key, scope):
                case Delete():
                    changes.append(KeyChange(key, old, None))
                case KeepShard(cluster):
                    kept[cluster] += 1
                case LeaveAlone():
                    pass
                case unexpected:
                    assert_never(unexpected)
        if scope is None:
            self._report_kept(kept)
        return changes

    def _wanted(self, scope: set[str] | None) -> dict[str, bytes]:
        federation = self.config.federation
        wanted: dict[str, bytes] = {}
        for cluster in self.config.clusters:
            if scope is not None and cluster.name not in scope:
                continue
            if scope is None:
                cluster_record = cluster.record(self.stale[cluster.name])
                wanted[self.layout.cluster_key(ClusterKey(federation, cluster.name))] = encode(cluster_record)
            view = self.views[cluster.name]
            if not view.synced:
                continue
            for namespace, service in view.selected:
                record = self._shard_record(view, (namespace, service))
                if record is not None:
                    key = self.layout.shard_key(ShardKey(federation, namespace, service, cluster.name))
                    wanted[key] = encode(record)
        return wanted

    def _disposal(self, key: str, scope: set[str] | None) -> Disposal:
        """What to do with ``key``, which etcd holds and the views do not want (``scope`` as in
        :meth:`_plan`)."""
        parsed = self._parse(key)
        if parsed is None or (scope is not None and parsed.cluster not in scope):
            return LeaveAlone()
        view = self.views.get(parsed.cluster)
        if view is None:
            return Delete() if scope is None else LeaveAlone()  # a cluster no longer configured
        if isinstance(parsed, ClusterKey):
            return LeaveAlone()
        return Delete() if view.synced else KeepShard(parsed.cluster)

    def _parse(self, key: str) -> ShardKey | ClusterKey | None:
        try:
            return self.layout.parse(key)
        except RecordError as exc:
            if key not in self._unparsable:
                self._unparsable.add(key)
                log.warning("etcd holds a key the controller does not own; leaving it: %s", exc)
            return None

    def _report_kept(self, kept: Mapping[str, int]) -> None:
        for cluster, count in kept.items():
            self.metrics.kept_shards.labels(cluster).set(count)
            if count:
                log.warning(
                    "cluster %s has not been listed (unreachable?): keeping its %d shards in etcd "
                    "until it answers", cluster, count,
                )

    # -- writing ---------------------------------------------------------------------

    async def _apply(self, client: aetcd.Client, changes: Sequence[KeyChange]) -> None:
        """Write ``changes`` in guarded transactions, updating ``known`` batch by batch.

        ``known`` is taken once: if leadership changes during a transaction, the
        dict being updated is the old leader's, and is dropped."""
        known = self.known
        assert known is not None
        written: Counter[str] = Counter()
        for start in range(0, len(changes), etcdlink.MAX_TXN_OPS):
            batch = changes[start:start + etcdlink.MAX_TXN_OPS]
            # The prefix watch may see these before commit() returns: they are ours.
            self._in_flight.update((c.key, c.new) for c in batch)
            try:
                await etcdlink.commit(client, self.leadership.guard(), [c.op() for c in batch])
            finally:
                for change in batch:
                    self._in_flight.pop(change.key, None)
            for change in batch:
                written[self._record(known, change)] += 1
        if changes:
            self._term[1].update(written)
            self._report(changes, written)

    def _record(self, known: dict[str, bytes], change: KeyChange) -> str:
        """Apply one committed change to ``known``; returns ``created``, ``changed`` or ``deleted``."""
        if change.new is None:
            known.pop(change.key, None)
            self.metrics.etcd_deletes.inc()
        else:
            known[change.key] = change.new
            self.metrics.etcd_writes.inc()
        if change.key in self._foreign:
            self._foreign.discard(change.key)
            self.metrics.etcd_repairs.inc()
            log.warning("%s (put back: another writer had changed it)", self._describe(change))
        elif log.isEnabledFor(logging.DEBUG):  # describing costs more than the write itself
            log.debug("%s", self._describe(change))
        return "deleted" if change.new is None else "created" if change.old is None else "changed"

    def _report(self, changes: Sequence[KeyChange], written: Counter[str]) -> None:
        """One info line per write to etcd: the counts, and what changed when it is a few keys
        (every key is described at debug level)."""
        counts = ", ".join(f"{written[kind]} {kind}" for kind in ("created", "changed", "deleted") if written[kind])
        detailed = len(changes) <= DETAILED_WRITES
        detail = "; ".join(self._describe(c) for c in changes) if detailed else "each key at debug level"
        log.info("etcd: %d key%s written (%s): %s", len(changes), "" if len(changes) == 1 else "s", counts, detail)

    def _summarize(self) -> None:
        """Once per leadership, when every cluster has been listed or is unreachable: one line
        saying what the first sync did (docs/controller.md, "Logs")."""
        started, written, done = self._term
        if done or not self.resynced or self.known is None or not self.leadership.is_leader:
            return
        unreachable = set(self.unreachable())
        unlisted = [c.name for c in self.config.clusters if not self.views[c.name].synced]
        if any(name not in unreachable for name in unlisted) or self._reconcile:
            return  # a list still in progress, or a listed cluster not written yet
        self._term = (started, written, True)
        shards = sum(1 for key in self.known if isinstance(self._parse(key), ShardKey))
        right = max(0, len(self.known) - written["created"] - written["changed"])
        missing = f" ({', '.join(unlisted)} unreachable: their shards kept)" if unlisted else ""
        log.info("first sync done in %.1f s: %d of %d clusters listed%s; etcd holds %d shards and %d cluster records: "
                 "%d keys created, %d changed, %d deleted, %d already right", time.monotonic() - started,
                 len(self.config.clusters) - len(unlisted), len(self.config.clusters), missing, shards,
                 len(self.known) - shards, written["created"], written["changed"], written["deleted"], right)

    def _describe(self, change: KeyChange) -> str:
        """``shard myns/myservice in foo: externalIP 104.32.64.128 -> 104.32.64.130``."""
        parsed = self._parse(change.key)
        if isinstance(parsed, ClusterKey):
            action = "deleted (not configured)" if change.new is None else f"set to {change.new.decode()}"
            return f"cluster record {parsed.cluster}: {action}"
        assert isinstance(parsed, ShardKey)
        subject = f"shard {parsed.namespace}/{parsed.service} in {parsed.cluster}"
        new, old = _record_of(change.new), _record_of(change.old)
        if new is None:
            return f"{subject}: deleted"
        if change.old is None:
            return f"{subject}: created ({shards.describe(new)})"
        if old is None:
            return f"{subject}: replaced an unreadable value ({shards.describe(new)})"
        return f"{subject}: {shards.describe_change(old, new)}"

    # -- external publisher --------------------------------------------------------------

    def external_desired(self) -> tuple[dict[Key, list[IPAddress]], set[Key]]:
        """What the external publisher publishes (docs/external-dns.md): ``(desired, unready)``.

        ``desired`` maps (namespace, service) to the load-balancer IPs
        (``status.loadBalancer.ingress``) of its ready shards of type LoadBalancer;
        a service none of whose shards is ready is in ``unready``, with the IPs its
        load balancers still have, so that its public name keeps answering them
        rather than turning into NXDOMAIN while Federated-DNS says NODATA. A
        cluster not listed yet contributes the ready shards etcd still holds for it."""
        of_ready: dict[Key, list[IPAddress]] = {}
        of_unready: dict[Key, list[IPAddress]] = {}
        for cluster in self.config.clusters:
            for key, addresses, healthy in self._external_of(cluster.name, self.views[cluster.name]):
                into = (of_ready if healthy else of_unready).setdefault(key, [])
                into.extend(a for a in addresses if a not in into)
        unready = {key for key in of_unready.keys() - of_ready.keys() if of_unready[key]}
        return {**{key: of_unready[key] for key in unready}, **{k: v for k, v in of_ready.items() if v}}, unready

    def _external_of(self, cluster: str, view: ClusterView) -> Iterable[tuple[Key, Sequence[IPAddress], bool]]:
        if view.synced:
            for key in sorted(view.selected):
                addresses, healthy = view.load_balancer_ips(key)
                if addresses:
                    yield key, addresses, healthy
            return
        for etcd_key, value in sorted((self.known or {}).items()):
            parsed = self._parse(etcd_key)
            record = _record_of(value)
            if isinstance(parsed, ShardKey) and parsed.cluster == cluster and record and record.external_ips:
                yield (parsed.namespace, parsed.service), record.external_ips, record.healthy


def _record_of(value: bytes | None) -> ShardRecord | None:
    if value is None:
        return None
    try:
        return ShardRecord.from_json(decode_json(value))
    except RecordError:
        return None

