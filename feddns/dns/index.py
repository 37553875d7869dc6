"""The index: every record of every federation, by the names queries ask for.

Records arrive as ``(key, value)`` pairs from a store (etcd or a records
file) and are parsed once, here (``feddns.keys`` for the key,
``feddns.records`` for the value). The index is changed on the event loop
between queries, so the query path reads it without locks.

Each change says how far its effect reaches, so the answer cache can drop no
more than it must: a change to an existing shard's record affects only that
service's names (:class:`ServiceChanged`); a shard or service appearing or
going away, or a cluster record changing, can change which names exist and
which clusters are known, so it affects everything (:data:`EVERYTHING`).
"""

import ipaddress
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from feddns.errors import RecordError
from feddns.keys import ClusterKey, Layout, ShardKey
from feddns.records import ClusterRecord, IPAddress, IPNetwork, ShardRecord, decode_json

log = logging.getLogger(__name__)

ServiceId = tuple[str, str, str]
"""``(federation, namespace, service)``."""


@dataclass(frozen=True, slots=True)
class ServiceChanged:
    """Only the names of one service are affected."""

    service: ServiceId


EVERYTHING = "everything"
"""Names may have appeared or gone, or source-cluster data changed."""

Change = ServiceChanged | str | None
"""What a change affects; ``None`` when nothing changed."""


@dataclass(slots=True)
class Federation:
    """What the index knows of one federation.

    ``clusters`` are the cluster records (``P/F/_clusters/C``); ``shard_refs``
    counts the shards of each cluster name; ``namespaces`` counts the
    services of each namespace (for empty non-terminals, RFC 8020).
    """

    clusters: dict[str, ClusterRecord] = field(default_factory=dict)
    shard_refs: Counter[str] = field(default_factory=Counter)
    namespaces: Counter[str] = field(default_factory=Counter)
    cidr_table: list[tuple[IPNetwork, str]] = field(default_factory=list)

    def is_known(self, cluster: str) -> bool:
        """True when ``cluster`` has a cluster record or a shard in this federation."""
        return cluster in self.clusters or self.shard_refs[cluster] > 0

    def cluster_for_address(self, address: IPAddress) -> tuple[str, int] | None:
        """The cluster whose ``cidrs`` hold ``address`` (longest prefix wins), with
        that prefix length, or ``None``."""
        for network, cluster in self.cidr_table:
            if address.version == network.version and address in network:
                return cluster, network.prefixlen
        return None

    def rebuild_cidrs(self) -> None:
        table = [(net, name) for name, rec in self.clusters.items() for net in rec.cidrs]
        table.sort(key=lambda item: (-item[0].prefixlen, item[1]))
        self.cidr_table = table

    @property
    def empty(self) -> bool:
        return not self.clusters and not self.namespaces


