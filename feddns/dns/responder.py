"""The query path: match the zone, look the name up, switch on the node kind and qtype, pack.

It reads like CoreDNS's ``plugin/etcd/handler.go``, behind the cache
(``feddns.dns.cache``, which looks a UDP packet up before it comes here and
decides what is kept) and with the records of the store's feed (``Records``:
the index, ``feddns.dns.index``) instead of an etcd call. One synchronous
function per query over the index as it is between two changes: no lock, no
await, no etcd call. Work happens when records change (answers are built on
first use after a change, then kept by the cache).

A query goes (:meth:`Responder.respond`):

1. a query whose envelope (its bytes but the ID and qname) was answered
   NXDOMAIN before (``Cache.envelopes``): its qname alone is read and looked
   up, and a name that does not exist gets the envelope's NXDOMAIN parts around
   its question (nothing is kept per name);
2. :func:`wire.read_common` reads the common shape with a few slices; anything
   else goes to :func:`wire.parse_query`, which drops short packets and
   responses and answers FORMERR or NOTIMP;
3. :meth:`Responder.serve`: match the zone (REFUSED outside it or class IN),
   SERVFAIL until the first load, look the name up (NXDOMAIN from the zone's
   template when it does not exist); then the source cluster
   (``policy.find_source``) and the answer the cache keeps under
   ``(qname lowercased, QTYPE, source cluster)``, else switch on the node kind
   and qtype to build it (``policy``, ``answer``). The reply splices the query's
   ID, flags, question and OPT around the answer's records. ``_whoami.<F>.svc``
   is found as any name is, and built per query on the cache's miss, never kept:
   its answer says how this asker was identified.
"""

import logging
from dataclasses import dataclass, field
from typing import Protocol

from feddns import names
from feddns.dns import answer, policy, wire
from feddns.dns.answer import Answer, Sections, Template
from feddns.dns.cache import Cache, Entry, FirstTier, Labels, NxdomainParts
from feddns.dns.index import Index, Node, NodeKind, NotAName
from feddns.dns.wire import CLASS_IN, FIRST_ROOT, LAST_ROOT, TXT, MetaType, QType, Query, Rcode
from feddns.keys import Layout
from feddns.names import ServiceId
from feddns.records import IPAddress, NoneReady

log = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
"""``--cache-size`` default: 64 MiB."""

_VERSIONS: dict[int, tuple[int, ...]] = {QType.A: (4,), QType.AAAA: (6,), QType.ANY: (4, 6)}
_QTYPE_LABELS = {int(t): t.name for t in QType}
_TRANSFERS = (QType.AXFR, QType.IXFR)
_ERROR_RCODES: dict[int, Rcode] = {
    # meta-TYPEs carry data of one message, never records of a name (RFC 6895 3.1, RFC 6891 6.1.1);
    # a TKEY query must also carry a TKEY record (RFC 2930 4), and this server implements none
    QType.OPT: Rcode.FORMERR, MetaType.TKEY: Rcode.FORMERR, MetaType.TSIG: Rcode.FORMERR,
    MetaType.MAILB: Rcode.NOTIMP, MetaType.MAILA: Rcode.NOTIMP,  # "does not support the kind of query" (RFC 1035 4.1.1)
    QType.AXFR: Rcode.NOTAUTH, QType.IXFR: Rcode.NOTAUTH,  # no zone at the qname (RFC 5936 2.2.1); at the apex: REFUSED
}
"""The QTYPEs answered with an error whatever the name, as BIND answers them (docs/serve.md)."""
_ADDRESS_KINDS = (NodeKind.SERVICE, NodeKind.SHARD, NodeKind.ENDPOINT)
_MATRIX_KINDS = (NodeKind.SERVICE, NodeKind.SRV_NAME)
"""The names whose answers the locality matrix counts: a service's, and its SRV names
(a shard's name asks for one cluster by name, whatever the tiers)."""
_WHOAMI = NodeKind.WHOAMI  # a module constant: reading an enum member off its class costs more


def qtype_label(qtype: int) -> str:
    """The metric label of ``qtype``: its mnemonic when Federated-DNS knows the
    type, else ``"other"`` (so that the label takes a bounded set of values)."""
    return _QTYPE_LABELS.get(qtype, "other")


