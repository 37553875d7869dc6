"""The index: every record of every federation, by the names queries ask for.

Records arrive as ``(key, value)`` pairs from a store (etcd or a records file)
and are parsed once, here (``feddns.keys`` for the key, ``feddns.records`` for
the value), into compact :class:`Shard` objects whose addresses are kept packed
(4 or 16 bytes, as they go on the wire). After a full load a shard's value is
parsed only when its service is first looked up or changed, or when
:meth:`Index.parse_some` reaches it (:meth:`Index.put_page`), but for the values that
decide which names exist and which clusters are known, read before the first answer
(:meth:`Index.read_deciding`). The index is changed on the event loop
between queries, so the query path reads it without locks.

Names are kept in wire form, lowercased and relative to the zone (the zone's
labels cut off): a query's name, lowercased, finds its service with one dict
lookup, and a shard or SRV name with one or two more after cutting its first
labels (:meth:`Index.lookup`).

Each change says how far its effect reaches (:data:`Change`), so the cache can
drop no more than it must: a shard put or deleted changes one service's answers
(:class:`ServiceChanged`); a cluster record changes the tiers of every service of
its federation (:class:`FederationChanged`), and so does a cluster known from its first
shard or no longer known
(the service that went with it named too, since the federation no longer lists it); a
full load replaces everything (:class:`Reload`). Names that appear or go need no more
than that: answers for names that do not exist are never cached.
"""

import logging
import sys
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from feddns.dns.wire import IPV4_BYTES, IPV6_BYTES, MAX_LABEL_BYTES
from feddns.errors import FeddnsError, RecordError
from feddns.keys import Layout, RangeSplitter
from feddns.names import DNS, NS_HOST, ServiceId, service_name, whoami_name
from feddns.records import (
    DEFAULT_POLICY,
    ClusterRecord,
    NotJSON,
    PackedEndpoints,
    Policy,
    Port,
    decode_json,
    load_json,
    pack_ip,
    read_shard,
)

# feddns.names is imported name by name, not as the module: bound to `names` here, it made
# each Index.lookup (whose local is `names`) about 1,000 instructions dearer (callgrind, NXDOMAIN).

log = logging.getLogger(__name__)

IPV4 = 4
"""IP version 4 (``version`` arguments take 4 or 6)."""

SHARD_KEY_PARTS: Final = 4
"""The parts of a shard key as ``Layout.split`` gives them: federation, namespace, service, cluster."""

_SRV_OR_ENDPOINT_DEPTH = 2  # labels below a service: _<port>._<proto> or <hostname>.<cluster>

NAMED_DEPTH: Final = 4
"""The labels of a service's name relative to the zone (``<svc>.<ns>.<F>.svc``), the
deepest of the names :attr:`Index.names` holds: every name that exists with at most this
many labels is one of its keys. Only the names below a service (shards and ``_<proto>``,
5 labels; SRV and endpoint names, 6) are found by :meth:`Index.lookup`'s walk instead."""

@dataclass(frozen=True, slots=True)
class ServiceChanged:
    """A shard of one service was put or deleted: only that service's answers change."""

    service: ServiceId


@dataclass(frozen=True, slots=True)
class FederationChanged:
    """A cluster record changed, or a cluster is known or no longer known by its shards: the
    tiers of every service of the federation may change. ``removed``: a service the change removed as well (its last
    shard deleted), which :meth:`Index.services_of` no longer lists."""

    federation: str
    removed: ServiceId | None = None


@dataclass(frozen=True, slots=True)
class Reload:
    """Every record was replaced (a full load)."""


Change = ServiceChanged | FederationChanged | Reload | None
"""What a change affects; ``None`` when nothing changed."""


class NodeKind(IntEnum):
    """The kinds of names in the zone (docs/reference.md section 1)."""

    APEX = 0
    ENT = 1  # an empty non-terminal (RFC 8020: NODATA, never NXDOMAIN)
    NS_HOST = 2  # ns.dns.<zone>, the server's own name
    SERVICE = 3  # <svc>.<ns>.<F>.svc.<zone>
    SHARD = 4  # <cluster>.<svc>... : one cluster's shard
    SRV_NAME = 5  # _<port>._<proto>.<svc>...
    ENDPOINT = 6  # <hostname>.<cluster>.<svc>... : one endpoint of a headless shard
    WHOAMI = 7  # _whoami.<F>.svc: how the asker was identified, while the federation exists


class Endpoints:
    """The ready endpoints of a headless shard (docs/reference.md section 4).

    ``v4``/``v6`` are their addresses of each IP version, packed and
    concatenated in record order; ``names`` maps each endpoint's name to its
    ``(v4, v6)`` addresses, in record order: its ``hostname``, or for an
    endpoint without one its address with ``-`` for ``.`` and ``:`` (IPv6
    written in full), as CoreDNS names them (``10-4-0-7``).
    """

    __slots__ = ("names", "v4", "v6")

    def __init__(self, endpoints: PackedEndpoints) -> None:
        self.v4, self.v6 = _by_version(tuple(ip for ip, _ in endpoints))
        names: dict[str, tuple[bytes, bytes]] = {}
        for ip, hostname in endpoints:
            name = hostname or _dashed(ip)
            v4, v6 = names.get(name, (b"", b""))
            names[name] = (v4 + ip, v6) if len(ip) == IPV4_BYTES else (v4, v6 + ip)
        self.names = names

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Endpoints) and self.names == other.names and (self.v4, self.v6) == (other.v4, other.v6)

    __hash__ = None  # type: ignore[assignment]