class Index:
    """All shard and cluster records under one key prefix.

    ``services`` maps a :data:`ServiceId` to its shards by cluster name;
    ``federations`` maps a federation name to :class:`Federation`;
    ``invalid`` maps each key that failed to parse to the reason;
    ``skipped`` counts the skips logged (once per key and reason).
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.services: dict[ServiceId, dict[str, ShardRecord]] = {}
        self.federations: dict[str, Federation] = {}
        self.invalid: dict[str, str] = {}
        self.skipped = 0
        self.revision = 0

    def __len__(self) -> int:
        """The number of valid records held."""
        shards = sum(len(shards) for shards in self.services.values())
        return shards + sum(len(fed.clusters) for fed in self.federations.values())

    def replace(self, items: Iterable[tuple[str, bytes]], revision: int = 0) -> None:
        """Replace every record with ``items`` (a full range read at ``revision``)."""
        self.services.clear()
        self.federations.clear()
        self.invalid.clear()
        for key, value in items:
            self.put(key, value)
        self.revision = revision

    def put(self, key: str, value: bytes) -> Change:
        """Store one record; a bad key or value is skipped, logged once and kept in
        ``invalid`` (and an older valid record under that key is removed)."""
        try:
            parsed, record = parse_record(self.layout, key, value)
        except RecordError as exc:
            reason = str(exc).removeprefix(f"{key}: ")
            if self.invalid.get(key) != reason:
                log.warning("skipping record %s: %s", key, reason)
                self.skipped += 1
            self.invalid[key] = reason
            return self._remove(key)
        if isinstance(parsed, ShardKey):
            return self._put_shard(parsed, record)  # type: ignore[arg-type]
        return self._put_cluster(parsed, record)  # type: ignore[arg-type]

    def delete(self, key: str) -> Change:
        """Remove the record under ``key`` (nothing when there is none)."""
        self.invalid.pop(key, None)
        return self._remove(key)

    def _remove(self, key: str) -> Change:
        try:
            parsed = self.layout.parse(key)
        except RecordError:
            return None
        if isinstance(parsed, ShardKey):
            return self._delete_shard(parsed)
        return self._delete_cluster(parsed)

    def _federation(self, name: str) -> Federation:
        fed = self.federations.get(name)
        if fed is None:
            fed = self.federations[name] = Federation()
        return fed

    def _put_shard(self, key: ShardKey, record: ShardRecord) -> Change:
        self.invalid.pop(self.layout.shard_key(key), None)
        sid = (key.federation, key.namespace, key.service)
        shards = self.services.get(sid)
        if shards is not None and key.cluster in shards:
            old = shards[key.cluster]
            if old == record:
                return None
            shards[key.cluster] = record
            # New ports can make SRV names and their parents appear or go.
            return ServiceChanged(sid) if old.ports == record.ports else EVERYTHING
        fed = self._federation(key.federation)
        if shards is None:
            shards = self.services[sid] = {}
            fed.namespaces[key.namespace] += 1
        shards[key.cluster] = record
        fed.shard_refs[key.cluster] += 1
        return EVERYTHING

    def _delete_shard(self, key: ShardKey) -> Change:
        sid = (key.federation, key.namespace, key.service)
        shards = self.services.get(sid)
        if shards is None or key.cluster not in shards:
            return None
        del shards[key.cluster]
        fed = self.federations[key.federation]
        _decrement(fed.shard_refs, key.cluster)
        if not shards:
            del self.services[sid]
            _decrement(fed.namespaces, key.namespace)
        self._drop_if_empty(key.federation)
        return EVERYTHING

    def _put_cluster(self, key: ClusterKey, record: ClusterRecord) -> Change:
        self.invalid.pop(self.layout.cluster_key(key), None)
        fed = self._federation(key.federation)
        if fed.clusters.get(key.cluster) == record:
            return None
        fed.clusters[key.cluster] = record
        fed.rebuild_cidrs()
        return EVERYTHING

    def _delete_cluster(self, key: ClusterKey) -> Change:
        fed = self.federations.get(key.federation)
        if fed is None or fed.clusters.pop(key.cluster, None) is None:
            return None
        fed.rebuild_cidrs()
        self._drop_if_empty(key.federation)
        return EVERYTHING

    def _drop_if_empty(self, name: str) -> None:
        if self.federations[name].empty:
            del self.federations[name]


def parse_record(
    layout: Layout, key: str, value: bytes
) -> tuple[ShardKey, ShardRecord] | tuple[ClusterKey, ClusterRecord]:
    """Parse one stored ``(key, value)``; raises :class:`RecordError` naming the key."""
    parsed = layout.parse(key)
    try:
        obj = decode_json(value)
        if isinstance(parsed, ShardKey):
            return parsed, ShardRecord.from_json(obj)
        return parsed, ClusterRecord.from_json(obj)
    except RecordError as exc:
        raise RecordError(str(exc), key) from exc


def _decrement(counter: Counter[str], key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


def parse_ip(text: str) -> IPAddress | None:
    """The client address ``text`` as an IP address, or ``None`` when it is not one."""
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


APEX, ENT, NS_HOST, SERVICE, SHARD, SRV_NAME = "apex", "ent", "ns-host", "service", "shard", "srv"


@dataclass(frozen=True, slots=True)
class Node:
    """A name that exists in the zone (CONTRACTS 1).

    ``kind`` is one of ``APEX``, ``ENT`` (empty non-terminal), ``NS_HOST``
    (``ns.dns.Z``, the server's own name), ``SERVICE``, ``SHARD``
    (``C.<svc>...``) or ``SRV_NAME`` (``_<port>._<proto>.<svc>...``).
    """

    kind: str
    service: ServiceId | None = None
    cluster: str | None = None
    port_name: str | None = None
    protocol: str | None = None


_APEX, _ENT, _NS_HOST = Node(APEX), Node(ENT), Node(NS_HOST)


def lookup(index: Index, rel: tuple[str, ...]) -> Node | None:
    """The node for a name given by its labels below the zone, from the zone down
    (``("svc", F, ns, svc)``), or ``None`` when the name does not exist."""
    depth = len(rel)
    if depth == 0:
        return _APEX
    if rel[0] == "dns":
        return _ENT if depth == 1 else _NS_HOST if rel[1:] == ("ns",) else None
    if rel[0] != "svc":
        return None
    if depth == 1:
        return _ENT if index.services else None
    fed = index.federations.get(rel[1])
    if fed is None or not fed.namespaces:
        return None
    if depth == 2 or depth == 3:
        return _ENT if depth == 2 or fed.namespaces[rel[2]] > 0 else None
    sid = (rel[1], rel[2], rel[3])
    shards = index.services.get(sid)
    if shards is None:
        return None
    if depth == 4:
        return Node(SERVICE, sid)
    return _below_service(sid, shards, rel[4:])


def _below_service(sid: ServiceId, shards: dict[str, ShardRecord], rest: tuple[str, ...]) -> Node | None:
    first = rest[0]
    if not first.startswith("_"):
        return Node(SHARD, sid, cluster=first) if len(rest) == 1 and first in shards else None
    protocol = first[1:].upper()
    if len(rest) == 1:
        found = any(p.protocol == protocol for s in shards.values() for p in s.ports)
        return _ENT if found else None
    if len(rest) != 2 or not rest[1].startswith("_"):
        return None
    name = rest[1][1:]
    found = any(p.protocol == protocol and p.name == name for s in shards.values() for p in s.ports)
    return Node(SRV_NAME, sid, port_name=name, protocol=protocol) if found else None
