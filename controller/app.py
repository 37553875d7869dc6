"""The FederatedDNSController: member clusters in, etcd records out.

Design ("DNS Record Creation" of the design document; docs/reference.md sections 4 and 7)::

    watch threads (per cluster x resource)        event loop
    ---------------------------------------        ------------------------------------------
    ResourceWatch: list/watch, 410, backoff -hop->  ClusterView.replace/apply  (shrunk objects)
                                                      |  touched (namespace, service) pairs
                                                      v
                                                    Syncer: compare with etcd, guarded writes
                                                      ^  only while leader
                                                    Elector: etcd lease election

Every replica lists and watches all clusters, so that a new leader has warm
views and writes within the lease TTL; only the leader writes. The leader also
keeps the members' stub zones forwarding to Federated-DNS (:mod:`controller.stubzones`).
With a config file path, each replica reloads the file when it changes
(:meth:`Controller.reconfigure`): clusters join and leave without a restart. The elector,
the writer and the writer's watch of its own prefix each own an etcd
connection, so that a failure of one never cancels a call of another.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes.client
from prometheus_client import CollectorRegistry

from controller import watch
from controller.config import DEFAULT_SIZE_LIMIT, ClusterConfig, ControllerConfig, load_config
from controller.configfiles import ConfigFiles
from controller.etcdlink import EtcdLink
from controller.external.dnsendpoint import DnsEndpointProvider
from controller.external.provider import Provider
from controller.external.publisher import ExternalPublisher
from controller.leader import Elector, election_key
from controller.metrics import Metrics
from controller.settings import Settings
from controller.stubzones import StubZones, follow_service
from controller.sync import ExternalSink, Syncer
from controller.view import SERVICE_EXPORTS, SERVICES, ClusterView
from feddns.errors import ConfigError
from feddns.etcd.endpoints import EtcdEndpoints

log = logging.getLogger(__name__)

class _ClusterSink:
    """A :class:`watch.Sink` for one cluster's watches: hops from the watch thread to the loop.

    :meth:`close` (on the loop) ends its deliveries: what a watch that was told to stop still
    hands over, even when already on its way to the loop, is dropped there. So a cluster watched
    anew under the same name never gets the old watches' late lists in its new view."""

    def __init__(self, controller: "Controller", cluster: str, loop: asyncio.AbstractEventLoop) -> None:
        self._controller, self._cluster, self._loop = controller, cluster, loop
        self._closed = False

    def close(self) -> None:
        """Deliver nothing more (call it on the loop)."""
        self._closed = True

    def _hop(self, method: Callable[..., None], *args: Any) -> None:
        if self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the controller is stopping
            self._loop.call_soon_threadsafe(self._deliver, method, args)

    def _deliver(self, method: Callable[..., None], args: tuple[Any, ...]) -> None:
        if not self._closed:
            method(self._cluster, *args)

    def listed(self, resource: str, objects: list[Any]) -> None:
        self._hop(self._controller.on_listed, resource, objects)

    def event(self, resource: str, event_type: str, obj: Any) -> None:
        self._hop(self._controller.on_event, resource, event_type, obj)

    def failed(self, resource: str, error: str) -> None:
        self._hop(self._controller.on_failed, resource, error)


