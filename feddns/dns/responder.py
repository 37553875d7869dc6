"""The query path: packed answers looked up by the query's bytes.

Two caches sit over the index, both filled on first use and emptied when
records change (never on a timer):

* the **reply cache** maps a query's bytes after the ID (flags, counts,
  question, OPT) to the finished replies, one per rotation; a hit costs one
  dict lookup and one concatenation with the query's ID, and is done inline by
  the UDP transport (``feddns.dns.transport``). A reply that depends on the
  source address (CONTRACTS 3, rule 3) is kept in a second map keyed by
  ``(bytes, address)``.
* the **answer cache** maps ``(qname, qtype, qclass, source cluster, EDNS
  state, size limit)`` to replies packed for a canonical query (ID 0,
  lowercase qname, RD and CD clear). A reply-cache miss that hits here (a new
  ID is not a miss; a new letter case or RD/CD bit is) only patches the
  flags and the question's case: RFC 1035 2.3.3, the question echoed as asked.

Each cache entry is registered under the service its name belongs to, so a
change to one service's records drops only that service's entries
(:class:`feddns.dns.index.ServiceChanged`); a change that can create or remove
names drops everything.
"""

import itertools
import logging
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from dnslib import RR, DNSLabel

from feddns.dns import answer, index, policy, wire
from feddns.dns.index import EVERYTHING, Change, Index, Node, ServiceChanged, ServiceId
from feddns.records import IPAddress

log = logging.getLogger(__name__)

MAX_ENTRIES = 200_000
"""Reply-cache entries kept before the cache is emptied (bounds memory against
queries for random names)."""

Labels = tuple[str, str, str]
"""Metric labels of an answer: ``(qtype, rcode, source)``; source is
``"cluster"`` when the asking cluster was found, else ``"none"``."""


@dataclass(frozen=True, slots=True)
class Settings:
    """How Federated-DNS answers (the ``feddns serve`` flags).

    ``zone`` ends with a dot; ``ttl`` and ``negative_ttl`` are seconds;
    ``option_code`` is the EDNS0 option carrying the cluster name (CONTRACTS
    3); ``stable`` turns off rotation; ``ns_addresses`` answer ``ns.dns.Z``;
    ``serial`` is the SOA serial.
    """

    zone: str = "federation."
    ttl: int = 30
    negative_ttl: int = 30
    option_code: int = 0xFEDD
    stable: bool = False
    ns_addresses: tuple[IPAddress, ...] = ()
    serial: int = 1


class Entry:
    """A cached reply: ``next()`` gives the next rotation (bytes after the ID).

    Entries made from one answer share its ``turn`` counter, so the rotation
    advances across askers whose queries differ in bytes (IDs aside), such as
    a different cookie or letter case.
    """

    __slots__ = ("next", "hits", "labels")

    def __init__(self, replies: list[bytes], labels: Labels, turn: Iterator[int]) -> None:
        self.next: Callable[[], bytes]
        if len(replies) == 1:
            self.next = itertools.repeat(replies[0]).__next__
        else:
            self.next = lambda: replies[next(turn) % len(replies)]
        self.hits = 0
        self.labels = labels


@dataclass(slots=True)
class _Plan:
    replies: list[bytes]
    labels: Labels
    bucket: ServiceId | None
    by_address: bool
    turn: Iterator[int] = field(default_factory=itertools.count)


@dataclass
class Stats:
    """Counts the metrics read (``feddns.dns.metrics``)."""

    answered: Counter[Labels] = field(default_factory=Counter)
    dropped: int = 0