def _dashed(packed: bytes) -> str:
    if len(packed) == IPV4_BYTES:
        return "-".join(str(byte) for byte in packed)
    return "-".join(packed[i : i + 2].hex() for i in range(0, 16, 2))


class Shard:
    """One shard record as the server keeps it (docs/reference.md section 4).

    The record's clusterIPs and externalIPs, packed (4 or 16 bytes each) in record order
    and parted by IP version, are one bytes object, ``packed``: clusterIPs v4, clusterIPs
    v6, externalIPs v4, externalIPs v6, which end at the offsets ``bounds`` gives (shared
    between shards with the same numbers of each; :meth:`addresses` reads them). One
    object where there were four saves about 50 bytes a shard: 50 MB for a million.
    ``ports`` the named ports; ``ready`` the ready endpoint count (``None``: the record
    does not say, and the shard counts as ready); ``policy`` its answer policy (shared
    between shards); ``endpoints`` those of a headless Service (``None`` otherwise).

    The usual shard (one IPv4 clusterIP, one IPv4 externalIP, no endpoints) is a
    :class:`Shard` whose ``bounds`` and ``endpoints`` are the class's: two slots fewer,
    16 MB less for a million; any other is a :class:`_WideShard`, which keeps its own.
    ``Shard(...)`` makes whichever fits.
    """

    __slots__ = ("packed", "policy", "ports", "ready")
    bounds: "Bounds"
    endpoints: Endpoints | None = None

    def __new__(cls, cluster_ips: tuple[bytes, ...], external_ips: tuple[bytes, ...], ports: tuple[Port, ...],
                ready: int | None, policy: Policy = DEFAULT_POLICY, endpoints: Endpoints | None = None) -> "Shard":
        usual = (endpoints is None and len(cluster_ips) == 1 and len(external_ips) == 1
                 and len(cluster_ips[0]) == IPV4_BYTES and len(external_ips[0]) == IPV4_BYTES)
        return object.__new__(Shard if usual else _WideShard)

    def __init__(self, cluster_ips: tuple[bytes, ...], external_ips: tuple[bytes, ...],
                 ports: tuple[Port, ...], ready: int | None, policy: Policy = DEFAULT_POLICY,
                 endpoints: Endpoints | None = None) -> None:
        self.packed = cluster_ips[0] + external_ips[0]  # the usual shard (__new__): its bounds are the class's
        self.ports = ports
        self.ready = ready
        self.policy = policy

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shard) and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def _fields(self) -> tuple[object, ...]:
        return (self.packed, self.bounds, self.ports, self.ready, self.policy, self.endpoints)

    @property
    def weight(self) -> int:
        """The shard's weight under a weighted policy (1 when the record gives none)."""
        weight = self.policy.weight
        return 1 if weight is None else weight

    @property
    def healthy(self) -> bool:
        """False only when the record says ``"ready": 0``."""
        return self.ready is None or self.ready > 0

    def addresses(self, own: bool, version: int) -> bytes:
        """The packed addresses an asker reaches this shard by: its clusterIPs from
        its own cluster, else its externalIPs; only those of IP ``version`` (4 or 6)."""
        cluster_v6, external_v4, external_v6 = self.bounds
        if own:
            return self.packed[:cluster_v6] if version == IPV4 else self.packed[cluster_v6:external_v4]
        return self.packed[external_v4:external_v6] if version == IPV4 else self.packed[external_v6:]


Bounds = tuple[int, int, int]
"""Where a :class:`Shard`'s packed clusterIPs v6, externalIPs v4 and externalIPs v6 begin."""

_ONE_V4_EACH: Bounds = (IPV4_BYTES, IPV4_BYTES, 2 * IPV4_BYTES)
_BOUNDS: dict[Bounds, Bounds] = {_ONE_V4_EACH: _ONE_V4_EACH}
"""Bounds already made, shared (most shards have one or two addresses of each kind)."""
_BOUNDS_MAX = 4096
Shard.bounds = _ONE_V4_EACH  # the usual shard's


class _WideShard(Shard):
    """A :class:`Shard` with bounds of its own (other numbers of addresses) or endpoints."""

    __slots__ = ("bounds", "endpoints")

    def __init__(self, cluster_ips: tuple[bytes, ...], external_ips: tuple[bytes, ...],
                 ports: tuple[Port, ...], ready: int | None, policy: Policy = DEFAULT_POLICY,
                 endpoints: Endpoints | None = None) -> None:
        self.packed, self.bounds = _pack(cluster_ips, external_ips)
        self.endpoints = endpoints
        self.ports = ports
        self.ready = ready
        self.policy = policy


def _pack(cluster_ips: tuple[bytes, ...], external_ips: tuple[bytes, ...]) -> tuple[bytes, Bounds]:
    """The :attr:`Shard.packed` and :attr:`Shard.bounds` of a shard's addresses."""
    cluster_v4, cluster_v6 = _by_version(cluster_ips)
    external_v4, external_v6 = _by_version(external_ips)
    a = len(cluster_v4)
    b = a + len(cluster_v6)
    c = b + len(external_v4)
    bounds = (a, b, c)
    known = _BOUNDS.get(bounds)
    if known is not None:
        bounds = known
    elif len(_BOUNDS) < _BOUNDS_MAX:
        _BOUNDS[bounds] = bounds
    return cluster_v4 + cluster_v6 + external_v4 + external_v6, bounds