class Controller:
    """One replica. ``run(stop)`` until ``stop`` is set; ``healthy``/``ready`` for the probes.

    ``settings`` holds the time constants (tests pass faster ones). ``connect``
    builds a cluster's API client (tests and benchmarks keep the default,
    :func:`controller.watch.api_client`, with kubeconfigs pointing at fake API
    servers). ``publisher`` replaces the external DNS publisher that the
    config's ``external`` section would create.
    """

    def __init__(
        self,
        config: ControllerConfig,
        registry: CollectorRegistry,
        *,
        settings: Settings | None = None,
        connect: Callable[[ClusterConfig], kubernetes.client.ApiClient] = watch.api_client,
        name: str | None = None,
        publisher: ExternalSink | None = None,
    ) -> None:
        self.config = config
        self.config_path: str | None = None
        """The config file, re-read while running (``feddns controller`` sets it; tests may not)."""
        self.config_limit = DEFAULT_SIZE_LIMIT
        """The config file's size cap on reload (``--max-config-size``)."""
        self.config_loopback = False
        """Whether ``nameservers`` may be loopback on reload (``--allow-loopback-nameservers``)."""
        self.settings = settings = settings or Settings()
        self.registry = registry
        self.metrics = Metrics(registry)
        self._names: set[str] = {c.name for c in config.clusters}
        """The configured cluster names, one set shared by every view (a failover order may name them)."""
        self.views = {c.name: self._view(c) for c in config.clusters}
        self.elector = Elector(
            self._link(),
            election_key(config.etcd_prefix, config.federation),
            config.lease_seconds,
            self._leadership_changed,
            name=name,
            on_confirm=self.metrics.lease_confirmed.set,
        )
        self.syncer = Syncer(config, self.views, self.elector, self.metrics, self._link, timing=settings.sync)
        self.syncer.unreachable = lambda: {cluster for cluster, broken in self._broken.items() if broken}
        self.stubzones = StubZones(config.federation, config.clusters, self.elector.lease_left, self.metrics,
                                   settings.stubzone, config.resync_seconds)
        if config.nameservers is not None and config.nameservers.addresses:
            self.stubzones.set_nameservers(config.nameservers.addresses)
        self.metrics.lease_seconds.set(config.lease_seconds)
        self._connect = connect
        self._broken: dict[str, set[str]] = {c.name: set() for c in config.clusters}
        self._unreachable_since: dict[str, float | None] = {c.name: time.monotonic() for c in config.clusters}
        """Monotonic time since when each cluster has been unreachable (``None``: reachable);
        a cluster not listed yet counts as unreachable since the start."""
        self._tried: set[str] = set()
        """Clusters listed completely, or failed, at least once since the start (:meth:`ready`)."""
        self._last_error: dict[str, str] = {}
        """Each cluster's last failure, ``resource: error``, for ``/ready``'s body."""
        self._watches: dict[str, list[watch.ResourceWatch]] = {}
        self._sinks: dict[str, _ClusterSink] = {}
        self._cut: list[watch.ResourceWatch] = []
        """Watches of clusters that left or were watched anew: told to stop, not waited for
        (:meth:`_cut_watches`); joined when the controller stops."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._follower: asyncio.Task[None] | None = None
        self._beat = time.monotonic()
        self._publisher_override = publisher
        self._stopping = False
        """Set once ``run`` is stopping: a step-down then is the replica's own."""

    def _view(self, cluster: ClusterConfig) -> ClusterView:
        return ClusterView(cluster.name, self.config.federation, self.config.selector, self.metrics, self._names)

    # -- probes (called from the metrics thread) ------------------------------------

    def _link(self) -> EtcdLink:
        """An etcd connection of its own for one task (the files were checked with the config)."""
        config = self.config
        return EtcdLink(EtcdEndpoints(list(config.etcd_endpoints), config.etcd_timeout, config.etcd_access))

    def healthy(self) -> bool:
        """The event loop ran within the last ``settings.probes.healthy_within`` seconds."""
        return time.monotonic() - self._beat < self.settings.probes.healthy_within

    def ready(self) -> bool:
        """etcd answers (its last call succeeded), as leader the first resync is done, and every
        cluster has been listed once or has failed with an error.

        etcd out of reach makes the replica unready: it can neither write nor take over
        (docs/controller.md, "Probes"); a follower notices at its next campaign, within the
        lease TTL plus a call timeout, a leader at its next keep-alive.

        A cluster that failed does not keep the replica unready: a member out of reach is
        for alerts, not a reason to take the replica out of rotation; ``/ready``'s body
        names it (:meth:`readiness`)."""
        etcd_done = (self.elector.contacted and self.elector.unreachable is None
                     and (not self.elector.is_leader or self.syncer.resynced))
        return etcd_done and len(self._tried) == len(self.views)

    def readiness(self) -> str:
        """``/ready``'s body after ok or not ready: what is not done yet, and the clusters not synced."""
        lines = []
        if not self.elector.contacted:
            lines.append("etcd has not answered yet")
        elif self.elector.unreachable is not None:
            lines.append(f"etcd cannot be reached: {self.elector.unreachable}")
        elif self.elector.is_leader and not self.syncer.resynced:
            lines.append("leading, and the first comparison with etcd is not done yet")
        named = [text for text in map(self._not_synced, self.views) if text]
        if named:
            lines.append(f"clusters not synced: {', '.join(named)}")
        return "\n".join(lines)

    def _not_synced(self, cluster: str) -> str:
        """``bar (not listed yet)``, ``bar (services: <error>)``, or empty when ``cluster`` is synced."""
        if cluster not in self._tried:
            return f"{cluster} (not listed yet)"
        if self._broken[cluster] or not self.views[cluster].synced:
            return f"{cluster} ({self._last_error.get(cluster, 'listing')})"
        return ""

    # -- the run -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Watch, elect and write until ``stop`` is set; then stop the threads and resign."""
        publisher = self._publisher()
        self.syncer.publisher = publisher
        self._loop = asyncio.get_running_loop()
        for cluster in self.config.clusters:
            self._start_watches(cluster)
        self._follow_nameservers()
        tasks = [
            asyncio.create_task(self.elector.run(), name="elector"),
            asyncio.create_task(self.syncer.run(), name="syncer"),
            asyncio.create_task(self._heartbeat(), name="heartbeat"),
            asyncio.create_task(self._check_staleness(), name="staleness"),
            asyncio.create_task(self.stubzones.run(), name="stubzones"),
        ]
        if self.config_path is not None:
            tasks.append(asyncio.create_task(self._watch_config(self.config_path), name="config"))
        try:
            await _until_stopped(stop, tasks)
        finally:
            self._stopping = True
            every = [w for watches in self._watches.values() for w in watches] + self._cut
            self._watches.clear()
            await asyncio.to_thread(_stop_watches, every, WATCHES_STOP_SECONDS)
            if self._follower is not None:
                self._follower.cancel()
                tasks.append(self._follower)
            # The elector ends at its next pause when asked: its calls in flight finish instead
            # of being cancelled (see Elector.stop); whatever has not ended in time is cancelled.
            self.elector.stop()
            await asyncio.wait(tasks[:1], timeout=STOP_GRACE_SECONDS)
            for task in tasks:
                task.cancel()
            if not await _stopped_within(tasks, STOP_GRACE_SECONDS):
                # A gRPC call can ignore its task's cancellation (grpc.aio leaves the call's
                # own task waiting on the channel): closing the channel ends every call on it.
                await self.elector.link.close()
                await _stopped_within(tasks, STOP_GRACE_SECONDS)
            await self.elector.resign()
            if publisher is not None:
                await publisher.close()
            await self.syncer.close()
            await self.elector.link.close()

    def _publisher(self) -> ExternalSink | None:
        if self._publisher_override is not None or self.config.external is None:
            return self._publisher_override
        config = self.config.external
        provider: Provider | None = None
        if config.provider == "dnsendpoint":
            cluster = next(c for c in self.config.clusters if c.name == config.cluster)
            provider = DnsEndpointProvider(config, self.config.federation, lambda: self._connect(cluster))
        return ExternalPublisher(config, self.config.federation, self.registry, timing=self.settings.external,
                                 provider=provider, may_write=self.elector.holds_lease)

    def _start_watches(self, cluster: ClusterConfig) -> None:
        """One list/watch thread per resource of ``cluster``."""
        assert self._loop is not None
        selector = self.config.selector
        label_selector = None if selector.service_exports else f"{selector.label}={self.config.federation}"
        sink = self._sinks[cluster.name] = _ClusterSink(self, cluster.name, self._loop)
        started = self._watches.setdefault(cluster.name, [])
        for resource in self.views[cluster.name].resources:
            target = watch.Target(
                cluster.name,
                resource,
                label_selector=label_selector if resource == SERVICES else None,
                optional=resource == SERVICE_EXPORTS,
            )
            resource_watch = watch.ResourceWatch(
                target,
                lambda cluster=cluster: self._connect(cluster),  # type: ignore[misc]
                sink,
                self.metrics,
                timing=self.settings.watch,
                shrink=self.views[cluster.name].shrinker(resource),
            )
            resource_watch.start()
            started.append(resource_watch)

    def _cut_watches(self, clusters: list[str]) -> None:
        """Stop the watches of ``clusters`` without waiting for their threads (on the loop, at once).

        Each is told to stop, which cuts a blocked read; a request its API server never answers
        ends at the request's own timeout (:class:`feddns.reflector.WatchTiming`), and the thread
        then ends without a word. Their sink is closed first, so nothing they still hand over
        reaches a view. A reload that waited for them would wait that timeout (10 s and more
        with an API server that accepts connections and never answers)."""
        for name in clusters:
            sink = self._sinks.pop(name, None)
            if sink is not None:
                sink.close()
            for resource_watch in self._watches.pop(name, []):
                resource_watch.stop(timeout=0)
                self._cut.append(resource_watch)
        self._cut = [w for w in self._cut if w.alive]

    def _follow_nameservers(self) -> None:
        """(Re)start reading ``nameservers.fromService``'s Service, when the config names one."""
        if self._follower is not None:
            self._follower.cancel()
            self._follower = None
        wanted = self.config.nameservers
        if wanted is None or wanted.from_service is None:
            return
        ref = wanted.from_service
        cluster = next(c for c in self.config.clusters if c.name == ref.cluster)
        self._follower = asyncio.get_running_loop().create_task(
            follow_service(ref, lambda: self._connect(cluster), self.stubzones, self.settings.stubzone.service_poll),
            name="nameservers")

    # -- reloading the config file ------------------------------------------------------

    async def _watch_config(self, path: str) -> None:
        """Load ``path`` again when it or a file it names changes (:class:`ConfigFiles`, polled every
        ``config_poll`` seconds), and apply it when it differs from the config in use; a config that
        does not load or apply is refused (logged once per reason, ``feddns_controller_config_file_stale``
        1) with the old config kept. A refused config is tried again at the next change of any of
        those files, since what it names (a kubeconfig of a Secret volume) may arrive after it."""
        files = ConfigFiles(Path(path), self.settings.stubzone.config_poll)
        refused: str | None = None
        while True:
            await files.changed()
            try:
                new = await asyncio.to_thread(load_config, path, self.config_limit, loopback=self.config_loopback)
                in_use = new == self.config  # a file named changed, or only the text: nothing to apply
                if not in_use:
                    await self.reconfigure(new)
            except Exception as exc:  # noqa: BLE001 - ConfigError, or a file no check foresaw: never fatal
                self.metrics.config_refused.set(1)
                reason = str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
                if reason != refused:
                    log.error("config file changed but is refused, keeping the config in use: %s", reason)
                refused = reason
                continue
            if refused is not None and in_use:
                log.info("config file is the one in use again")
            refused = None
            self.metrics.config_refused.set(0)

    async def reconfigure(self, new: ControllerConfig) -> None:
        """Apply a reloaded config without a restart (docs/controller.md, "Reloading the config").

        Clusters join (their views and watches start; the leader programs their stub zone) and leave
        (their watches stop; the leader's resync deletes their shards and cluster record and their stub
        zone), a cluster whose kubeconfig or context changed is watched anew, and the other clusters'
        views, the leadership and the shards are untouched. ``nameservers`` and each member's
        ``stubzone`` change live too. Raises :class:`ConfigError` for a change that needs a restart
        (the federation, etcd, the lease, the selector, ``external``, ``resyncSeconds``).
        """
        old = self.config
        fixed = ("federation", "etcd_endpoints", "etcd_prefix", "etcd_access", "lease_seconds", "selector",
                 "external", "resync_seconds")
        changed = [name for name in fixed if getattr(old, name) != getattr(new, name)]
        if changed:
            raise ConfigError(f"changing {', '.join(changed)} needs a restart of the controller")
        before = {c.name: c for c in old.clusters}
        after = {c.name: c for c in new.clusters}
        rewatch = [n for n in before if n in after and (before[n].kubeconfig, before[n].context)
                   != (after[n].kubeconfig, after[n].context)]
        leaving = [n for n in before if n not in after]
        joining = [n for n in after if n not in before]
        self._cut_watches(leaving + rewatch)
        unreachable_since = {name: self._unreachable_since.get(name) for name in rewatch}
        for name in leaving + rewatch:
            self._forget(name)
        self.config = self.syncer.config = new
        self._names.clear()
        self._names.update(after)
        for name in joining + rewatch:
            self._add(after[name])
        for name, since in unreachable_since.items():  # a stale cluster stays stale while it is watched anew
            self._unreachable_since[name] = since
        self.syncer.reconfigured()
        self.stubzones.configure(new.clusters)
        follows = new.nameservers.from_service.cluster if new.nameservers and new.nameservers.from_service else None
        if new.nameservers != old.nameservers or follows in rewatch:
            if new.nameservers is not None and new.nameservers.addresses:
                self.stubzones.set_nameservers(new.nameservers.addresses)
            elif new.nameservers is None:
                self.stubzones.set_nameservers(None)
            self._follow_nameservers()  # a cluster watched anew: the follower reads with its new kubeconfig
        log.info("config reloaded: %d clusters (joined: %s; left: %s; watched anew: %s)", len(new.clusters),
                 ", ".join(joining) or "none", ", ".join(leaving) or "none", ", ".join(rewatch) or "none")

    def _forget(self, name: str) -> None:
        for state in (self.views, self._broken, self._unreachable_since, self._last_error):
            state.pop(name, None)
        self._tried.discard(name)
        for gauge in (self.metrics.connected, self.metrics.stale, self.metrics.kept_shards):
            with contextlib.suppress(KeyError):
                gauge.remove(name)

    def _add(self, cluster: ClusterConfig) -> None:
        self.views[cluster.name] = self._view(cluster)
        self._broken[cluster.name] = set()
        self._unreachable_since[cluster.name] = time.monotonic()
        self._start_watches(cluster)

    async def _heartbeat(self) -> None:
        while True:
            self._beat = time.monotonic()
            await asyncio.sleep(self.settings.probes.heartbeat)

    async def _check_staleness(self) -> None:
        """Mark a cluster stale once it has been unreachable for its ``staleAfterSeconds``
        (docs/reference.md sections 2 and 7); the flag is cleared when it answers again."""
        while True:
            now = time.monotonic()
            for cluster in self.config.clusters:
                since = self._unreachable_since.get(cluster.name)
                stale = cluster.stale_after is not None and since is not None and now - since >= cluster.stale_after
                if stale != self.syncer.stale[cluster.name]:
                    self._mark_stale(cluster, stale, now - since if since is not None else 0.0)
            await asyncio.sleep(self.settings.probes.stale_check)

    def _mark_stale(self, cluster: ClusterConfig, stale: bool, unreachable_for: float) -> None:
        self.metrics.stale.labels(cluster.name).set(1 if stale else 0)
        self.syncer.set_stale(cluster.name, stale)
        if stale:
            log.warning("cluster %s unreachable for %.0fs (staleAfterSeconds %g): its shards are marked stale "
                        "(staleAction %s)", cluster.name, unreachable_for, cluster.stale_after, cluster.stale_action)
        else:
            log.info("cluster %s: reachable again; its shards are no longer stale", cluster.name)

    def _leadership_changed(self, leader: bool) -> None:
        if leader:
            log.info("leading: this replica writes to etcd")
        elif self._stopping:
            log.info("stepping down: stopping (lease revoked, so another replica takes over at once)")
        else:
            log.info("stepping down: this replica no longer writes to etcd")
        self.syncer.leadership_changed(leader)
        self.stubzones.leadership_changed(leader)

    # -- from the watch threads, on the loop -------------------------------------------

    def on_listed(self, cluster: str, resource: str, objects: list[Any]) -> None:
        view = self.views.get(cluster)
        if view is None:
            return  # a cluster that just left: its thread was stopping
        was_synced = view.synced
        touched = view.replace(resource, objects)  # the resource watch logged the list
        if view.synced and not was_synced:
            self.syncer.cluster_synced(cluster)
        elif view.synced:
            self.syncer.touched(cluster, touched)
        self._set_broken(cluster, resource, None)
        if view.synced:
            self._tried.add(cluster)
            self.metrics.last_sync.labels(cluster).set(time.time())

    def on_event(self, cluster: str, resource: str, event_type: str, obj: Any) -> None:
        view = self.views.get(cluster)
        if view is None:
            return
        touched = view.apply(resource, event_type, obj)
        if view.synced:
            self.syncer.touched(cluster, touched)

    def on_failed(self, cluster: str, resource: str, error: str) -> None:
        if cluster not in self.views:
            return
        self._tried.add(cluster)
        self._last_error[cluster] = f"{resource}: {error}"
        self._set_broken(cluster, resource, error)
        self.syncer.cluster_failed(cluster)

    def _set_broken(self, cluster: str, resource: str, error: str | None) -> None:
        broken = self._broken[cluster]
        was_connected = not broken
        (broken.add if error else broken.discard)(resource)
        view = self.views[cluster]
        connected = not broken and view.synced
        self.metrics.connected.labels(cluster).set(1 if connected else 0)
        if connected:
            self._unreachable_since[cluster] = None
        elif self._unreachable_since[cluster] is None:
            self._unreachable_since[cluster] = time.monotonic()
        if error and was_connected:
            shards = f"its {len(view.selected)}" if view.synced else "its last known"
            log.warning(
                "cluster %s unreachable (%s %s): keeping %s shards in etcd until it answers again",
                cluster, resource, error, shards,
            )
        elif error:
            log.debug("cluster %s: %s still failing: %s", cluster, resource, error)
        elif not was_connected and not broken:
            log.info("cluster %s: reachable again", cluster)


