"""The reconciliation: keeps the provider's names equal to the desired LoadBalancer IPs.

The caller hands :class:`ExternalPublisher` the full desired state; a task of
its own sends one change per service whose RRsets differ from what it last saw
on the server, and retries failures with exponential backoff, so a down
provider never blocks the caller (the design is in :mod:`controller.external`).
"""

import asyncio
import ipaddress
import logging
from collections.abc import Callable, Collection, Mapping, Sequence

import dns.exception
import dns.name
from prometheus_client import CollectorRegistry

from controller.external.config import ExternalConfig
from controller.external.metrics import PublisherMetrics
from controller.external.provider import (
    UNREADY_MARK,
    NameChange,
    NameState,
    PrerequisiteFailed,
    Provider,
    ProviderError,
    TransferRefused,
    marker,
)
from controller.external.rfc2136 import Rfc2136Provider
from controller.settings import ExternalSettings
from feddns.backoff import Backoff
from feddns.records import IPAddress, parse_ip

# The logger keeps the name it had before the package split: it is in every log line.
log = logging.getLogger("controller.external")

ServiceKey = tuple[str, str]  # (namespace, service)
Desired = Mapping[ServiceKey, Sequence[IPAddress]]
SERVICE_NAME_LABELS = 2
"""An owner name below ``<federation>.svc.<zone>`` has two labels: service and namespace."""