def _by_version(packed: tuple[bytes, ...]) -> tuple[bytes, bytes]:
    if len(packed) == 1:
        return (packed[0], b"") if len(packed[0]) == IPV4_BYTES else (b"", packed[0])
    if not packed:
        return b"", b""
    v4 = b"".join(a for a in packed if len(a) == IPV4_BYTES)
    return v4, b"".join(a for a in packed if len(a) == IPV6_BYTES)


class Federation:
    """What the index knows of one federation.

    ``clusters`` are the cluster records (``P/F/_clusters/C``); ``shard_refs``
    counts the shards of each cluster name; ``namespaces`` counts the services
    of each namespace; ``known`` maps each cluster name with a record or a
    shard, as bytes, to itself (the names a cluster-name option may give; the
    query path names clusters by these bytes). ``pending_refs`` and
    ``pending_namespaces`` count the part of ``shard_refs`` and ``namespaces``
    that a full load stored unread (:data:`Pending`): a name or a cluster counted
    by unread values alone is not proven to exist (:meth:`Index.read_deciding`).
    """

    __slots__ = ("cidr_table", "clusters", "known", "name", "namespaces", "pending_namespaces", "pending_refs",
                 "shard_refs")

    def __init__(self, name: str) -> None:
        self.name = name
        self.clusters: dict[str, ClusterRecord] = {}
        self.shard_refs: dict[str, int] = {}
        self.namespaces: Counter[str] = Counter()
        self.known: dict[bytes, bytes] = {}
        self.cidr_table: list[tuple[int, int, int, int, bytes]] = []
        self.pending_refs: dict[str, int] = {}
        self.pending_namespaces: dict[str, int] = {}

    def undecided_cluster(self, cluster: str) -> bool:
        """True when ``cluster`` is known by unread shard values alone (no record, no shard read)."""
        pending = self.pending_refs.get(cluster, 0)
        return pending > 0 and cluster not in self.clusters and self.shard_refs.get(cluster, 0) <= pending

    def undecided_namespace(self, namespace: str) -> bool:
        """True when every service of ``namespace`` has unread values only."""
        pending = self.pending_namespaces.get(namespace, 0)
        return pending > 0 and self.namespaces.get(namespace, 0) <= pending

    def is_known(self, cluster: str) -> bool:
        """True when ``cluster`` has a cluster record or a shard in this federation."""
        return cluster in self.clusters or cluster in self.shard_refs

    def _refresh(self, cluster: str) -> bool:
        """Update ``known`` for ``cluster``; returns False when it is no longer known."""
        name = cluster.encode()
        if self.is_known(cluster):
            self.known.setdefault(name, name)
            return True
        self.known.pop(name, None)
        return False

    def cluster_for_address(self, packed: bytes) -> tuple[bytes, int] | None:
        """The cluster whose ``cidrs`` hold the packed address (longest prefix
        wins), with that prefix length, or ``None``."""
        if not self.cidr_table:
            return None
        width = len(packed)
        value = int.from_bytes(packed, "big")
        for size, network, mask, prefix, cluster in self.cidr_table:
            if size == width and value & mask == network:
                return cluster, prefix
        return None

    def _rebuild_cidrs(self) -> None:
        table = []
        for name, record in self.clusters.items():
            for net in record.cidrs:
                size = IPV4_BYTES if net.version == IPV4 else IPV6_BYTES
                table.append((size, int(net.network_address), int(net.netmask), net.prefixlen, name.encode()))
        table.sort(key=lambda row: (-row[3], row[4]))
        self.cidr_table = table

    @property
    def empty(self) -> bool:
        return not self.clusters and not self.namespaces


@dataclass(slots=True)
class Node:
    """A name that exists in the zone, with what answering it needs.

    ``federation`` and ``shards`` are those of the service the name belongs to
    (``None`` above services); ``service`` its :data:`ServiceId`; ``cluster``
    the shard's cluster (``SHARD``, ``ENDPOINT``); ``port_name`` and ``protocol``
    the named port (``SRV_NAME``, protocol upper case as in Kubernetes);
    ``hostname`` the endpoint's name (``ENDPOINT``). ``pending`` (``SERVICE`` only):
    the shard records a full load stored unread (:data:`Pending`), parsed into ``shards``
    when the service is first looked up (:meth:`Index.lookup`), changed, or reached by
    :meth:`Index.parse_some`; ``None`` once parsed.
    """

    kind: NodeKind
    federation: Federation | None = None
    service: ServiceId | None = None
    shards: dict[str, Shard] | None = None
    cluster: str | None = None
    port_name: str | None = None
    protocol: str | None = None
    hostname: str | None = None
    pending: "Pending | None" = None


Pending = tuple[tuple[str, ...], bytes, bytes]
"""A service's records stored unread by a full load: its cluster names in key order (one
tuple shared by the services with the same clusters), the values joined, and how to part
them: ``b""`` when they are joined by newlines and hold none themselves (the controller's
JSON never does), else each value's length as an ``array("I")``'s bytes. One object for
the values, where there were one a value and a dict: about 600 bytes less a service of 10
shards, 50 MB less for a million records (:func:`_sealed`)."""
_LENGTHS = "I"  # the array type of a Pending's lengths: unsigned, 4 bytes (etcd's values are at most 1.5 MiB)
_CLUSTER_LISTS_MAX = 4096