@dataclass(frozen=True, slots=True)
class AnswerSettings:
    """How Federated-DNS answers: the answer group of ``feddns serve``'s settings
    (:class:`feddns.server.settings.ServeSettings`, docs/serve.md)."""

    zone: str = "federation."
    """The zone served, ending with a dot (``--zone``)."""
    ttl: int = 30
    """TTL of answers, in seconds (``--ttl``)."""
    negative_ttl: int = 30
    """TTL of NXDOMAIN and NODATA, in seconds: the SOA's minimum (RFC 2308; ``--negative-ttl``)."""
    option_code: int = 0xFEDD
    """The EDNS0 option carrying the asking cluster's name (docs/reference.md section 3;
    ``--cluster-option-code``)."""
    stable: bool = False
    """One fixed order per answer instead of rotating it (``--order stable``)."""
    none_ready: NoneReady = NoneReady.ANSWER
    """What a service none of whose shards is ready answers, unless its records say
    (``--none-ready``; docs/reference.md section 2)."""
    ns_addresses: tuple[IPAddress, ...] = ()
    """The addresses ``ns.dns.<zone>`` answers (``--ns-address``; else the listen addresses)."""
    serial: int = 1
    """The SOA serial."""
    cache_size: int = DEFAULT_CACHE_BYTES
    """The cache's bound, in bytes (``--cache-size``)."""
    mcs_zone: str | None = None
    """The Multi-Cluster Services zone also answered, ending with a dot (``--mcs-zone``; ``None``: off)."""
    mcs_federation: str | None = None
    """The federation the MCS zone answers for (``--mcs-federation``; ``None``: the only one held)."""
    max_udp_size: int = answer.OUR_PAYLOAD
    """The largest UDP reply, in bytes, whatever the asker's EDNS payload size
    (``--max-udp-size``; 1,232 as DNS Flag Day 2020 advises)."""


@dataclass
class Stats:
    """Counts the metrics read (``feddns.dns.metrics``): queries answered without
    a cache entry, and the hits of entries no longer cached, by labels (a plain
    dict: its ``get`` and store cost the query path less than a ``Counter``'s ``+=``);
    ``first_tiers`` the hits of entries no longer cached by their locality matrix key;
    ``dropped`` the packets not answered (not queries); ``unsent`` the UDP replies the
    kernel would not take (``feddns.dns.transport.UdpServer``)."""

    answered: dict[Labels, int] = field(default_factory=dict)
    first_tiers: dict[FirstTier, int] = field(default_factory=dict)
    dropped: int = 0
    unsent: int = 0

    def add_hits(self, entry: Entry) -> None:
        """Keep the hits of an entry that leaves the cache."""
        hits = entry.hits
        if hits:
            self.answered[entry.labels] = self.answered.get(entry.labels, 0) + hits
            first = entry.first
            if first is not None:
                self.first_tiers[first] = self.first_tiers.get(first, 0) + hits


class Templates:
    """The replies of a zone that carry no records of a name, made once
    (``feddns.dns.answer``): NXDOMAIN and NODATA (with the SOA, RFC 2308),
    REFUSED (not authoritative), SERVFAIL, BADVERS and FORMERR, and the error
    of each QTYPE that gets one at every name (``errors``: meta-TYPEs, mailbox
    QTYPEs, transfers), for the zone ``zone`` (wire form).

    ``absent_for`` maps each QTYPE the server knows (in class IN) to the reply
    at a name that does not exist, a template that counts its own queries in
    ``hits`` (labelled with that qtype): NXDOMAIN, or the QTYPE's error;
    ``nxdomain`` serves the other types, counting its own queries too when they
    have no ECS option (labelled ``other``), else by the responder's ``Stats``.
    """

    def __init__(self, zone: str, serial: int, negative_ttl: int) -> None:
        self.zone = answer.name_wire(zone)
        soa = answer.soa_rr(self.zone, zone, serial, negative_ttl, negative_ttl)
        negative = Sections(authority=[soa])
        self.nxdomain = Template(Answer(Rcode.NXDOMAIN, negative), ("other", "NXDOMAIN", "none"))
        self.errors = {qtype: Template(Answer(rcode, authoritative=False), (qtype_label(qtype), rcode.name, "none"))
                       for qtype, rcode in _ERROR_RCODES.items()}
        self.absent_for = {int(t): Template(Answer(Rcode.NXDOMAIN, negative), (t.name, "NXDOMAIN", "none"))
                           for t in QType} | self.errors
        self.nodata = Template(Answer(Rcode.NOERROR, negative), ("", "NOERROR", ""))
        self.refused = Template(Answer(Rcode.REFUSED, authoritative=False), ("", "REFUSED", ""))
        self.servfail = Template(Answer(Rcode.SERVFAIL), ("", "SERVFAIL", ""))
        self.badvers = Template(Answer(Rcode.BADVERS), ("", "BADVERS", ""))
        self.formerr = Template(Answer(Rcode.FORMERR, authoritative=False), ("", "FORMERR", ""))
        self.soa = soa

    def counted(self) -> list[Template]:
        """The templates that count their own queries (for the metrics)."""
        return [*self.absent_for.values(), self.nxdomain]


