"""The SkyDNS backend of the stub-zone API (CONTRACTS 5): stub-domain keys in etcd.

SkyDNS started with ``-stubzones`` reads every key under
``/<path-prefix>/<reversed domain>/dns/stub/`` as a nameserver
``{"host": IP, "port": N}`` (port 0 or missing means 53, non-IP hosts are
skipped) of the stub domain named by the key's directory, and watches that
prefix for changes. For SkyDNS domain ``cluster.local.`` and federation zone
``federation.``, federation F's nameservers are the keys
``/skydns/local/cluster/dns/stub/federation/svc/F/ns<i>``.

The store is the truth: nothing is cached here. Each request opens an etcd
client, reads, and (for a change) commits one transaction guarded by the
directory's revision, so a failed or concurrent request never leaves a mix
of two configurations: either all of a POST's keys are written and the
stale ones deleted, or nothing changes.
"""

import asyncio
import ipaddress
import json
import logging
import re
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aetcd

from feddns import names
from feddns.errors import FeddnsError
from feddns.etcd import Endpoints, EtcdError, prefix_range_end
from feddns.hostport import parse_ip_port
from feddns.records import IPAddress

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_PORT = 53
CONFLICT_RETRIES = 5
"""How often a change is re-read and retried when another writer changed the directory meanwhile."""

_NS_KEY = re.compile(r"^ns(\d*)")


class StoreUnavailable(FeddnsError):
    """etcd could not be reached (or kept changing); the request changed nothing (HTTP 503)."""


@dataclass(frozen=True, slots=True)
class Nameserver:
    """One forwarder of a stub domain: an IP address and a UDP/TCP port (1-65535)."""

    address: IPAddress
    port: int = DEFAULT_PORT

    @classmethod
    def parse(cls, text: str) -> "Nameserver":
        """``1.2.3.4``, ``1.2.3.4:5353``, ``2001:db8::1`` or ``[2001:db8::1]:5353``.

        Raises ``ValueError`` (a :class:`feddns.errors.ConfigError` from the
        shared parser) for a hostname, a bad port, non-ASCII text, or an address
        SkyDNS cannot forward to: IPv6 with a zone, unspecified or multicast.
        """
        if not text.isascii() or text.endswith(":"):
            raise ValueError(f"{text!r} is not an IP address with an optional port (ASCII)")
        address, port = parse_ip_port(text, DEFAULT_PORT)
        if getattr(address, "scope_id", None) or address.is_unspecified or address.is_multicast:
            raise ValueError(f"{text!r} is not a unicast address a DNS server can forward to")
        return cls(address, port)

    def __str__(self) -> str:
        """The canonical text: the port only when it is not 53, IPv6 in brackets then."""
        if self.port == DEFAULT_PORT:
            return str(self.address)
        host = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return f"{host}:{self.port}"

    def skydns_value(self) -> bytes:
        """The etcd value SkyDNS reads (its ``msg.Service``): ``{"host":"1.2.3.4","port":53}``."""
        return json.dumps({"host": str(self.address), "port": self.port}, separators=(",", ":")).encode()

    @classmethod
    def from_skydns(cls, value: bytes) -> "Nameserver":
        """Parse a stub key's value as SkyDNS does; raises ``ValueError`` when SkyDNS would skip it."""
        service = json.loads(value)
        if not isinstance(service, dict) or not isinstance(service.get("host"), str):
            raise ValueError("not a JSON object with a string 'host'")
        port = service.get("port") or DEFAULT_PORT
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port {port!r} is not 1-65535")
        return cls(ipaddress.ip_address(service["host"]), port)


@dataclass(frozen=True, slots=True)
class StubZone:
    """What is programmed for one federation: its stub domain and nameservers in key order."""

    federation: str
    stub_domain: str
    nameservers: tuple[Nameserver, ...]

    def to_json(self) -> dict[str, Any]:
        """The API's ``StubZone`` object (docs/stubzone-openapi.yaml)."""
        return {
            "federation": self.federation,
            "stubDomain": self.stub_domain,
            "nameservers": [str(ns) for ns in self.nameservers],
        }