def _sealed(values: dict[str, bytes], cluster_lists: dict[tuple[str, ...], tuple[str, ...]]) -> Pending:
    """The :data:`Pending` of a service's unread ``values`` (cluster name to value), its tuple
    of cluster names shared through ``cluster_lists`` (at most :data:`_CLUSTER_LISTS_MAX` kept)."""
    clusters = tuple(values)
    shared = cluster_lists.get(clusters)
    if shared is not None:
        clusters = shared
    elif len(cluster_lists) < _CLUSTER_LISTS_MAX:
        cluster_lists[clusters] = clusters
    joined = b"\n".join(values.values())
    if joined.count(b"\n") == len(clusters) - 1:
        return clusters, joined, b""
    return clusters, b"".join(values.values()), array(_LENGTHS, map(len, values.values())).tobytes()


def _unsealed(pending: Pending) -> dict[str, bytes]:
    """Cluster name to value, in key order, of a :data:`Pending`."""
    clusters, joined, lengths = pending
    if not lengths:
        return dict(zip(clusters, joined.split(b"\n"), strict=True))
    sizes = array(_LENGTHS)
    sizes.frombytes(lengths)
    values: dict[str, bytes] = {}
    start = 0
    for cluster, size in zip(clusters, sizes, strict=True):
        values[cluster] = joined[start : start + size]
        start += size
    return values


_APEX, _ENT, _NS_HOST = Node(NodeKind.APEX), Node(NodeKind.ENT), Node(NodeKind.NS_HOST)
_SERVICE = NodeKind.SERVICE  # a module constant: reading an enum member off its class costs more
_FIXED_NAMES = {b"": _APEX, DNS: _ENT, NS_HOST: _NS_HOST}


class _ReadWhole(Exception):
    """Raised inside :meth:`Index.put_page` for a record that :meth:`Index.put` must store."""


class NotAName(FeddnsError, ValueError):
    """The bytes given as a name are not a sequence of labels of 1 to 63 bytes."""