class Zone:
    """A zone served: ``name`` (ending with a dot), ``wire`` its name in wire form,
    its ``templates``, and whether it is the Multi-Cluster Services zone (``mcs``:
    names ``<svc>.<ns>.svc.ZONE``, the federation's label left out;
    docs/reference.md section 1)."""

    def __init__(self, name: str, settings: AnswerSettings, mcs: bool) -> None:
        self.name = name
        self.wire = answer.name_wire(name)
        self.templates = Templates(name, settings.serial, settings.negative_ttl)
        self.mcs = mcs

    def service_name(self, sid: ServiceId) -> bytes:
        """The service's name in wire form in this zone: ``<svc>.<ns>.<F>.svc.Z`` (``<svc>.<ns>.svc.Z`` for MCS)."""
        return (names.mcs_service_name(sid) if self.mcs else names.service_name(sid)) + self.wire


class Records(Protocol):
    """Where the responder reads the records: the store's feed (``feddns.store.Feed``)
    holds the ``index`` and says whether it is ``ready`` (the first load done)."""

    index: Index
    ready: bool


class _NoRecords:
    """The records before a feed is attached: none, not ready (SERVFAIL)."""

    def __init__(self) -> None:
        self.index = Index(Layout())
        self.ready = False


class Responder:
    """Answers queries under ``settings`` from ``records`` (the store's feed, see
    :meth:`read_from`).

    Until the records are ``ready`` every well-formed query in the zone gets
    SERVFAIL, never NXDOMAIN. ``cache`` decides what of the answers is kept
    (``feddns.dns.cache``); its UDP handler looks a packet up before
    :meth:`respond` is called.
    """

    def __init__(self, settings: AnswerSettings) -> None:
        self.records: Records = _NoRecords()
        self.settings = settings
        self.stats = Stats()
        self.option = settings.option_code.to_bytes(2, "big")
        self.cache = Cache(settings.cache_size, self.option, self.stats.add_hits)
        self.main = Zone(settings.zone, settings, mcs=False)
        self.zone = self.main.wire
        self.templates = self.main.templates
        self.absent_for = self.templates.absent_for
        self._zone_cut = -len(self.zone)  # name[:_zone_cut]: a name in the zone, relative to it
        self.mcs = None if settings.mcs_zone is None else Zone(settings.mcs_zone, settings, mcs=True)
        self._mcs_ambiguous_logged = False
        self._nxdomain_parts = self.cache.envelopes.get

    def read_from(self, records: Records) -> None:
        """Answer from ``records`` (the store's feed) from now on (the parent envelopes,
        which name the index's names, are dropped)."""
        self.records = records
        self.cache.parents.clear()

    @property
    def index(self) -> Index:
        """The index answered from (the feed's)."""
        return self.records.index

    @property
    def ready(self) -> bool:
        """True once the feed's first load is done."""
        return self.records.ready

    def counted_templates(self) -> list[Template]:
        """The templates of every zone that count their own queries (for the metrics)."""
        zones = [self.main] if self.mcs is None else [self.main, self.mcs]
        return [template for zone in zones for template in zone.templates.counted()]

    # -- the query path -----------------------------------------------------------

    def respond(self, data: bytes, client: str, tcp: bool) -> bytes | None:
        """The reply to the packet ``data`` from address ``client``, or ``None`` to drop it.

        Over UDP the cache's handler calls this for a packet it holds no reply
        for; over TCP the transport calls it for every message. Never raises: a
        failure answers SERVFAIL and is logged.

        A query whose envelope (its bytes but the ID and qname, see
        ``feddns.dns.cache.Envelopes``) was answered NXDOMAIN before is read no
        further than its qname: when the name does not exist either, the reply is
        the envelope's NXDOMAIN parts joined around the ID and the question as
        asked. Written as one frame for the random-name flood it meets
        (docs/performance.md): one search for the qname's end, one lookup of the
        envelope, the name lowercased and looked up, one join.
        """
        try:
            zero = data.find(0, 12)
            if FIRST_ROOT <= zero <= LAST_ROOT:
                nxdomain = self._nxdomain_parts(data[2:12] + data[zero:])
                if nxdomain is not None:  # the common shape, class IN, EDNS version 0, no ECS
                    name = data[12 : zero + 1].lower()
                    if name.endswith(self.zone):
                        try:
                            node = self.records.index.lookup(name[: self._zone_cut])
                        except NotAName:  # the name the common reader would cut is not one
                            return self._respond_strictly(data, client, tcp)
                        if node is None:
                            head, tail, template, parents = nxdomain
                            template.hits += 1
                            if parents and not tcp:
                                self._keep_parent(data, zero, nxdomain, name[data[12] + 1 : self._zone_cut])
                            return b"".join((data[:2], head, data[12 : zero + 5], tail))
                        query = wire.read_common(data, self.option)
                        if query is not None:  # always: the envelope is of the common shape
                            return self._serve_node(self.main, node, data, query, client, tcp)
            query = wire.read_common(data, self.option)
            if query is None:
                return self._respond_strictly(data, client, tcp)
            return self.serve(data, query, client, tcp)
        except Exception:  # a bug must not take the server down: log it, answer SERVFAIL
            log.exception("failed to answer a query; answering SERVFAIL")
            return self._count(wire.error_reply(data, Rcode.SERVFAIL), "other", Rcode.SERVFAIL)

    def _respond_strictly(self, data: bytes, client: str, tcp: bool) -> bytes | None:
        try:
            flags = wire.parse_header(data)[1]
        except wire.ShortHeader:
            self.stats.dropped += 1
            return None
        if flags & wire.QR:
            self.stats.dropped += 1  # a response: never answer one (no loops)
            return None
        if flags & wire.OPCODE_MASK:
            return self._count(wire.error_reply(data, Rcode.NOTIMP), "other", Rcode.NOTIMP)
        try:
            query = wire.parse_query(data, self.option)
        except wire.OptionError as exc:  # a whole query but for an option's data: FORMERR with its question and OPT
            log.debug("FORMERR to %s: %s", client, exc)
            return self._template(self.templates.formerr, data, exc.query, None, tcp, None)
        except wire.FormError as exc:
            log.debug("FORMERR to %s: %s", client, exc)
            return self._count(wire.error_reply(data, Rcode.FORMERR), "other", Rcode.FORMERR)
        return self.serve(data, query, client, tcp)

    def serve(self, data: bytes, query: Query, client: str, tcp: bool) -> bytes | None:
        """Answer ``query`` (read from ``data``).

        A name that the common reader may have cut wrongly (it is not found and is
        not made of well-formed labels) is read again strictly.
        """
        name = query.name
        if not name.endswith(self.zone) or query.qclass != CLASS_IN or query.version:
            return self._serve_outside(data, query, client, tcp)
        records = self.records
        if not records.ready:
            return self._negative(data, query, client, tcp, self.templates)
        try:
            node = records.index.lookup(name[: self._zone_cut])
        except NotAName:  # the common reader cut the name wrongly: read it strictly
            return self._reread(data, query, client, tcp)
        if node is None:  # NXDOMAIN (or the QTYPE's error) from the zone's template: nothing is kept for the name
            template = self.absent_for.get(query.qtype, self.templates.nxdomain) if query.ecs is None else None
            if template is None:
                return self._negative(data, query, client, tcp, self.templates)
            template.hits += 1
            if not query.strict:
                parts = self.cache.keep_envelope(data, query, template)
                if parts is not None and parts[3] and not tcp:
                    rel = name[: self._zone_cut]
                    self._keep_parent(data, 11 + len(name), parts, rel[rel[0] + 1 :])
            return template.answer.reply(data[:2], query, None, tcp)
        return self._serve_node(self.main, node, data, query, client, tcp)

    def _keep_parent(self, data: bytes, root: int, parts: NxdomainParts, parent: bytes) -> None:
        """Keep the parent envelope of ``data``, a UDP query answered NXDOMAIN (``parts``,
        whose envelope may key parent envelopes) whose qname's root label is at
        ``root``, when every child of ``parent`` (the qname without its first label,
        relative to the main zone, lowercased) that exists is a key of the index's
        names (``Cache.keep_parent_envelope``)."""
        index = self.records.index
        if index.children_are_named(parent):
            self.cache.keep_parent_envelope(data, root, parts, index.names, parent)

    def _serve_outside(self, data: bytes, query: Query, client: str, tcp: bool) -> bytes | None:
        """A query outside the main zone, not of class IN, or of EDNS version over 0:
        the MCS zone's, else read strictly, else refused (or BADVERS)."""
        mcs = self.mcs
        if mcs is not None and query.name.endswith(mcs.wire) and query.qclass == CLASS_IN and not query.version:
            return self._serve_mcs(mcs, data, query, client, tcp)
        return self._reread(data, query, client, tcp)

    def _reread(self, data: bytes, query: Query, client: str, tcp: bool) -> bytes | None:
        """A query the common reader may have read wrongly, read strictly; one read
        strictly already is refused."""
        return self._refuse(data, query, tcp) if query.strict else self._respond_strictly(data, client, tcp)

    def _serve_mcs(self, mcs: Zone, data: bytes, query: Query, client: str, tcp: bool) -> bytes | None:
        """A name in the MCS zone: ``<...>.svc.ZONE`` is looked up as ``<...>.F.svc`` of the
        federation shown there; other names (apex, ``ns.dns``) as they are."""
        rel = query.name[: len(query.name) - len(mcs.wire)]
        records = self.records
        if not records.ready:
            return self._negative(data, query, client, tcp, mcs.templates)
        try:
            if rel.endswith(names.SVC):
                federation = self._mcs_federation()
                if federation is None:
                    return self._template(mcs.templates.servfail, data, query, None, tcp, None)
                node = records.index.lookup(names.federation_name_of_mcs(rel, federation))
            else:
                node = records.index.lookup(rel)
        except NotAName:  # the common reader cut the name wrongly: read it strictly
            return self._reread(data, query, client, tcp)
        if node is None:
            return self._negative(data, query, client, tcp, mcs.templates)
        return self._serve_node(mcs, node, data, query, client, tcp)

    def _mcs_federation(self) -> str | None:
        """The federation the MCS zone shows: ``--mcs-federation``, else the only one
        held; ``None`` (logged once) while several are held and none was named."""
        named = self.settings.mcs_federation
        if named is not None:
            return named
        federations = self.records.index.federations
        if len(federations) == 1:
            return next(iter(federations))
        if len(federations) > 1 and not self._mcs_ambiguous_logged:
            self._mcs_ambiguous_logged = True
            log.warning("the MCS zone %s cannot show %d federations (%s): answering SERVFAIL there; "
                        "choose one with --mcs-federation", self.settings.mcs_zone, len(federations),
                        ", ".join(sorted(federations)))
        return None

    def _serve_node(self, zone: Zone, node: Node, data: bytes, query: Query, client: str, tcp: bool) -> bytes | None:
        """Answer ``query`` for ``node``, a name that exists in ``zone``: the answer the
        cache keeps for the source cluster, else one built for the node kind and qtype."""
        name = query.name
        cache = self.cache
        named = query.cluster_option
        if named is not None and query.ecs is None:
            # The option names a known cluster exactly as the cache keys answers: the
            # key is decided without finding the source (the entry proves the
            # cluster known, as of the last change).
            found = cache.answer((name, query.qtype, named))
            if found is not None:
                return cache.reply(found, data, query, None, tcp, False)
        templates = zone.templates
        try:
            source, ecs, by_address = policy.find_source(node.federation, query, client)
        except wire.FormError as exc:
            log.debug("FORMERR to %s: %s", client, exc)
            return self._template(templates.formerr, data, query, None, tcp, None)
        qtype = query.qtype
        key = (name, qtype, source)
        found = cache.answer(key)
        if found is None:
            error = templates.errors.get(qtype)
            if error is not None:
                if qtype in _TRANSFERS and node.kind == NodeKind.APEX:  # as NSD and BIND refuse transfers of a zone
                    error = templates.refused
                return self._template(error, data, query, ecs, tcp, source)
            if node.kind == _WHOAMI:  # never kept: the answer depends on how the asker was found
                return self._whoami(node, data, query, tcp, (source, ecs, by_address), zone)
            asker = source.decode() if source is not None else None
            built = self._answer(node, qtype, asker, zone)
            if built is None:
                return self._template(templates.nodata, data, query, ecs, tcp, source)
            labels = (qtype_label(qtype), "NOERROR", "cluster" if source else "none")
            first = None
            if node.kind in _MATRIX_KINDS:
                rank, shards = built[1], node.shards
                assert shards is not None  # a service's names (_MATRIX_KINDS) hold its shards
                first = (asker or "", "none" if rank is None else policy.TIER_LABELS[rank],
                         rank is not None and policy.fails_open(shards, self.settings.none_ready))
            found = cache.keep_answer(key, built[0], node.service, labels, first)
        return cache.reply(found, data, query, ecs, tcp, by_address)

    def _whoami(self, node: Node, data: bytes, query: Query, tcp: bool, found: policy.Source, zone: Zone) -> bytes:
        """The reply at ``_whoami.<F>.svc.<zone>`` (docs/reference.md section 1): to TXT
        and ANY one TXT record of TTL 0 saying how the asker was identified
        (``policy.whoami_strings``); to other QTYPEs the zone's NODATA. Built per query
        and never kept: it depends on the asker, not on the name alone. ``found`` is what
        ``policy.find_source`` found."""
        source, ecs, _ = found
        if query.qtype not in (TXT, QType.ANY):
            return self._template(zone.templates.nodata, data, query, ecs, tcp, source)
        assert node.federation is not None
        record = answer.txt_rr(policy.whoami_strings(node.federation, query, source), 0)
        built = Answer(Rcode.NOERROR, Sections(((record,),)), udp_limit=self.settings.max_udp_size)
        self._count_as((qtype_label(query.qtype), "NOERROR", "cluster" if source else "none"))
        return built.reply(data[:2], query, ecs, tcp)

    def _refuse(self, data: bytes, query: Query, tcp: bool) -> bytes:
        """A query outside every zone served, or not of class IN: REFUSED, but for
        BADVERS and the QTYPEs that get an error at every name (in class IN)."""
        if query.version:  # EDNS version > 0: BADVERS, with our version 0 (RFC 6891 6.1.3)
            self._count_as((qtype_label(query.qtype), "BADVERS", "none"))
            return self.templates.badvers.answer.reply(data[:2], query, None, tcp)
        templates = self.templates
        error = templates.errors.get(query.qtype) if query.qclass == CLASS_IN else None
        return self._template(error or templates.refused, data, query, None, tcp, None)

    def _negative(self, data: bytes, query: Query, client: str, tcp: bool, templates: Templates) -> bytes | None:
        """NXDOMAIN (or the QTYPE's error) for a name that does not exist, from the
        zone's template: the question is copied from the query and nothing is kept for the name.
        Before the first load, SERVFAIL instead (never NXDOMAIN), for a name that
        is made of labels (else it is read strictly)."""
        ready = self.records.ready
        if not ready and not wire.is_labels(query.name[: len(query.name) - len(templates.zone)]):
            return self._reread(data, query, client, tcp)
        template = templates.absent_for.get(query.qtype, templates.nxdomain) if ready else templates.servfail
        ecs = query.ecs
        if ecs is not None:
            try:
                ecs = policy.find_source(None, query, client)[1]
            except wire.FormError:
                return self._template(templates.formerr, data, query, None, tcp, None)
        return self._template(template, data, query, ecs, tcp, None)

    def _template(self, template: Template, data: bytes, query: Query, ecs: bytes | None, tcp: bool,
                  source: bytes | None) -> bytes:
        qtype = qtype_label(query.qtype)
        self._count_as((qtype, template.labels[1], "cluster" if source else "none"))
        return template.answer.reply(data[:2], query, ecs, tcp)

    def _count(self, reply: bytes, qtype: str, rcode: Rcode) -> bytes:
        self._count_as((qtype, rcode.name, "none"))
        return reply

    def _count_as(self, labels: Labels) -> None:
        answered = self.stats.answered
        answered[labels] = answered.get(labels, 0) + 1

    # -- building answers -----------------------------------------------------------

    def _answer(self, node: Node, qtype: int, asker: str | None,
                zone: Zone) -> tuple[Answer, policy.Tier | None] | None:
        """The answer of ``node`` to ``qtype`` for cluster ``asker`` in ``zone`` and the tier its
        first records come from, or ``None`` for the zone's NODATA (a name with no records of
        that type, whoever asks)."""
        found = self._records(node, qtype, asker, zone)
        if found is None:
            return None
        sections, ordering, first = found
        limit = self.settings.max_udp_size
        if not sections.tiers:  # the name has such records, but none for this asker now (e.g. every shard unready)
            return Answer(Rcode.NOERROR, Sections(authority=[zone.templates.soa]), udp_limit=limit), None
        if ordering is None:
            ordering = answer.FIXED if self.settings.stable else answer.Rotation()
        return Answer(Rcode.NOERROR, sections, ordering=ordering, udp_limit=limit), first

    def _records(self, node: Node, qtype: int, asker: str | None,
                 zone: Zone) -> tuple[Sections, answer.Ordering | None, policy.Tier | None] | None:
        """The records of ``node`` for ``qtype`` asked from cluster ``asker``, their ordering
        when the policy decides it, and the tier of the first (a service's names only);
        ``None`` when the name has no such records."""
        ttl = self.settings.ttl
        kind = node.kind
        if kind == NodeKind.APEX:
            return self._apex_records(qtype, zone)
        if kind == NodeKind.NS_HOST:
            versions = _VERSIONS.get(qtype, ())
            records = tuple(answer.address_rr(ip.packed, ttl) for ip in self.settings.ns_addresses
                            if ip.version in versions)
            return (Sections((records,)), None, None) if records else None
        if kind == NodeKind.SRV_NAME or kind in _ADDRESS_KINDS:
            ttl = policy.service_ttl(node.shards, ttl)
        if kind == NodeKind.SRV_NAME:
            if qtype not in (QType.SRV, QType.ANY):
                return None
            assert node.service is not None
            tiers, ordering, additional, first = policy.srv_answer(node, asker, zone.service_name(node.service), ttl,
                                                                   self.settings.none_ready)
            return Sections(tiers, additional=additional), ordering, first
        if kind in _ADDRESS_KINDS and qtype in _VERSIONS:
            tiers, ordering, _, first = policy.address_answer(node, asker, _VERSIONS[qtype], ttl,
                                                              self.settings.none_ready)
            return Sections(tiers), ordering, first
        return None

    def _apex_records(self, qtype: int, zone: Zone) -> tuple[Sections, None, None] | None:
        """The zone's SOA or NS records (ANY: one RRset, the SOA; RFC 8482 4.2)."""
        s = self.settings
        if qtype in (QType.SOA, QType.ANY):
            soa = answer.soa_rr(answer.POINTER_TO_QNAME, zone.name, s.serial, s.negative_ttl, s.ttl)
            return Sections(((soa,),)), None, None
        if qtype == QType.NS:
            glue = answer.name_wire(answer.server_name(zone.name))
            additional = [answer.address_rr(ip.packed, s.ttl, glue) for ip in s.ns_addresses]
            ns = answer.ns_rr(answer.POINTER_TO_QNAME, zone.name, s.ttl)
            return Sections(((ns,),), additional=additional), None, None
        return None
