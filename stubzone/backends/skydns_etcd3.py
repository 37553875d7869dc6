"""``--backend skydns --skydns-etcd-api v3``: the SkyDNS stub keys in etcd's v3 key space.

For SkyDNS builds started with ``-etcd3`` (the fork inside kube-dns; released
SkyDNS images read v2, :mod:`stubzone.backends.skydns_etcd2`). Same keys and values
(:mod:`stubzone.backends.skydns_layout`).

Each request opens an etcd client, reads, and (for a change) commits one
transaction guarded by the directory's revision, so a failed or concurrent
request never leaves a mix of two configurations: either all of a POST's
keys are written and the leftover ones deleted, or nothing changes. A
request's turn and its etcd calls all fit in one ``--backend-timeout``
(:class:`Deadline`); when it runs out while a transaction is in flight, the
answer says the change may have been applied.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import aetcd
from aetcd.transactions import Delete, Put

from feddns.errors import EtcdError
from feddns.etcd.client import prefix_range_end
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.etcd.failures import describe, failure_kind
from stubzone.backends import BackendUnavailable, Deadline
from stubzone.backends.skydns_layout import MAX_NAMESERVERS, SkyDNSLayout
from stubzone.model import Nameserver, StubZone

log = logging.getLogger(__name__)

T = TypeVar("T")

CONFLICT_RETRIES = 5
"""How often a change is re-read and retried when another writer changed the directory meanwhile."""


@dataclass
class _Sent:
    """Whether a transaction of this request went out (so a timeout after it may have been applied)."""

    transaction: bool = False


Operation = Callable[[aetcd.Client, _Sent], Awaitable[T]]


class SkyDNSEtcd3:
    """Reads and programs stub domains in the cluster's SkyDNS etcd v3 key space.

    ``endpoints`` are the etcd client URLs, each tried once per request, with
    their TLS files and user; ``timeout`` (seconds) bounds each request, its etcd
    calls included. Every method raises :class:`BackendUnavailable` when no
    endpoint answers, saying when etcd refused the credentials rather than could
    not be reached.
    """

    name = "skydns"
    max_nameservers = MAX_NAMESERVERS
    ipv6_ports = True

    def __init__(self, endpoints: EtcdEndpoints, layout: SkyDNSLayout) -> None:
        self.endpoints = endpoints
        self.layout = layout
        self.timeout = endpoints.timeout
        # Writes from this process take turns: racing them only to let the etcd guard
        # below sort them out made concurrent POSTs run out of retries (503) under load.
        # The guard stays for writers in other processes. One lock, not one per
        # federation: a client posting many names must not grow memory.
        self._writing = asyncio.Lock()

    async def list(self) -> list[StubZone]:
        """Every programmed federation, sorted by name."""
        _, found = await self._with_client(lambda client, _: self._read(client, self.layout.federations_dir),
                                           Deadline(self.timeout))
        return self.layout.zones(found)

    async def get(self, federation: str) -> StubZone | None:
        """F's stub zone, or ``None`` when F has no ``ns*`` key."""
        _, found = await self._with_client(lambda client, _: self._read(client, self.layout.directory(federation)),
                                           Deadline(self.timeout))
        return self.layout.zone(federation, found) if found else None

    async def put(self, federation: str, nameservers: Sequence[Nameserver]) -> tuple[StubZone, bool]:
        """Make ``ns1``..``nsN`` of F exactly ``nameservers``; returns the zone and whether etcd changed."""
        directory = self.layout.directory(federation)
        desired = self.layout.keys(federation, nameservers)
        deadline = Deadline(self.timeout)
        async with deadline.holding(self._writing, "etcd"):
            found = await self._with_client(lambda client, sent: self._converge(client, directory, desired, sent),
                                            deadline)
        return self.layout.domains.zone(federation, tuple(nameservers)), found != desired

    async def delete(self, federation: str) -> StubZone | None:
        """Remove F's ``ns*`` keys; returns what was programmed, ``None`` when nothing was."""
        directory = self.layout.directory(federation)
        deadline = Deadline(self.timeout)
        async with deadline.holding(self._writing, "etcd"):
            removed = await self._with_client(lambda client, sent: self._converge(client, directory, {}, sent),
                                              deadline)
        return self.layout.zone(federation, removed) if removed else None

    async def ping(self) -> str:
        """``etcd revision N``, read with the federations' range."""
        revision, _ = await self._with_client(lambda client, _: self._read(client, self.layout.federations_dir),
                                              Deadline(self.timeout))
        return f"etcd revision {revision}"

    async def close(self) -> None:
        """Nothing to release: each call has its own client."""

    async def _with_client(self, operation: Operation[T], deadline: Deadline) -> T:
        """Run ``operation`` with a fresh client, trying each endpoint once, all within ``deadline``.

        A fresh client per request keeps no state across requests, reads the
        certificate and password files as they are now (a rotated Secret is used
        at once) and skips gRPC's reconnect back-off after an etcd outage (up to
        120 s). A transaction either committed or did not: when the connection
        fails or the deadline comes while one is in flight, the answer says it may
        have been applied.
        """
        failure: Exception | None = None
        sent = _Sent()
        try:
            async with asyncio.timeout(deadline.remaining()):
                for _ in self.endpoints.addresses:
                    try:
                        async with self.endpoints.client() as client:
                            return await operation(client, sent)
                    except EtcdError as exc:
                        failure = exc
                        log.warning("etcd %s: %s", self.endpoints.current, describe(exc))
                        self.endpoints.failover()
        except TimeoutError as exc:
            raise BackendUnavailable(f"etcd {self.endpoints.current} did not answer within {deadline.seconds:g} s",
                                     may_have_applied=sent.transaction) from exc
        assert failure is not None
        raise BackendUnavailable(f"etcd {describe(failure)}") from failure

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

    async def _converge(self, client: aetcd.Client, directory: str, desired: dict[str, bytes],
                        sent: _Sent) -> dict[str, bytes]:
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
            leftover = [key for key in found if key not in desired]
            operations: list[Delete | Put] = [client.transactions.delete(key.encode()) for key in leftover]
            operations += [client.transactions.put(key.encode(), value) for key, value in desired.items()]
            sent.transaction = True
            try:
                succeeded, _ = await client.transaction(compare=[guard], success=operations, failure=[])
            except EtcdError as exc:  # refused credentials or permissions: etcd applied nothing
                raise BackendUnavailable(f"etcd {self.endpoints.current}: transaction on {directory}: {describe(exc)}",
                                         may_have_applied=failure_kind(exc) == "unreachable") from exc
            if succeeded:  # a timeout from here on (closing the client) still says it may have been applied
                log.debug("%s: %d keys written, %d deleted", directory, len(desired), len(leftover))
                return found
            sent.transaction = False  # refused by the guard: nothing changed
            log.info("%s changed since revision %d; reading it again", directory, revision)
        raise BackendUnavailable(f"{directory} kept changing under concurrent writers")