def _reversed_labels(domain: str) -> str:
    return "/".join(reversed(names.normalize_zone(domain).rstrip(".").split(".")))


class SkyDNSLayout:
    """Key paths of the stub domains ``F.svc.<federation_zone>`` of one SkyDNS domain.

    ``prefix`` is ``/`` plus SkyDNS's ``-path-prefix`` (default ``/skydns``);
    ``skydns_domain`` its ``-domain``. Raises ``ValueError`` for a bad domain.
    """

    def __init__(self, prefix: str = "/skydns", skydns_domain: str = "cluster.local.",
                 federation_zone: str = "federation.") -> None:
        self.federation_zone = names.normalize_zone(federation_zone)
        self.stub_root = f"{prefix.rstrip('/')}/{_reversed_labels(skydns_domain)}/dns/stub/"
        self.federations_dir = f"{self.stub_root}{_reversed_labels(self.federation_zone)}/svc/"

    def directory(self, federation: str) -> str:
        """``.../dns/stub/federation/svc/F/``: the directory of F's ``ns*`` keys."""
        return f"{self.federations_dir}{federation}/"

    def stub_domain(self, federation: str) -> str:
        """``F.svc.federation.``"""
        return f"{federation}.svc.{self.federation_zone}"

    def split(self, key: str) -> tuple[str, str] | None:
        """``(federation, leaf)`` for a nameserver key ``<federations_dir>F/ns<i>``, else ``None``.

        Keys deeper down are other stub domains (``x.F.svc...``), and leaves not
        named ``ns*`` are not ours; both are ``None``.
        """
        parts = key[len(self.federations_dir):].split("/")
        if len(parts) != 2 or not names.is_label(parts[0]) or not _NS_KEY.match(parts[1]):
            return None
        return parts[0], parts[1]


def _leaf_order(key: str) -> tuple[int, str]:
    """``ns2`` before ``ns10``: by the number after ``ns``, then by name."""
    digits = _NS_KEY.match(key.rsplit("/", 1)[-1])
    number = digits.group(1) if digits else ""
    return (int(number) if number else 0, key)


