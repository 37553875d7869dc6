"""Publishing federated services' load-balancer IPs to a DNS provider (external clients).

Design doc "External Clients": for a federated Service of type LoadBalancer the
controller also programs the federation's registered domain, so that
``<svc>.<ns>.<federation>.svc.<zone>`` answers the externalIPs of every healthy
shard. This module holds the provider-neutral part:

- :class:`ExternalConfig` and :func:`parse_external_config`: the ``external``
  section of CONTRACTS 7.
- :class:`Provider`: the seam to a DNS provider (read the names in the zone,
  look one up, apply one conditional change). ``controller.external_rfc2136``
  implements it with RFC 2136 updates signed with TSIG (RFC 8945).
- :class:`Publisher`: the reconciliation. The caller hands it the full desired
  state; a task of its own sends one change per service whose RRsets differ
  from what it last saw on the server, and retries failures with exponential
  backoff, so a down provider never blocks the caller.

Ownership, as ExternalDNS does it: every name the publisher creates carries a TXT
record ``heritage=feddns,feddns/federation=F,feddns/service=ns/svc`` (the
"marker"). A name is touched only when its TXT RRset holds that exact marker, and
the provider makes each change conditional on what the publisher believes is
there (the name absent, or its TXT RRset unchanged), so a record someone else
created, even a moment ago, is never overwritten. At resync the publisher
reads the zone back and deletes the owned names nobody wants any more.
"""

import asyncio
import base64
import binascii
import ipaddress
import logging
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import dns.name
from prometheus_client import CollectorRegistry, Counter, Gauge

from feddns.errors import ConfigError, FeddnsError
from feddns.hostport import parse_hostport
from feddns.names import normalize_zone
from feddns.records import IPAddress

log = logging.getLogger(__name__)

PROVIDERS = ("rfc2136",)
# RFC 8945 section 6: HMAC-SHA256 is mandatory to implement; MD5 is deprecated and left out.
TSIG_ALGORITHMS = ("hmac-sha1", "hmac-sha224", "hmac-sha256", "hmac-sha384", "hmac-sha512")
MAX_TTL = 2**31 - 1  # RFC 2181 section 8

ServiceKey = tuple[str, str]  # (namespace, service)
Desired = Mapping[ServiceKey, Sequence[IPAddress]]


# -- config (CONTRACTS 7) ----------------------------------------------------------


@dataclass(frozen=True)
class ExternalConfig:
    """The ``external`` section of the controller config (CONTRACTS 7)."""

    provider: str
    """Provider kind; only ``"rfc2136"`` for now."""
    server: str
    """The provider's primary server: an IP address or a hostname."""
    port: int
    """Its DNS port (TCP), 53 unless ``server`` names another."""
    zone: str
    """The registered domain, normalised (``"example.com."``); also the update zone."""
    ttl: int = 60
    """TTL in seconds of the published A, AAAA and ownership TXT records."""
    tsig_name: str | None = None
    """TSIG key name (``"feddns."``); ``None`` sends unsigned requests."""
    tsig_algorithm: str = "hmac-sha256"
    """TSIG algorithm (RFC 8945 section 6 names)."""
    tsig_secret: bytes | None = field(default=None, repr=False)
    """The decoded TSIG secret read from ``tsig.secretFile``; kept out of repr and logs."""