WATCHES_STOP_SECONDS = 5.0
"""Seconds the controller waits, in all, for its watch threads to end when it stops."""


def _stop_watches(watches: list[watch.ResourceWatch], within: float) -> None:
    """Tell every watch to stop, then wait for their threads, ``within`` seconds in all (blocking:
    call it in a worker thread). Told all at once, the threads end together, so that a cluster
    whose API server never answers holds the stop up once, not once per resource."""
    for resource_watch in watches:
        resource_watch.stop(timeout=0)
    deadline = time.monotonic() + within
    for resource_watch in watches:
        resource_watch.join(max(0.0, deadline - time.monotonic()))


STOP_GRACE_SECONDS = 5.0
"""How long the controller's stop waits for its cancelled tasks before it closes their etcd
channel under them, and again after that, before it gives up on them (seconds)."""


async def _stopped_within(tasks: list["asyncio.Task[None]"], seconds: float) -> bool:
    """Wait up to ``seconds`` for cancelled ``tasks`` to end; False (and one warning naming the
    tasks still running) when some have not. Their exceptions are retrieved, not raised."""
    if not tasks:
        return True
    done, pending = await asyncio.wait(tasks, timeout=seconds)
    for task in done:
        if not task.cancelled():
            task.exception()
    if pending:
        log.warning("stopping: %s still running %g s after cancellation",
                    ", ".join(sorted(task.get_name() for task in pending)), seconds)
    return not pending


async def _until_stopped(stop: asyncio.Event, tasks: list["asyncio.Task[None]"]) -> None:
    """Wait for ``stop``; a task that ends early (a bug) is re-raised."""
    stopper = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    for task in done:
        if task is not stopper:
            task.result()
            raise RuntimeError(f"task {task.get_name()} ended unexpectedly")