class Responder:
    """Answers queries from ``index`` under ``settings``.

    ``ready`` stays False until the store's first load; until then every
    well-formed query in the zone gets SERVFAIL, never NXDOMAIN.
    ``udp_replies`` is the reply cache the UDP transport reads directly.
    """

    def __init__(self, idx: Index, settings: Settings) -> None:
        self.index = idx
        self.settings = settings
        self.ready = False
        self.stats = Stats()
        self.udp_replies: dict[bytes, Entry] = {}
        self.tcp_replies: dict[bytes, Entry] = {}
        self._by_address: dict[tuple[bytes, bool, str], Entry] = {}
        self._answers: dict[tuple[object, ...], _Plan] = {}
        self._buckets: dict[ServiceId | None, list[tuple[dict, object]]] = {}
        self._zone_labels = tuple(label.encode() for label in settings.zone.rstrip(".").split("."))
        self._soa = answer.soa_rr(settings.zone, settings.serial, settings.negative_ttl, settings.negative_ttl)

    # -- the query path ---------------------------------------------------------

    def respond(self, data: bytes, client: str, tcp: bool) -> bytes | None:
        """The reply to the packet ``data`` from address ``client``, or ``None`` to drop it."""
        entry = (self.tcp_replies if tcp else self.udp_replies).get(data[2:])
        if entry is not None:
            entry.hits += 1
            return data[:2] + entry.next()
        return self.slow(data, client, tcp)

    def slow(self, data: bytes, client: str, tcp: bool) -> bytes | None:
        """The reply to a packet the reply cache did not hold; caches what it can.

        Never raises: a failure answers SERVFAIL and is logged.
        """
        try:
            return self._slow(data, client, tcp)
        except Exception:
            log.exception("failed to answer a query; answering SERVFAIL")
            return self._count(wire.error_reply(data, wire.SERVFAIL), "unknown", wire.SERVFAIL)

    def _slow(self, data: bytes, client: str, tcp: bool) -> bytes | None:
        try:
            _, flags, *_ = wire.parse_header(data)
        except wire.ShortHeader:
            self.stats.dropped += 1
            return None
        if flags & wire.QR:
            self.stats.dropped += 1  # a response: never answer one (no loops)
            return None
        if flags & wire.OPCODE_MASK:
            return self._count(wire.error_reply(data, wire.NOTIMP), "unknown", wire.NOTIMP)
        key = data[2:]
        entry = self._by_address.get((key, tcp, client))
        if entry is not None:
            entry.hits += 1
            return data[:2] + entry.next()
        try:
            query = wire.parse_query(data)
        except wire.FormError as exc:
            log.debug("FORMERR to %s: %s", client, exc)
            return self._count(wire.error_reply(data, wire.FORMERR), "unknown", wire.FORMERR)
        try:
            plan = self._plan(query, client, tcp)
        except wire.FormError as exc:  # a malformed ECS option
            log.debug("FORMERR to %s: %s", client, exc)
            return self._count(wire.error_reply(data, wire.FORMERR), "unknown", wire.FORMERR)
        if plan is None:  # not ready: SERVFAIL, not cached
            reply = self._pack_canonical(query, wire.SERVFAIL, tcp)
            return self._count(data[:2] + _patch(reply, query), answer.qtype_name(query.qtype), wire.SERVFAIL)
        entry = Entry([_patch(reply, query) for reply in plan.replies], plan.labels, plan.turn)
        self._store(entry, key, tcp, client if plan.by_address else None, plan.bucket)
        entry.hits += 1
        return data[:2] + entry.next()

    def _count(self, reply: bytes, qtype: str, rcode: int) -> bytes:
        self.stats.answered[(qtype, answer.RCODE_NAMES.get(rcode, str(rcode)), "none")] += 1
        return reply

    def _store(self, entry: Entry, key: bytes, tcp: bool, client: str | None, bucket: ServiceId | None) -> None:
        if len(self.udp_replies) + len(self.tcp_replies) + len(self._by_address) >= MAX_ENTRIES:
            self._drop_all()
        if client is None:
            replies = self.tcp_replies if tcp else self.udp_replies
            replies[key] = entry
            self._buckets.setdefault(bucket, []).append((replies, key))
        else:
            self._by_address[(key, tcp, client)] = entry
            self._buckets.setdefault(bucket, []).append((self._by_address, (key, tcp, client)))

    # -- building answers -------------------------------------------------------

    def _plan(self, query: wire.Query, client: str, tcp: bool) -> _Plan | None:
        edns = query.edns
        limit = 65535 if tcp else max(512, edns.payload) if edns else 512
        qtype = answer.qtype_name(query.qtype)
        if edns is not None and edns.version > 0:
            reply = self._pack(query, wire.BADVERS, limit, edns=answer.EdnsReply(False, (), 1))
            return _Plan([reply], (qtype, "BADVERS", "none"), None, False)
        rel = self._relative(query)
        if rel is None or query.qclass != wire.CLASS_IN:
            reply = self._pack(query, wire.REFUSED, limit, authoritative=False, edns=_edns(edns, None))
            return _Plan([reply], (qtype, "REFUSED", "none"), None, False)
        if not self.ready:
            return None
        node = index.lookup(self.index, rel)
        source = self._source(node, edns, client)
        key = (query.labels, query.qtype, query.qclass, source.cluster, source.ecs,
               edns is not None and edns.flags & wire.EDNS_DO, edns is not None, limit)
        plan = self._answers.get(key)
        if plan is None:
            plan = self._build(query, node, source, limit)
            plan.by_address = source.by_address
            self._answers[key] = plan
            self._buckets.setdefault(plan.bucket, []).append((self._answers, key))
        return plan

    def _relative(self, query: wire.Query) -> tuple[str, ...] | None:
        zone = self._zone_labels
        labels = query.labels
        if len(labels) < len(zone) or labels[len(labels) - len(zone):] != zone:
            return None
        return tuple(label.decode("latin-1") for label in reversed(labels[: len(labels) - len(zone)]))

    def _source(self, node: Node | None, edns: wire.Edns | None, client: str) -> policy.Source:
        fed = self.index.federations.get(node.service[0]) if node and node.service else None
        if fed is None:
            ecs = edns.option(wire.OPTION_ECS) if edns else None
            if ecs is None:
                return policy.NO_SOURCE
            raw = policy.parse_ecs(ecs)[2]
            return policy.Source(None, ecs=raw[:3] + b"\0" + raw[4:])
        return policy.find_source(fed, edns, index.parse_ip(client), self.settings.option_code)

    def _build(self, query: wire.Query, node: Node | None, source: policy.Source, limit: int) -> _Plan:
        edns = _edns(query.edns, source.ecs)
        found = "cluster" if source.cluster else "none"
        qtype = answer.qtype_name(query.qtype)
        bucket = node.service if node else None
        if node is None:
            reply = self._pack(query, wire.NXDOMAIN, limit, authority=[self._soa], edns=edns)
            return _Plan([reply], (qtype, "NXDOMAIN", found), None, False)
        orders = self._records(query, node, source)
        if not orders or not orders[0][0]:
            reply = self._pack(query, wire.NOERROR, limit, authority=[self._soa], edns=edns)
            return _Plan([reply], (qtype, "NOERROR", found), bucket, False)
        replies = [
            self._pack(query, wire.NOERROR, limit, answer=ans, additional=add, edns=edns) for ans, add in orders
        ]
        return _Plan(replies, (qtype, "NOERROR", found), bucket, False)

    def _records(self, query: wire.Query, node: Node, source: policy.Source) -> list[tuple[list[RR], list[RR]]]:
        """Every rotation of (answer, additional) records for ``node``; [] for NODATA."""
        owner = DNSLabel(list(query.labels))
        ttl = self.settings.ttl
        qtype = query.qtype
        versions = {wire.A: (4,), wire.AAAA: (6,), wire.ANY: (4, 6)}.get(qtype, ())
        if node.kind == index.APEX:
            records = []
            if qtype in (wire.SOA, wire.ANY):
                records.append(answer.soa_rr(self.settings.zone, self.settings.serial, self.settings.negative_ttl, ttl))
            if qtype in (wire.NS, wire.ANY):
                records.append(answer.ns_rr(self.settings.zone, ttl))
                glue = [answer.address_rr(f"ns.dns.{self.settings.zone}", ip, ttl) for ip in self.settings.ns_addresses]
                return [(records, glue)]
            return [(records, [])]
        if node.kind == index.NS_HOST:
            ips = [ip for ip in self.settings.ns_addresses if ip.version in versions]
            return [([answer.address_rr(owner, ip, ttl) for ip in ips], [])]
        if node.kind == index.SRV_NAME:
            return self._srv_records(owner, node, source) if qtype in (wire.SRV, wire.ANY) else []
        if node.kind not in (index.SERVICE, index.SHARD) or not versions:
            return []
        groups = self._address_groups(node, source, versions)
        return [([answer.address_rr(owner, ip, ttl) for ip in order], [])
                for order in policy.rotations(groups, self.settings.stable)]

    def _address_groups(self, node: Node, source: policy.Source, versions: tuple[int, ...]) -> list[list[IPAddress]]:
        assert node.service is not None
        shards = self.index.services[node.service]
        fed = self.index.federations[node.service[0]]
        if node.kind == index.SHARD:
            assert node.cluster is not None
            record, own = shards[node.cluster], node.cluster == source.cluster
            return [[ip for v in versions for ip in policy.shard_addresses(record, own, v)]]
        return [group for v in versions for group in policy.address_tiers(fed, shards, source.cluster, v)]

    def _srv_records(self, owner: DNSLabel, node: Node, source: policy.Source) -> list[tuple[list[RR], list[RR]]]:
        assert node.service is not None and node.port_name and node.protocol
        shards = self.index.services[node.service]
        fed = self.index.federations[node.service[0]]
        groups = policy.srv_tiers(fed, shards, source.cluster, node.port_name, node.protocol)
        base = policy.service_name(node.service, self.settings.zone)
        ttl = self.settings.ttl
        out = []
        for order in policy.rotations(groups, self.settings.stable):
            records, extra = [], []
            for t in order:
                target = f"{t.cluster}.{base}"
                records.append(answer.srv_rr(owner, t.priority, t.weight, t.port, target, ttl))
                own = t.cluster == source.cluster
                for version in (4, 6):
                    for ip in policy.shard_addresses(shards[t.cluster], own, version):
                        extra.append(answer.address_rr(target, ip, ttl))
            out.append((records, extra))
        return out

    def _pack(self, query: wire.Query, rcode: int, limit: int, **sections: object) -> bytes:
        return answer.pack(query.labels, query.qtype, query.qclass, rcode, limit=limit, **sections)  # type: ignore[arg-type]

    def _pack_canonical(self, query: wire.Query, rcode: int, tcp: bool) -> bytes:
        limit = 65535 if tcp else 512
        return self._pack(query, rcode, limit, edns=_edns(query.edns, None))

    # -- changes ----------------------------------------------------------------

    def changed(self, change: Change) -> None:
        """Drop the cached answers that ``change`` (from the index) can affect."""
        if change is None:
            return
        if isinstance(change, ServiceChanged):
            for cache, key in self._buckets.pop(change.service, ()):
                entry = cache.pop(key, None)
                if isinstance(entry, Entry):
                    self.stats.answered[entry.labels] += entry.hits
            return
        if change == EVERYTHING:
            self._drop_all()

    def _drop_all(self) -> None:
        for entry in self.entries():
            self.stats.answered[entry.labels] += entry.hits
        self.udp_replies.clear()
        self.tcp_replies.clear()
        self._by_address.clear()
        self._answers.clear()
        self._buckets.clear()

    def entries(self) -> Iterator[Entry]:
        """Every cached reply (for metrics; safe to call from another thread)."""
        for cache in (self.udp_replies, self.tcp_replies, self._by_address):
            yield from list(cache.values())


def _edns(edns: wire.Edns | None, ecs: bytes | None) -> answer.EdnsReply | None:
    if edns is None:
        return None
    options = ((wire.OPTION_ECS, ecs),) if ecs is not None else ()
    return answer.EdnsReply(bool(edns.flags & wire.EDNS_DO), options)


_FLAGS = struct.Struct("!H")


def _patch(canonical: bytes, query: wire.Query) -> bytes:
    """The reply to ``query`` from one packed for the canonical query, less its ID:
    RD and CD copied (RFC 1035 4.1.1, RFC 4035 3.1.6), the qname in the
    query's case."""
    flags = _FLAGS.unpack_from(canonical, 2)[0] | (query.flags & (wire.RD | wire.CD))
    end = 12 + len(query.qname_wire)
    return _FLAGS.pack(flags) + canonical[4:12] + query.qname_wire + canonical[end:]