def parse_external_config(raw: Mapping[str, Any]) -> ExternalConfig:
    """Check the ``external`` mapping of the controller config and return it typed.

    ``provider``, ``server`` and ``zone`` are required; ``ttl`` defaults to 60 s;
    ``tsig`` is optional (no signing), and when given needs ``name`` and
    ``secretFile`` (``algorithm`` defaults to hmac-sha256). The secret file holds
    the base64 secret, alone or as ``tsig-keygen`` writes it. Raises
    :class:`ConfigError` naming the key (``external.tsig.secretFile: ...``); unknown
    keys are errors.
    """
    section = _mapping(raw, "external", ("provider", "server", "zone", "ttl", "tsig"))
    for key in ("provider", "server", "zone"):
        if key not in section:
            raise ConfigError(f"external.{key}: required")
    provider = section["provider"]
    if provider not in PROVIDERS:
        raise ConfigError(f"external.provider: {provider!r} is not supported (expected one of {', '.join(PROVIDERS)})")
    server, port = _server(section["server"])
    tsig = _tsig(section["tsig"]) if section.get("tsig") is not None else (None, "hmac-sha256", None)
    return ExternalConfig(provider, server, port, _zone(section["zone"]), _ttl(section.get("ttl", 60)), *tsig)


def _mapping(raw: object, where: str, allowed: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    for key in raw:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown key (expected {', '.join(allowed)})")
    return raw


def _server(value: object) -> tuple[str, int]:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"external.server: expected HOST or HOST:PORT, got {value!r}")
    try:
        host, port = parse_hostport(value.strip(), 53)
    except ConfigError as exc:
        raise ConfigError(f"external.server: {exc}") from exc
    if port == 0:
        raise ConfigError(f"external.server: {value!r}: port must be from 1 to 65535")
    return host, port


def _zone(value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"external.zone: expected a domain name, got {value!r}")
    try:
        return normalize_zone(value)
    except ValueError as exc:
        raise ConfigError(f"external.zone: {value!r}: {exc}") from exc