class Index:
    """All shard and cluster records under one key prefix.

    ``names`` maps every name that one dict lookup can find (wire form relative
    to the zone, lowercased) to its :class:`Node`: each service
    (``<svc>.<ns>.<F>.svc``, a ``SERVICE`` node), each federation's
    ``_whoami.<F>.svc`` (a ``WHOAMI`` node, while the federation has a record), the
    empty non-terminals above those (``<ns>.<F>.svc``, ``<F>.svc``, ``svc``), the
    apex, ``dns`` and ``ns.dns``; shard and SRV names are found below their service
    (:meth:`lookup`). ``by_id`` maps a :data:`ServiceId` to the same
    ``SERVICE`` node; ``federations``
    maps a federation name to :class:`Federation`; ``invalid`` maps each key
    that failed to parse to the reason; ``skipped`` counts the skips logged
    (once per key and reason); ``defaulted`` maps each shard key read with the
    default policy because a policy field was bad to the reason (logged once);
    ``revision`` is the etcd revision applied.
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.names: dict[bytes, Node] = dict(_FIXED_NAMES)
        self.by_id: dict[ServiceId, Node] = {}
        self.federations: dict[str, Federation] = {}
        self.invalid: dict[str, str] = {}
        self.defaulted: dict[str, str] = {}
        self.skipped = 0
        self.revision = 0
        self._empty_non_terminals: Counter[bytes] = Counter()
        self._port_sets: dict[tuple[Port, ...], tuple[Port, ...]] = {}
        self._shard_count = 0
        self._unparsed: deque[Node] = deque()  # in load order
        self._cluster_lists: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._decided = False  # read_deciding() ran: a change keeps what it proved
        self.on_change: Callable[[Change], None] | None = None
        """Told of a change beyond the one a put or delete returns: parsing a service's
        pending records (a cluster known only by an unreadable shard is no longer known),
        or a second federation appearing (the MCS zone no longer shows the first). The
        feed sets it to tell the cache (``feddns.store.Feed``)."""

    def __len__(self) -> int:
        """The number of valid records held."""
        return self._shard_count + sum(len(fed.clusters) for fed in self.federations.values())

    def replace(self, items: Iterable[tuple[str, bytes]], revision: int = 0) -> None:
        """Add ``items`` (a full range read at ``revision``) to an empty index, and read the
        values that decide which names exist (:meth:`read_deciding`)."""
        self.put_page(items)
        self.revision = max(self.revision, revision)
        self.read_deciding()

    def put_page(self, items: Iterable[tuple[str, bytes]]) -> None:  # noqa: C901, PLR0912 - the load's loop, one frame
        """Store every ``(key, value)`` of ``items`` as :meth:`put` would, one after the
        other, without the :data:`Change` of each (a full load's pages, into the index
        being built: the change is the :class:`Reload` of installing it).

        A shard record's value is not read here: its key gives the names (service,
        shard, the cluster known), and the value's bytes wait in its service's
        ``pending`` until the service is first looked up or changed, or
        :meth:`parse_some` reaches it (docs/serve.md, "Loading"). A bad value is then
        logged, counted and kept in ``invalid`` as at a watch event, and a service none
        of whose records is valid goes. Reading every value before answering was 3 of
        the 4.5 us a record of a million-record load (docs/performance.md, "Cold load").

        Long because it is the load's inner loop (1 us saved here is 1 s sooner ready). A
        shard key of the service split just before costs one ``rpartition``
        (:class:`RangeSplitter`); every other record (a cluster record, a bad key, a key
        stored twice) goes through :meth:`put`.
        """
        split = RangeSplitter(self.layout).split
        by_id, invalid, defaulted, unparsed = self.by_id, self.invalid, self.defaulted, self._unparsed
        last_service: object = None  # the service of the shard stored before, and its records so far:
        node: Node = _APEX  # a put may remove a node, so after one it is looked up again
        values: dict[str, bytes] = {}  # sealed into node.pending when the service changes (_sealed)
        refs: dict[str, int] = {}  # the shard count of each cluster in the service's federation
        pending_refs: dict[str, int] = {}  # and its unread part
        added = 0
        for key, value in items:
            try:
                service, cluster = split(key)
                if isinstance(service, str):  # a cluster record
                    raise _ReadWhole
                if (invalid and key in invalid) or (defaulted and key in defaulted):
                    raise _ReadWhole  # a record that was invalid before
                if service is not last_service:  # the splitter gives a service's shards one tuple
                    if values:
                        node.pending, values = _sealed(values, self._cluster_lists), {}
                    found = by_id.get(service)
                    node = found if found is not None else self._add_service(service)
                    if node.pending is not None:  # the service goes on from the page before
                        values, node.pending = _unsealed(node.pending), None
                    elif node.shards:
                        raise _ReadWhole  # a service read already (a record put before)
                    else:
                        unparsed.append(node)
                        pending_namespaces = node.federation.pending_namespaces  # type: ignore[union-attr]
                        pending_namespaces[service[1]] = pending_namespaces.get(service[1], 0) + 1
                    refs = node.federation.shard_refs  # type: ignore[union-attr]
                    pending_refs = node.federation.pending_refs  # type: ignore[union-attr]
                    last_service = service
                if cluster in values:
                    raise _ReadWhole  # stored twice: compared with the first as a change is
            except (RecordError, _ReadWhole):
                if values:  # sealed before put() may read the service's records
                    node.pending, values = _sealed(values, self._cluster_lists), {}
                self.put(key, value)  # a bad key is logged and kept in ``invalid`` there
                last_service = None
                continue
            values[cluster] = value
            added += 1  # as _shard_added, inline
            count = refs.get(cluster, 0) + 1
            refs[cluster] = count
            pending_refs[cluster] = pending_refs.get(cluster, 0) + 1
            if count == 1:
                node.federation._refresh(cluster)  # type: ignore[union-attr]
        if values:
            node.pending = _sealed(values, self._cluster_lists)
        self._shard_count += added

    @property
    def unparsed(self) -> int:
        """Services whose records wait to be parsed (or that have gone since), at most."""
        return len(self._unparsed)

    def parse_some(self, services: int) -> int:
        """Parse the pending records of up to ``services`` services of the last full load
        (see :meth:`put_page`); returns how many may still wait. ``feddns serve`` calls it
        between queries once it is ready, so that a bad record is reported soon after
        a load and not only when its service is first asked for."""
        unparsed = self._unparsed
        while unparsed and (services > 0 or unparsed[0].pending is None):
            node = unparsed.popleft()
            if node.pending is not None:  # else parsed already, when looked up or changed
                self._parse(node)
                services -= 1
        return len(unparsed)

    def read_deciding(self) -> None:
        """Read, of the values a full load stored unread, those that decide which names exist
        and which clusters are known, so that no answer depends on a value not read
        (docs/serve.md, "Loading"); a server answers only after this.

        What a key alone says is proven by a value read: a namespace (and so its federation,
        ``_whoami`` and the names above) exists once one of its services has a valid value,
        and a cluster without a record is known (to the cluster-name option, ``_whoami`` and
        the tiers) once one of its shards is valid. Services are read in load order, each
        only while it may prove something not yet proven: with valid records one service a
        namespace and one shard a cluster, so a million records of 100 namespaces read about
        100 services here; a namespace or cluster whose values are all bad is read whole, and
        goes. After it, a change that takes away a proof (a service or shard deleted, a
        cluster record deleted) reads what proves it again (:meth:`_keep_decided`).
        Everything else a service's values say waits for its first lookup or
        :meth:`parse_some`.
        """
        self._decided = True
        wanted: dict[Federation, tuple[set[str], set[str]]] = {}
        for fed in self.federations.values():
            namespaces = {ns for ns in fed.pending_namespaces if fed.undecided_namespace(ns)}
            clusters = {c for c in fed.pending_refs if fed.undecided_cluster(c)}
            if namespaces or clusters:
                wanted[fed] = (namespaces, clusters)
        self._read_wanted(wanted)

    def _read_wanted(self, wanted: dict[Federation, tuple[set[str], set[str]]]) -> None:
        """Parse pending services in load order until each namespace and cluster of ``wanted``
        (by federation) is proven or read whole (:meth:`read_deciding`)."""
        for node in self._unparsed:
            if not wanted:
                return
            pending = node.pending
            if pending is None:
                continue
            fed: Federation = node.federation  # type: ignore[assignment]
            want = wanted.get(fed)
            if want is None:
                continue
            namespaces, clusters = want
            namespace = node.service[1]  # type: ignore[index]
            if namespace not in namespaces and clusters.isdisjoint(pending[0]):
                continue
            self._parse(node)
            if namespace in namespaces and not fed.undecided_namespace(namespace):
                namespaces.discard(namespace)
            for cluster in pending[0]:
                if cluster in clusters and not fed.undecided_cluster(cluster):
                    clusters.discard(cluster)
            if not namespaces and not clusters:
                del wanted[fed]

    def _keep_decided(self, federation: str, namespace: str | None, cluster: str) -> None:
        """After a change took a valid record of ``namespace`` (``None``: no service went)
        or ``cluster`` away: read again what proves them, while values wait unread."""
        fed = self.federations.get(federation)
        if not self._decided or fed is None or not fed.pending_refs:
            return
        namespaces = {namespace} if namespace is not None and fed.undecided_namespace(namespace) else set()
        clusters = {cluster} if fed.undecided_cluster(cluster) else set()
        if namespaces or clusters:
            self._read_wanted({fed: (namespaces, clusters)})

    def parse_all(self) -> None:
        """Parse every pending record now (:meth:`parse_some` until none waits)."""
        while self.parse_some(4096):
            pass

    def _parse(self, node: Node) -> Node | None:
        """Read ``node``'s pending records into its shards; ``node``, or ``None`` when none of
        them was valid and the service has gone with them.

        A plain valid shard (one port list or none, no policy problem, no endpoints) is
        stored here; every other record is uncounted and put again through :meth:`put`,
        which logs, counts and keeps what is wrong as for a watch event.
        """
        pending, node.pending = node.pending, None
        assert pending is not None and node.service is not None and node.shards is not None
        shards, port_sets, loads = node.shards, self._port_sets, load_json
        federation, namespace, service = node.service
        fed: Federation = node.federation  # type: ignore[assignment]
        _decrement(fed.pending_namespaces, namespace)
        for cluster in pending[0]:
            _decrement(fed.pending_refs, cluster)
        for cluster, value in _unsealed(pending).items():
            try:
                cluster_ips, external_ips, ports, ready, policy, endpoints, problem = read_shard(loads(value))
                if problem is not None or endpoints is not None:
                    raise _ReadWhole
            except (RecordError, NotJSON, _ReadWhole):
                known = self._shard_removed(fed, cluster)  # counted at the load: again by put() if valid
                self.put(self.layout.shard_key_of((federation, namespace, service, cluster)), value)
                if not known and not fed.is_known(cluster) and self.on_change is not None:
                    self.on_change(FederationChanged(federation))
                continue
            if len(ports) > 1:
                ports = port_sets.setdefault(ports, ports)
            shards[cluster] = Shard(cluster_ips, external_ips, ports, ready, policy)
        if shards:
            return node
        self._drop_service(node)
        return None

    # -- reading ------------------------------------------------------------------

    def lookup(self, rel: bytes) -> Node | None:
        """The node for a name in wire form, lowercased, relative to the zone (no root
        label: ``b"\\x09myservice\\x04myns..."``), or ``None`` when it is a name that
        does not exist.

        One dict lookup finds every service, empty non-terminal and fixed name. A
        name below those is read label by label from the left until the rest is a
        name that exists, so the labels read are proven well-formed on the way:
        one label below a service may be a shard or ``_<proto>``, two may be an
        SRV name or a headless endpoint's name (``<hostname>.<cluster>``);
        anything else below an existing name does not exist. Raises
        :class:`NotAName` when ``rel`` is not a sequence of labels of 1 to 63
        bytes (a name the common reader cut wrongly, see ``feddns.dns.wire``).
        """
        names = self.names
        node = names.get(rel)
        if node is not None:
            if node.pending is not None and self._parse(node) is None:
                return self.lookup(rel)  # the service went with its records: what is the name now?
            return node
        first = rel[0]
        if first < len(rel) and 0 < first <= MAX_LABEL_BYTES:  # the usual miss: one label below a name that exists
            parent = names.get(rel[first + 1 :])
            if parent is not None:
                if parent.kind != _SERVICE:
                    return None
                if parent.pending is not None and self._parse(parent) is None:
                    return self.lookup(rel)
                return _below_service(parent, rel[1 : first + 1])
        return self._walk(rel)

    def children_are_named(self, parent: bytes) -> bool:
        """True when every name one label below ``parent`` (wire form, lowercased,
        relative to the zone, no root label) that exists is a key of :attr:`names`,
        now and after any change: ``parent`` has fewer than :data:`NAMED_DEPTH` labels.
        Then ``<label>.<parent>`` is a name that does not exist (NXDOMAIN, RFC 8020)
        exactly when ``label`` lowercased, in wire form, before ``parent`` is no key of
        :attr:`names` (the cache's parent envelopes rely on it, ``feddns.dns.cache``).
        ``parent`` must be a sequence of labels (a name :meth:`lookup` read)."""
        pos = depth = 0
        while pos < len(parent):
            depth += 1
            if depth >= NAMED_DEPTH:
                return False
            pos += parent[pos] + 1
        return True

    def _walk(self, rel: bytes) -> Node | None:
        """:meth:`lookup` of a name that is not one label below an existing name."""
        names = self.names
        size = len(rel)
        pos = depth = 0
        while True:
            length = rel[pos]
            if length > MAX_LABEL_BYTES or not length:
                raise NotAName(rel)
            pos += length + 1
            if pos > size:
                raise NotAName(rel)
            depth += 1
            parent = names.get(rel[pos:])
            if parent is not None:
                break
        if parent.kind != _SERVICE or depth != _SRV_OR_ENDPOINT_DEPTH:
            return None
        if parent.pending is not None and self._parse(parent) is None:
            return self.lookup(rel)
        first = rel[0]
        label, second = rel[1 : first + 1], rel[first + 1]
        second_label = rel[first + 2 : first + 2 + second]
        if label[:1] != b"_":  # <hostname>.<cluster>.<svc>...: a headless endpoint
            return _endpoint_name(parent, second_label, label)
        if second_label[:1] != b"_":
            return None
        return _srv_name(parent, label[1:], second_label[1:])

    # -- changing -----------------------------------------------------------------

    def put(self, key: str, value: bytes) -> Change:
        """Store one record; a bad key or value is skipped, logged once and kept in
        ``invalid`` (and an older valid record under that key is removed)."""
        if self._unparsed:
            self._parse_service_of(key)
        try:
            parts = self.layout.split(key)
            obj = decode_json(value)
            if len(parts) == SHARD_KEY_PARTS:
                return self._put_shard(parts, obj)
            return self._put_cluster(parts[0], parts[1], ClusterRecord.from_json(obj))
        except RecordError as exc:
            reason = str(exc).removeprefix(f"{key}: ")
            if self.invalid.get(key) != reason:
                log.warning("skipping record %s: %s", key, reason)
                self.skipped += 1
            self.invalid[key] = reason
            return self._remove(key)

    def delete(self, key: str) -> Change:
        """Remove the record under ``key`` (nothing when there is none)."""
        if self._unparsed:
            self._parse_service_of(key)
        self.invalid.pop(key, None)
        self.defaulted.pop(key, None)
        return self._remove(key)

    def _parse_service_of(self, key: str) -> None:
        """Parse the pending records of ``key``'s service before ``key`` changes: the change
        is then compared with, and noted after, the record it replaces."""
        try:
            parts = self.layout.split(key)
        except RecordError:
            return
        node = self.by_id.get(parts[:3]) if len(parts) == SHARD_KEY_PARTS else None
        if node is not None and node.pending is not None:
            self._parse(node)

    def _remove(self, key: str) -> Change:
        try:
            parts = self.layout.split(key)
        except RecordError:
            return None
        if len(parts) == SHARD_KEY_PARTS:
            return self._delete_shard(parts)
        return self._delete_cluster(parts[0], parts[1])

    def _federation(self, name: str) -> Federation:
        fed = self.federations.get(name)
        if fed is None:
            if len(self.federations) == 1 and self.on_change is not None:
                # The MCS zone showed the only federation held; with two it shows none
                # (feddns.dns.responder, Responder._mcs_federation): its answers kept go.
                self.on_change(FederationChanged(next(iter(self.federations))))
            fed = self.federations[name] = Federation(name)
            wire = whoami_name(name)
            self.names[wire] = Node(NodeKind.WHOAMI, fed)
            self._add_parents(wire)
        return fed

    def _add_parents(self, wire: bytes) -> None:
        """Count one more name below each of ``wire``'s parents (up to ``svc``), each
        an empty non-terminal while a name is below it."""
        for parent in _parents(wire):
            count = self._empty_non_terminals[parent] + 1
            self._empty_non_terminals[parent] = count
            if count == 1:
                self.names[parent] = _ENT

    def _remove_parents(self, wire: bytes) -> None:
        """Count one name less below each of ``wire``'s parents; a parent with none left goes."""
        for parent in _parents(wire):
            _decrement(self._empty_non_terminals, parent)
            if parent not in self._empty_non_terminals:
                del self.names[parent]

    def _put_shard(self, parts: tuple[str, str, str, str], obj: Any) -> Change:
        fields = read_shard(obj)
        ports = fields.ports
        if len(ports) > 1:  # one-port tuples are shared already (feddns.records)
            ports = self._port_sets.setdefault(ports, ports)
        endpoints = None if fields.endpoints is None else Endpoints(fields.endpoints)
        shard = Shard(fields.cluster_ips, fields.external_ips, ports, fields.ready, fields.policy, endpoints)
        if self.invalid:
            self.invalid.pop(self.layout.shard_key_of(parts), None)
        if fields.problem is not None or self.defaulted:
            self._note_policy(self.layout.shard_key_of(parts), fields.problem)
        sid: ServiceId = parts[:3]
        cluster = sys.intern(parts[3])  # a million shards name a few clusters
        node = self.by_id.get(sid)
        if node is None:
            node = self._add_service(sid)
        shards: dict[str, Shard] = node.shards  # type: ignore[assignment]
        old = shards.get(cluster)
        if old is not None and old == shard:
            return None
        shards[cluster] = shard
        if old is None and self._shard_added(node, cluster):
            # A cluster known from now on: answers kept for it as the asker, in every service of
            # the federation, were made while its name was passed over (ECS or the address decided).
            return FederationChanged(sid[0])
        return ServiceChanged(sid)

    def _shard_added(self, node: Node, cluster: str) -> bool:
        """Count a shard new in ``node``'s service: the cluster is known from its first shard
        (True when it was not known before: it has no record)."""
        self._shard_count += 1
        fed: Federation = node.federation  # type: ignore[assignment]
        refs = fed.shard_refs
        count = refs.get(cluster, 0) + 1
        refs[cluster] = count
        if count == 1:
            fed._refresh(cluster)
            return cluster not in fed.clusters
        return False

    def _shard_removed(self, fed: Federation, cluster: str) -> bool:
        """Count a shard of ``cluster`` less in ``fed`` (:meth:`_shard_added` undone); False when
        the cluster is no longer known (no record and no shard left)."""
        self._shard_count -= 1
        _decrement(fed.shard_refs, cluster)
        return fed._refresh(cluster)

    def _note_policy(self, key: str, problem: str | None) -> None:
        """Log a bad policy field once per key and reason (the shard is kept, with the default policy)."""
        if problem is None:
            self.defaulted.pop(key, None)
        elif self.defaulted.get(key) != problem:
            self.defaulted[key] = problem
            log.warning("record %s: %s; reading it with the default policy (locality)", key, problem)

    def _add_service(self, sid: ServiceId) -> Node:
        federation, namespace, _ = sid
        fed = self._federation(federation)
        wire = service_name(sid)
        node = Node(NodeKind.SERVICE, fed, sid, {})
        self.names[wire] = self.by_id[sid] = node
        fed.namespaces[namespace] += 1
        self._add_parents(wire)
        return node

    def _delete_shard(self, parts: tuple[str, str, str, str]) -> Change:
        federation, namespace, service, cluster = parts
        sid: ServiceId = (federation, namespace, service)
        node = self.by_id.get(sid)
        if node is None or node.shards is None or cluster not in node.shards:
            return None
        del node.shards[cluster]
        fed = self.federations[federation]
        known = self._shard_removed(fed, cluster)
        went = not node.shards
        if went:
            self._drop_service(node)
        self._keep_decided(federation, namespace if went else None, cluster)
        known = known and fed.is_known(cluster)  # _keep_decided may have read its unread shards: all bad
        # A cluster no longer known: answers cached for it as the asker, in every
        # service of the federation, must go (the query path trusts their keys); and this
        # service's, which the federation no longer lists when it went with its last shard.
        return ServiceChanged(sid) if known else FederationChanged(federation, sid)

    def _drop_service(self, node: Node) -> None:
        """Remove a service that has no shard left: its name, the empty non-terminals above
        it that nothing else holds, and its federation when that is empty now."""
        sid: ServiceId = node.service  # type: ignore[assignment]
        federation, namespace, _ = sid
        wire = service_name(sid)
        del self.names[wire], self.by_id[sid]
        _decrement(self.federations[federation].namespaces, namespace)
        self._remove_parents(wire)
        self._drop_if_empty(federation)

    def _put_cluster(self, federation: str, cluster: str, record: ClusterRecord) -> Change:
        if self.invalid:
            self.invalid.pop(self.layout.cluster_key_of(federation, cluster), None)
        fed = self._federation(federation)
        if fed.clusters.get(cluster) == record:
            return None
        fed.clusters[cluster] = record
        fed._refresh(cluster)
        fed._rebuild_cidrs()
        return FederationChanged(federation)

    def _delete_cluster(self, federation: str, cluster: str) -> Change:
        fed = self.federations.get(federation)
        if fed is None or fed.clusters.pop(cluster, None) is None:
            return None
        fed._refresh(cluster)
        fed._rebuild_cidrs()
        self._keep_decided(federation, None, cluster)
        self._drop_if_empty(federation)
        return FederationChanged(federation)

    def _drop_if_empty(self, name: str) -> None:
        if self.federations[name].empty:
            del self.federations[name]
            wire = whoami_name(name)
            del self.names[wire]
            self._remove_parents(wire)

    def services_of(self, federation: str) -> list[ServiceId]:
        """The services of one federation."""
        return [sid for sid in self.by_id if sid[0] == federation]


def _parents(wire: bytes) -> list[bytes]:
    """The names above a service's, up to ``svc``: ``<ns>.<F>.svc``, ``<F>.svc``, ``svc``."""
    out: list[bytes] = []
    while True:
        wire = wire[wire[0] + 1 :]
        if not wire:
            return out
        out.append(wire)


def _below_service(parent: Node, label: bytes) -> Node | None:
    """A shard name (``C.<svc>...``) or a protocol's empty non-terminal (``_tcp.<svc>...``)."""
    assert parent.shards is not None
    if label[:1] != b"_":
        cluster = label.decode("latin-1")
        if cluster not in parent.shards:
            return None
        return Node(NodeKind.SHARD, parent.federation, parent.service, parent.shards, cluster=cluster)
    protocol = label[1:].decode("latin-1").upper()
    found = any(p.protocol == protocol for shard in parent.shards.values() for p in shard.ports)
    return _ENT if found else None


def _endpoint_name(parent: Node, cluster_label: bytes, hostname_label: bytes) -> Node | None:
    """``<hostname>.<cluster>.<svc>...`` when cluster's shard has an endpoint of that name."""
    assert parent.shards is not None
    cluster = cluster_label.decode("latin-1")
    shard = parent.shards.get(cluster)
    if shard is None or shard.endpoints is None:
        return None
    hostname = hostname_label.decode("latin-1")
    if hostname not in shard.endpoints.names:
        return None
    return Node(NodeKind.ENDPOINT, parent.federation, parent.service, parent.shards, cluster=cluster,
                hostname=hostname)


def _srv_name(parent: Node, port: bytes, protocol_label: bytes) -> Node | None:
    """``_<port>._<proto>.<svc>...`` when some shard has that named port."""
    assert parent.shards is not None
    name, protocol = port.decode("latin-1"), protocol_label.decode("latin-1").upper()
    if not any(p.protocol == protocol and p.name == name for s in parent.shards.values() for p in s.ports):
        return None
    return Node(NodeKind.SRV_NAME, parent.federation, parent.service, parent.shards,
                port_name=name, protocol=protocol)


def _decrement(counter: dict[Any, int], key: object) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


def pack_client(text: str) -> bytes | None:
    """The packed form of a client address as the transports give it (an IPv6
    address may carry a ``%zone``), or ``None`` when it is not an IP address."""
    return pack_ip(text.split("%", 1)[0])


def check_record(layout: Layout, key: str, value: bytes) -> None:
    """Check one stored ``(key, value)`` as :meth:`Index.put` reads it; raises
    :class:`RecordError` naming the key and what is wrong."""
    try:
        parts = layout.split(key)
        obj = decode_json(value)
        if len(parts) == SHARD_KEY_PARTS:
            read_shard(obj)
        else:
            ClusterRecord.from_json(obj)
    except RecordError as exc:
        if exc.key is not None:
            raise
        raise RecordError(str(exc), key) from exc