class SkyDNSStubs:
    """Reads and programs stub domains in the cluster's SkyDNS etcd (CONTRACTS 5).

    Every method raises :class:`StoreUnavailable` when no endpoint of
    ``endpoints`` answers; each endpoint is tried once per call.
    """

    def __init__(self, endpoints: Endpoints, layout: SkyDNSLayout) -> None:
        self.endpoints = endpoints
        self.layout = layout
        # Writes to one federation from this process take turns: racing them only to
        # let the etcd guard below sort them out made concurrent POSTs run out of
        # retries (503) under load. The guard stays for writers in other processes.
        self._writing: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def list(self) -> list[StubZone]:
        """Every programmed federation, sorted by name."""
        _, found = await self._with_client(lambda client: self._read(client, self.layout.federations_dir))
        by_federation: dict[str, dict[str, bytes]] = {}
        for key, value in found.items():
            federation, _ = self.layout.split(key) or ("", "")
            by_federation.setdefault(federation, {})[key] = value
        return [self._zone(federation, by_federation[federation]) for federation in sorted(by_federation)]

    async def get(self, federation: str) -> StubZone | None:
        """F's stub zone, or ``None`` when F has no ``ns*`` key."""
        _, found = await self._with_client(lambda client: self._read(client, self.layout.directory(federation)))
        return self._zone(federation, found) if found else None

    async def put(self, federation: str, nameservers: Sequence[Nameserver]) -> tuple[StubZone, bool]:
        """Make ``ns1``..``nsN`` of F exactly ``nameservers``; returns the zone and whether etcd changed.

        Idempotent: when the keys already hold these values nothing is written.
        """
        directory = self.layout.directory(federation)
        desired = {f"{directory}ns{i}": ns.skydns_value() for i, ns in enumerate(nameservers, 1)}
        async with self._writing[federation]:
            found = await self._with_client(lambda client: self._converge(client, directory, desired))
        return StubZone(federation, self.layout.stub_domain(federation), tuple(nameservers)), found != desired

    async def delete(self, federation: str) -> StubZone | None:
        """Remove F's ``ns*`` keys; returns what was programmed, ``None`` when nothing was."""
        directory = self.layout.directory(federation)
        async with self._writing[federation]:
            removed = await self._with_client(lambda client: self._converge(client, directory, {}))
        return self._zone(federation, removed) if removed else None

    async def ping(self) -> int:
        """The etcd revision, read with the federations' range; proves the store answers."""
        revision, _ = await self._with_client(lambda client: self._read(client, self.layout.federations_dir))
        return revision

    def _zone(self, federation: str, found: dict[str, bytes]) -> StubZone:
        nameservers = []
        for key in sorted(found, key=_leaf_order):
            try:
                nameservers.append(Nameserver.from_skydns(found[key]))
            except ValueError as exc:
                log.warning("%s: value %r skipped (SkyDNS skips it too): %s", key, found[key][:200], exc)
        return StubZone(federation, self.layout.stub_domain(federation), tuple(nameservers))

    async def _with_client(self, operation: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        """Run ``operation`` with a fresh client, trying each endpoint once.

        A fresh client per request keeps no state across requests and skips
        gRPC's reconnect back-off after an etcd outage (up to 120 s).
        """
        failure: Exception | None = None
        for _ in self.endpoints.addresses:
            try:
                async with self.endpoints.client() as client:
                    return await operation(client)
            except EtcdError as exc:
                failure = exc
                log.warning("etcd %s: %s", self.endpoints.current, exc)
                self.endpoints.failover()
        raise StoreUnavailable(f"etcd cannot be reached: {failure}")

    async def _read(self, client: aetcd.Client, prefix: str) -> tuple[int, dict[str, bytes]]:
        """``(revision, {key: value})`` of the nameserver keys under ``prefix``.

        A key that is not UTF-8 is nobody's nameserver here (and could not be
        deleted by its decoded name), so it is left out.
        """
        start = prefix.encode()
        response = await client.get_range(start, prefix_range_end(start))
        found = {}
        for kv in response.kvs:
            try:
                key = kv.key.decode()
            except UnicodeDecodeError:
                continue
            if self.layout.split(key):
                found[key] = kv.value
        return response.header.revision, found

    async def _converge(self, client: aetcd.Client, directory: str, desired: dict[str, bytes]) -> dict[str, bytes]:
        """Make F's ``ns*`` keys ``desired`` in one transaction; returns the keys found before.

        The transaction only commits when no key under ``directory`` changed
        since the read (every ``mod_revision`` at most the read's revision);
        otherwise it re-reads, up to :data:`CONFLICT_RETRIES` times.
        """
        for _ in range(CONFLICT_RETRIES):
            revision, found = await self._read(client, directory)
            if found == desired:
                return found
            start = directory.encode()
            guard = client.transactions.mod(start, prefix_range_end(start)) < revision + 1
            stale = [key for key in found if key not in desired]
            operations = [client.transactions.delete(key.encode()) for key in stale]
            operations += [client.transactions.put(key.encode(), value) for key, value in desired.items()]
            succeeded, _ = await client.transaction(compare=[guard], success=operations, failure=[])
            if succeeded:
                log.debug("%s: %d keys written, %d deleted", directory, len(desired), len(stale))
                return found
            log.info("%s changed since revision %d; reading it again", directory, revision)
        raise StoreUnavailable(f"{directory} kept changing under concurrent writers; nothing was changed")