def _ttl(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TTL:
        raise ConfigError(f"external.ttl: expected seconds from 0 to {MAX_TTL}, got {value!r}")
    return value


def _tsig(raw: object) -> tuple[str, str, bytes]:
    section = _mapping(raw, "external.tsig", ("name", "algorithm", "secretFile"))
    for key in ("name", "secretFile"):
        if not isinstance(section.get(key), str) or not section[key]:
            raise ConfigError(f"external.tsig.{key}: required (a string)")
    try:
        name = dns.name.from_text(section["name"]).to_text().lower()
    except dns.exception.DNSException as exc:
        raise ConfigError(f"external.tsig.name: {section['name']!r} is not a domain name: {exc}") from exc
    algorithm = section.get("algorithm", "hmac-sha256")
    if algorithm not in TSIG_ALGORITHMS:
        raise ConfigError(f"external.tsig.algorithm: {algorithm!r} is not one of {', '.join(TSIG_ALGORITHMS)}")
    return name, algorithm, read_secret_file(section["secretFile"])


_KEY_CLAUSE_SECRET = re.compile(r'\bsecret\s+"([^"]*)"')


def read_secret_file(path: str) -> bytes:
    """The decoded TSIG secret in ``path``.

    The file holds the base64 secret alone, or a BIND ``key`` clause as
    ``tsig-keygen`` writes it (``secret "...";``), so one file can serve both
    named and feddns. Raises :class:`ConfigError` (never quoting the secret).
    """
    where = f"external.tsig.secretFile: {path}"
    try:
        with open(path, encoding="utf-8") as secret_file:
            text = secret_file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not readable ({exc.__class__.__name__}: {getattr(exc, 'strerror', '') or 'not UTF-8'})") from None
    clause = _KEY_CLAUSE_SECRET.search(text)
    encoded = "".join((clause.group(1) if clause else text).split())
    try:
        secret = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise ConfigError(f"{where}: the secret is not base64") from None
    if not secret:
        raise ConfigError(f"{where}: the secret is empty")
    return secret


# -- the provider seam ----------------------------------------------------------------


@dataclass(frozen=True)
class NameState:
    """What a provider holds at one owner name, as far as the publisher cares.

    ``addresses``: the A and AAAA rdata; ``ttl``: their TTL in seconds (the lower
    of the two RRsets; ``None`` without addresses); ``txt``: every TXT rdata at
    the name as the tuple of its character-strings (RFC 1035 3.3.14), so that it
    can be sent back unchanged in a prerequisite.
    """

    addresses: frozenset[IPAddress] = frozenset()
    ttl: int | None = None
    txt: frozenset[tuple[str, ...]] = frozenset()


@dataclass(frozen=True)
class Change:
    """One conditional change of one owner name, sent as one message.

    ``prior`` is what the publisher believes is at ``name``: ``None`` means the
    name must not exist yet (RFC 2136 2.4.5), otherwise its TXT RRset must be
    exactly ``prior.txt`` (RFC 2136 2.4.2). The change replaces the A and AAAA
    RRsets with ``addresses`` (TTL ``ttl`` seconds) and adds the ownership TXT
    ``marker``; with no ``addresses`` it deletes both RRsets and the marker.
    """

    name: dns.name.Name
    prior: NameState | None
    addresses: frozenset[IPAddress]
    ttl: int
    marker: str


class ProviderError(FeddnsError):
    """A request to the DNS provider failed.

    ``reason`` is the metric label (``timeout``, ``unreachable``, ``refused``,
    ``badsig``...). ``whole_server`` is true when every other request would fail
    the same way (server unreachable, key rejected), so a pass stops early.
    """

    def __init__(self, message: str, reason: str, whole_server: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.whole_server = whole_server


class PrerequisiteFailed(ProviderError):
    """The provider refused a change because the name is not as ``Change.prior`` said."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "prerequisite", whole_server=False)


class TransferRefused(ProviderError):
    """The provider does not let this key read the zone (AXFR refused)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "axfr-refused", whole_server=False)


class Provider(Protocol):
    """A DNS provider that can hold the published names (the seam; RFC 2136 now)."""

    async def read_names(self, suffix: dns.name.Name) -> dict[dns.name.Name, NameState]:
        """Every owner name strictly below ``suffix`` in the zone with its state.

        Raises :class:`TransferRefused` when reading the zone is not allowed,
        :class:`ProviderError` on other failures.
        """
        ...

    async def lookup(self, name: dns.name.Name) -> NameState | None:
        """The state of one name, ``None`` when it does not exist; raises :class:`ProviderError`."""
        ...

    async def apply(self, change: Change) -> None:
        """Apply ``change`` atomically; raises :class:`PrerequisiteFailed` or :class:`ProviderError`."""
        ...


def marker(federation: str, namespace: str, service: str) -> str:
    """The ownership TXT string of ``<service>.<namespace>.<federation>.svc.<zone>``."""
    return f"heritage=feddns,feddns/federation={federation},feddns/service={namespace}/{service}"


def _address(address: IPAddress | str) -> IPAddress:
    """``address`` as an ipaddress object (already one: as is; parsing costs ~10 us)."""
    if isinstance(address, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return address
    return ipaddress.ip_address(address)


# -- the publisher -----------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Timeouts and retry backoff of a :class:`Publisher`, in seconds.

    After a failed pass the publisher waits ``first`` seconds, doubling up to
    ``maximum`` (each wait +-10% jitter), until a pass succeeds.
    """

    timeout: float = 5.0
    """Per request (one update, one lookup, or each message of a zone transfer)."""
    first: float = 1.0
    maximum: float = 60.0


class _Metrics:
    """The publisher's Prometheus metrics, registered on the registry given."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.updates = Counter(
            "feddns_external_updates", "Changes (one per service) the DNS provider accepted.", registry=registry)
        self.failures = Counter(
            "feddns_external_failures", "Requests to the DNS provider that failed, by reason "
            "(timeout, unreachable, refused, notauth, badsig, badkey, prerequisite, axfr-refused...).",
            ["reason"], registry=registry)
        self.retries = Counter(
            "feddns_external_retries", "Passes retried after a backoff because a request failed.", registry=registry)
        self.zone_reads = Counter(
            "feddns_external_zone_reads", "Zone reads (AXFR) at resync that found the owned names.", registry=registry)
        self.owned = Gauge(
            "feddns_external_owned_names", "Names in the zone carrying this federation's ownership TXT.",
            registry=registry)
        self.pending = Gauge(
            "feddns_external_pending_names", "Owned or wanted names whose RRsets differ from the desired state.",
            registry=registry)
        self.conflicts = Gauge(
            "feddns_external_conflicting_names", "Wanted names that exist without our ownership TXT (left alone).",
            registry=registry)


HOLD_BACK_SECONDS = 0.5
"""How often a publisher that may not write looks again whether it may."""


class Publisher:
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
                 timing: Timing = Timing(), provider: Provider | None = None,
                 may_write: Callable[[], bool] = lambda: True) -> None:
        if provider is None:
            from controller.external_rfc2136 import Rfc2136Provider
            provider = Rfc2136Provider(config, timeout=timing.timeout)
        self._provider = provider
        self._config = config
        self._federation = federation
        self._timing = timing
        self._metrics = _Metrics(registry)
        self._suffix = dns.name.from_text(f"{federation}.svc.{config.zone}")
        self._desired: dict[dns.name.Name, frozenset[IPAddress]] = {}
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

    async def publish(self, desired: Desired) -> None:
        """Make ``desired`` the state to publish and return at once.

        ``desired`` maps ``(namespace, service)`` to the externalIPs of its healthy
        shards of type LoadBalancer, for every such service (the full state, not
        a delta). A service with no address, or absent, gets no name; owned names
        not in ``desired`` are deleted.
        """
        self._desired = self._names(desired)
        self._kick()

    async def resync(self, desired: Desired) -> None:
        """Like :meth:`publish`, and first read the zone again (AXFR) to learn the owned names.

        Names that an earlier run created and nobody wants any more are deleted;
        names found without our marker are looked at again.
        """
        self._desired = self._names(desired)
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
        if len(labels) != 2 or name == self._suffix:
            return None
        service, namespace = (label.decode("ascii", "replace") for label in labels)
        return marker(self._federation, namespace, service)

    def _dirty(self) -> list[dns.name.Name]:
        """Names to change: wanted and not as wanted, or owned and not wanted."""
        wanted = [name for name, addresses in self._desired.items() if name not in self._foreign
                  and (name not in self._owned or not self._matches(self._owned[name], addresses))]
        unwanted = [name for name in self._owned if name not in self._desired]
        return wanted + unwanted

    def _matches(self, state: NameState, addresses: frozenset[IPAddress]) -> bool:
        return state.addresses == addresses and state.ttl == self._config.ttl

    def _kick(self) -> None:
        self._update_gauges()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="feddns-external-publisher")
        self._wake.set()

    def _update_gauges(self) -> None:
        self._metrics.owned.set(len(self._owned))
        self._metrics.pending.set(len(self._dirty()))
        self._metrics.conflicts.set(len(self._foreign & self._desired.keys()))

    # -- the task --

    async def _run(self) -> None:
        """Run passes until nothing is left to do; after a failed pass back off and retry."""
        delay = self._timing.first
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._allowed():
                await asyncio.sleep(HOLD_BACK_SECONDS)
                self._wake.set()
                continue
            if await self._pass():
                delay = self._timing.first
                continue
            self._metrics.retries.inc()
            self._wake.set()
            await asyncio.sleep(delay * random.uniform(0.9, 1.1))
            delay = min(delay * 2, self._timing.maximum)

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
        await self._provider.apply(Change(name, prior, addresses, self._config.ttl, mark))
        self._metrics.updates.inc()
        if addresses:
            txt = (prior.txt if prior else frozenset()) | {(mark,)}
            self._owned[name] = NameState(addresses, self._config.ttl, txt)
        else:
            self._owned.pop(name, None)
        log.info("external DNS: %s %s", "published" if addresses else "deleted", name)

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