def _address(address: IPAddress | str) -> IPAddress:
    """``address`` as an ipaddress object (already one: as is; parsing costs ~10 us)."""
    if isinstance(address, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return address
    parsed = parse_ip(address)
    if parsed is None:
        raise ValueError(f"{address!r} is not an IP address")
    return parsed


class ExternalPublisher:
    """Keeps the provider's A/AAAA RRsets equal to the desired LoadBalancer IPs.

    The controller calls :meth:`resync` at start and every resync period,
    :meth:`publish` after changes, :meth:`stop` when this replica stops leading,
    and :meth:`close` at shutdown. Neither call waits for the provider: the work
    runs in one task that this object owns, one change at a time.
    ``provider`` defaults to the RFC 2136 provider built from ``config``.

    ``may_write`` is asked before every change sent and every zone read: the
    leader's "I still hold the lease" (``controller.leader.Elector.holds_lease``),
    so that a replica paused or cut off past its lease sends nothing, even
    before it has noticed that it lost leadership. Unlike etcd writes, the
    provider cannot check the lease itself.
    """

    def __init__(self, config: ExternalConfig, federation: str, registry: CollectorRegistry, *,
                 timing: ExternalSettings | None = None, provider: Provider | None = None,
                 may_write: Callable[[], bool] = lambda: True) -> None:
        timing = timing or ExternalSettings()
        if provider is None:
            if config.provider != "rfc2136":
                raise ValueError(f"provider {config.provider} needs its Provider object")
            provider = Rfc2136Provider(config, timeout=timing.timeout)
        self._provider = provider
        self._config = config
        self._federation = federation
        self._timing = timing
        self._metrics = PublisherMetrics(registry)
        self._suffix = dns.name.from_text(f"{federation}.svc.{config.zone}")
        self._desired: dict[dns.name.Name, frozenset[IPAddress]] = {}
        self._unready: frozenset[dns.name.Name] = frozenset()
        self._name_cache: dict[ServiceKey, dns.name.Name | None] = {}
        self._owned: dict[dns.name.Name, NameState] = {}
        self._foreign: set[dns.name.Name] = set()
        self._read_zone = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._may_write = may_write
        self._holding_back = False

    # -- the interface --

    async def publish(self, desired: Desired, unready: Collection[ServiceKey] = frozenset()) -> None:
        """Make ``desired`` the state to publish and return at once.

        ``desired`` maps ``(namespace, service)`` to the load-balancer IPs
        (``status.loadBalancer.ingress``) of its ready shards of type
        LoadBalancer, for every such service (the full state, not a delta); for
        a service in ``unready`` no shard is ready, and its addresses are those its
        shards' load balancers still have. A service with no address, or absent,
        gets no name; owned names not in ``desired`` are deleted.
        """
        self._set(desired, unready)
        self._kick()

    async def resync(self, desired: Desired, unready: Collection[ServiceKey] = frozenset()) -> None:
        """Like :meth:`publish`, and first read the zone again (AXFR) to learn the owned names.

        Names that an earlier run created and nobody wants any more are deleted;
        names found without our marker are looked at again.
        """
        self._set(desired, unready)
        self._read_zone = True
        self._kick()

    def stop(self) -> None:
        """Stop publishing now (this replica no longer leads): the task ends, what was
        desired and what was learned of the zone are forgotten, and nothing is sent
        until the next :meth:`resync`."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._desired, self._owned, self._read_zone = {}, {}, False
        self._unready = frozenset()
        self._foreign.clear()
        self._wake.clear()
        self._update_gauges()
        log.info("external DNS: stopped (not the leader)")

    async def close(self) -> None:
        """Stop the task (an update in flight is abandoned; the next run's resync repairs)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    # -- the state --

    def _set(self, desired: Desired, unready: Collection[ServiceKey]) -> None:
        self._desired = self._names(desired)
        self._unready = frozenset(name for key in unready if (name := self._name_cache.get(key)) is not None)

    def _names(self, desired: Desired) -> dict[dns.name.Name, frozenset[IPAddress]]:
        """``desired`` keyed by owner name, services without addresses left out."""
        names, cache = {}, {}
        for key, addresses in desired.items():
            name = cache[key] = self._name_cache[key] if key in self._name_cache else self._owner_name(*key)
            if addresses and name is not None:
                names[name] = frozenset(_address(address) for address in addresses)
        self._name_cache = cache  # only the services of this call: no growth with churn
        return names

    def _owner_name(self, namespace: str, service: str) -> dns.name.Name | None:
        try:
            return dns.name.from_text(service, dns.name.from_text(namespace, self._suffix))
        except dns.exception.DNSException as exc:
            log.warning("external DNS: cannot publish %s/%s: %s", namespace, service, exc)
            return None

    def _owns(self, state: NameState, name: dns.name.Name) -> bool:
        """True when ``state`` carries the ownership TXT of ``name``."""
        return (self._marker(name),) in state.txt

    def _marker(self, name: dns.name.Name) -> str | None:
        """The marker ``name`` would carry, ``None`` for a name no service has."""
        labels = name.relativize(self._suffix).labels if name.is_subdomain(self._suffix) else ()
        if len(labels) != SERVICE_NAME_LABELS or name == self._suffix:
            return None
        service, namespace = (label.decode("ascii", "replace") for label in labels)
        return marker(self._federation, namespace, service)

    def _dirty(self) -> list[dns.name.Name]:
        """Names to change: wanted and not as wanted, or owned and not wanted."""
        wanted = [name for name, addresses in self._desired.items() if name not in self._foreign
                  and (name not in self._owned or not self._matches(self._owned[name], addresses, name))]
        unwanted = [name for name in self._owned if name not in self._desired]
        return wanted + unwanted

    def _matches(self, state: NameState, addresses: frozenset[IPAddress], name: dns.name.Name) -> bool:
        marked = (UNREADY_MARK,) in state.txt
        return state.addresses == addresses and state.ttl == self._config.ttl and marked == (name in self._unready)

    def _kick(self) -> None:
        self._update_gauges()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="feddns-external-publisher")
        self._wake.set()

    def _update_gauges(self) -> None:
        self._metrics.owned.set(len(self._owned))
        self._metrics.unready.set(sum(1 for state in self._owned.values() if (UNREADY_MARK,) in state.txt))
        self._metrics.pending.set(len(self._dirty()))
        self._metrics.conflicts.set(len(self._foreign & self._desired.keys()))

    # -- the task --

    async def _run(self) -> None:
        """Run passes until nothing is left to do; after a failed pass back off and retry
        (:class:`feddns.backoff.Backoff` from ``timing.first`` to ``timing.maximum`` seconds)."""
        backoff = Backoff(self._timing.first, self._timing.maximum)
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._allowed():
                await asyncio.sleep(self._timing.hold_back)
                self._wake.set()
                continue
            if await self._pass():
                backoff.reset()
                continue
            self._metrics.retries.inc()
            self._wake.set()
            await backoff.sleep()

    async def _pass(self) -> bool:
        """Bring the provider to the desired state once; False when something failed."""
        try:
            if self._read_zone:
                await self._read_owned()
            ok = True
            for name in sorted(self._dirty()):  # in name order: predictable logs
                if not self._allowed():
                    self._wake.set()  # held back: look again soon, no failure counted
                    return ok
                ok = await self._sync(name) and ok
            self._report(ok)
            return ok
        except ProviderError as exc:
            self._fail(exc)
            return False
        except Exception:  # a bug here must not end publishing for good
            log.log(logging.DEBUG if self._failing else logging.ERROR, "external DNS: unexpected error; will retry",
                    exc_info=True)
            self._failing = True
            return False
        finally:
            self._update_gauges()

    async def _read_owned(self) -> None:
        """Learn the owned names (and what they hold) from the zone itself."""
        try:
            names = await self._provider.read_names(self._suffix)
        except TransferRefused as exc:
            self._read_zone = False
            self._metrics.failures.labels(exc.reason).inc()
            log.warning("external DNS: %s; names created by an earlier run cannot be cleaned up", exc)
            return
        self._owned = {name: state for name, state in names.items() if self._owns(state, name)}
        self._foreign.clear()
        self._read_zone = False
        self._metrics.zone_reads.inc()

    async def _sync(self, name: dns.name.Name) -> bool:
        """Send the change of one name; on a prerequisite failure look again and retry once.

        Returns False when the provider refused it; raises :class:`ProviderError`
        when the whole server is failing.
        """
        try:
            try:
                await self._apply(name)
            except PrerequisiteFailed:
                self._adopt(name, await self._provider.lookup(name))
                if name in self._dirty():
                    await self._apply(name)
            return True
        except ProviderError as exc:
            if exc.whole_server:
                raise
            self._fail(exc, name)
            return False

    async def _apply(self, name: dns.name.Name) -> None:
        addresses = self._desired.get(name, frozenset())
        prior = self._owned.get(name)
        mark = self._marker(name)
        assert mark is not None, name
        unready = name in self._unready
        await self._provider.apply(NameChange(name, prior, addresses, self._config.ttl, mark, unready))
        self._metrics.updates.inc()
        if addresses:
            txt = ((prior.txt if prior else frozenset()) - {(UNREADY_MARK,)}) | {(mark,)} | (
                {(UNREADY_MARK,)} if unready else set())
            self._owned[name] = NameState(addresses, self._config.ttl, frozenset(txt))
        else:
            self._owned.pop(name, None)
        kept = f"kept, no shard ready (marked {UNREADY_MARK}),"
        what = "deleted" if not addresses else kept if unready else "published"
        log.info("external DNS: %s %s", what, name)

    def _adopt(self, name: dns.name.Name, state: NameState | None) -> None:
        """Record what a lookup found at ``name``: ours, absent, or someone else's."""
        self._owned.pop(name, None)
        if state is not None and self._owns(state, name):
            self._owned[name] = state
        elif state is not None:
            self._foreign.add(name)
            log.warning("external DNS: %s exists without the ownership TXT %r; leaving it alone",
                        name, self._marker(name))

    def _allowed(self) -> bool:
        """``may_write()``, logging each change of the answer once."""
        allowed = self._may_write()
        if allowed == self._holding_back:
            self._holding_back = not allowed
            log.log(logging.WARNING if not allowed else logging.INFO, "external DNS: %s",
                    "not writing: the leader lease is not confirmed" if not allowed else "writing again")
        return allowed

    def _fail(self, exc: ProviderError, name: dns.name.Name | None = None) -> None:
        self._metrics.failures.labels(exc.reason).inc()
        level = logging.DEBUG if self._failing else logging.WARNING
        log.log(level, "external DNS: %s%s (%s); will retry", f"{name}: " if name else "", exc, exc.reason)
        self._failing = True

    def _report(self, ok: bool) -> None:
        if ok and self._failing:
            log.info("external DNS: caught up with %s:%d", self._config.server, self._config.port)
            self._failing = False
