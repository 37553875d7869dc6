"""Answers: resource records packed once, and the reply they give each query (RFC 1035 4.1).

An :class:`Answer` is built when a question is first asked after its records
changed (``feddns.dns.policy`` decides which records; this module packs them).
It holds its records in wire form, grouped by tier: an A or AAAA record owned by
a compression pointer to the question's name (``0xC00C``) is 16 or 28 bytes
whatever the name, so the same bytes serve every letter case. Those address
records, the record headers and the per-query splice are packed here by hand;
the RDATA of SOA, NS and SRV records and the names in them (packed when records
change, never per query) are packed by dnslib, with name compression off. A
reply is spliced per query::

    ID | flags and counts (RD, CD copied; ARCOUNT +1 with an OPT) | the question as asked
       | answer records in this query's order | authority | additional | OPT (DO, ECS echo)

The order of the answer section comes from the answer's :class:`Ordering`:
:class:`Fixed` (one order for everyone, joined once) or :class:`Rotation` (each
tier rotated one step per query, from the stored records: no copy per rotation).
Further policies (a weighted draw per query, a fixed failover order) are other
``Ordering`` classes over the same tiers.

Negative replies (NXDOMAIN, NODATA) and the errors that carry a question
(REFUSED, SERVFAIL, BADVERS, FORMERR for a bad ECS option) are answers too, made
once per zone as templates: the question is copied in from the query, so a
flood of names costs no memory.
"""

import struct
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import dnslib  # type: ignore[import-untyped]

from feddns.dns.wire import (
    AA,
    CLASS_IN,
    HEADER_BYTES,
    IPV4_BYTES,
    MAX_NAME_BYTES,
    OPTION_ECS,
    QR,
    TC,
    TXT,
    UDP_PLAIN_BYTES,
    QType,
    Query,
)

OUR_PAYLOAD = 1232
"""The UDP payload size (bytes) advertised in our OPT record, and the default bound of
our UDP replies (``--max-udp-size``): DNS Flag Day 2020's size, which avoids IP fragmentation."""

POINTER_TO_QNAME = b"\xc0\x0c"
"""A compression pointer to offset 12, where the question's name starts (RFC 1035 4.1.4)."""

_RR_FIXED = struct.Struct("!HHIH")
_COUNTS = struct.Struct("!HHHHH")
Tiers = tuple[tuple[bytes, ...], ...]
"""Answer records grouped by tier, best tier first; each record in wire form."""


class _Uncompressed(dnslib.DNSBuffer):  # type: ignore[misc]
    """A dnslib buffer that never compresses a name: records packed once go at
    any offset of any reply, so no name in them may point into this buffer."""

    def encode_name(self, name: object) -> None:
        self.encode_name_nocompress(name)


def _packed(rdata: dnslib.RD) -> bytes:
    buffer = _Uncompressed()
    rdata.pack(buffer)
    return bytes(buffer.data)


def name_wire(name: str | dnslib.DNSLabel) -> bytes:
    """The uncompressed wire form of a name (``"ns.dns.federation."``), packed by dnslib.

    Raises ``dnslib.DNSLabelError`` for a label over 63 bytes or a name over 253
    (``UnicodeError`` for a text label over 63 bytes, from dnslib's IDNA encoding).
    """
    buffer = _Uncompressed()
    buffer.encode_name_nocompress(name)
    return bytes(buffer.data)


def subdomain(zone: str, relative: str) -> dnslib.DNSLabel:
    """The name ``<relative>.<zone>`` (``relative`` without its trailing dot)."""
    return dnslib.DNSLabel(zone).add(relative)


def server_name(zone: str) -> dnslib.DNSLabel:
    """``ns.dns.<zone>``: the name of the server, MNAME and NS target (as CoreDNS's kubernetes plugin)."""
    return subdomain(zone, "ns.dns")


def rr(owner: bytes, rtype: int, ttl: int, rdata: bytes) -> bytes:
    """One resource record of class IN in wire form; ``owner`` is a wire name or a pointer."""
    return owner + _RR_FIXED.pack(rtype, CLASS_IN, ttl, len(rdata)) + rdata


def address_rr(address: bytes, ttl: int, owner: bytes = POINTER_TO_QNAME) -> bytes:
    """An A (4-byte ``address``) or AAAA (16-byte) record, by default owned by the qname.

    Packed by hand: a fixed-size record (16 or 28 bytes with the pointer owner)
    that answers and rotations are spliced from; tests/dns/test_records.py checks
    that dnslib and dnspython read it as they read their own.
    """
    rtype = QType.A if len(address) == IPV4_BYTES else QType.AAAA
    return owner + _RR_FIXED.pack(rtype, CLASS_IN, ttl, len(address)) + address


def srv_rr(priority: int, weight: int, port: int, target: bytes | str | dnslib.DNSLabel, ttl: int) -> bytes:
    """An SRV record (RFC 2782) owned by the qname; its RDATA is packed by dnslib,
    ``target`` never compressed (RFC 2782). ``target`` is a name, or a name in
    wire form (as ``feddns.dns.policy`` joins a cluster's label to a service's
    name), which dnslib reads back into labels first."""
    if isinstance(target, bytes):
        target = dnslib.DNSBuffer(target).decode_name()
    return rr(POINTER_TO_QNAME, QType.SRV, ttl, _packed(dnslib.SRV(priority, weight, port, target)))


def txt_rr(strings: Sequence[str], ttl: int) -> bytes:
    """A TXT record (RFC 1035 3.3.14) owned by the qname: one character-string per item
    of ``strings`` (UTF-8, each cut to 255 bytes, the most a length byte counts)."""
    rdata = b"".join(bytes((len(raw),)) + raw for raw in (text.encode()[:255] for text in strings))
    return rr(POINTER_TO_QNAME, TXT, ttl, rdata)


def soa_rr(owner: bytes, zone: str, serial: int, minimum: int, ttl: int) -> bytes:
    """The zone's SOA; MNAME ``ns.dns.<zone>``, RNAME ``hostmaster.<zone>`` (as CoreDNS);
    refresh/retry/expire 7200/1800/86400 seconds, ``minimum`` the negative TTL
    (RFC 2308). The RDATA is packed by dnslib, its names uncompressed."""
    times = (serial, 7200, 1800, 86400, minimum)
    rdata = dnslib.SOA(server_name(zone), subdomain(zone, "hostmaster"), times)
    return rr(owner, QType.SOA, ttl, _packed(rdata))


def ns_rr(owner: bytes, zone: str, ttl: int) -> bytes:
    """The zone's NS record, naming ``ns.dns.<zone>`` (RDATA packed by dnslib)."""
    return rr(owner, QType.NS, ttl, _packed(dnslib.NS(server_name(zone))))


def opt_rr(do: bool, ecs: bytes | None = None, ext_rcode: int = 0) -> bytes:
    """Our OPT record (RFC 6891 6.1.2): payload :data:`OUR_PAYLOAD`, the DO bit
    copied from the query (RFC 3225), and the ECS option to echo (RFC 7871 7.2.1)."""
    options = b"" if ecs is None else struct.pack("!HH", OPTION_ECS, len(ecs)) + ecs
    ttl = (ext_rcode << 24) | (0x8000 if do else 0)
    return b"\0" + _RR_FIXED.pack(QType.OPT, OUR_PAYLOAD, ttl, len(options)) + options


OPT_PLAIN, OPT_DO = opt_rr(False), opt_rr(True)
_OPTS = (OPT_PLAIN, OPT_DO)
_LONGEST_OPT = 11 + 4 + 20  # our OPT echoing an IPv6 ECS option of /128
_LONGEST_QUESTION = MAX_NAME_BYTES + 4  # QTYPE, QCLASS


class Ordering(Protocol):
    """How the answer section's records are ordered for one query."""

    def arrange(self, tiers: Tiers) -> bytes:
        """The answer records of ``tiers``, best tier first, joined in wire form."""


class Fixed:
    """One order for everyone: the tiers as stored (``--order stable``)."""

    def arrange(self, tiers: Tiers) -> bytes:
        return b"".join(record for tier in tiers for record in tier)


class Rotation:
    """Round robin within each tier: the ``n``-th query gets every tier rotated by ``n``.

    One counter per answer, shared by every asker of it (as kube-dns and CoreDNS's
    ``loadbalance`` rotate per reply).
    """

    __slots__ = ("step",)

    def __init__(self) -> None:
        self.step = 0

    def arrange(self, tiers: Tiers) -> bytes:
        step = self.step
        self.step = step + 1
        parts: list[bytes] = []
        for tier in tiers:
            shift = step % len(tier)
            parts += tier[shift:]
            parts += tier[:shift]
        return b"".join(parts)


FIXED = Fixed()

_heads: dict[tuple[int, int, int, int], tuple[bytes, ...]] = {}


def _head_table(flags: int, answers: int, authority: int, additional: int) -> tuple[bytes, ...]:
    """The 16 headers less ID: index bit 1 RD, 2 CD, 4 an OPT is added, 8 truncated (TC=1,
    no records but the OPT; RFC 2181 9, RFC 7766 5). Shared by every answer alike."""
    key = (flags, answers, authority, additional)
    table = _heads.get(key)
    if table is None:
        out = []
        for index in range(16):
            bits = flags | (0x0100 if index & 1 else 0) | (0x0010 if index & 2 else 0)
            opt = 1 if index & 4 else 0
            if index & 8:
                out.append(_COUNTS.pack(bits | TC, 1, 0, 0, opt))
            else:
                out.append(_COUNTS.pack(bits, 1, answers, authority, additional + opt))
        table = _heads[key] = tuple(out)
    return table


class Sections(NamedTuple):
    """The records of a reply in wire form, by section (RFC 1035 4.1): the answer
    section by tier (``tiers``, best tier first), then the authority and the
    additional sections."""

    tiers: Tiers = ()
    authority: Sequence[bytes] = ()
    additional: Sequence[bytes] = ()


NO_RECORDS = Sections()


class Answer:
    """The records answering one question for one source cluster, packed once.

    ``rcode`` (its low 4 bits go in the header), ``authoritative`` (AA),
    ``sections`` (the answer records by tier, ordered per query by ``ordering``;
    the authority and additional records in a fixed order).
    ``fixed`` holds the joined records when every query gets the same order;
    ``length`` is the bytes of every record; a question of at most ``room``
    bytes always fits a 512-byte reply (so the full size check is skipped).
    ``udp_limit`` bounds a UDP reply in bytes whatever the asker's payload size
    (at least 512: ``--max-udp-size``). What of it is kept, and for how long, is
    ``feddns.dns.cache``'s to decide.
    """

    __slots__ = ("fixed", "heads", "length", "opts", "ordering", "rcode", "rest", "room", "tiers", "udp_limit")

    def __init__(self, rcode: int, sections: Sections = NO_RECORDS, *,
                 authoritative: bool = True, ordering: Ordering = FIXED, udp_limit: int = OUR_PAYLOAD) -> None:
        tiers, authority, additional = sections
        self.rcode = rcode
        self.tiers = tiers
        self.rest = b"".join(authority) + b"".join(additional)
        count = sum(len(tier) for tier in tiers)
        flags = QR | (AA if authoritative else 0) | (rcode & 0xF)
        self.heads = _head_table(flags, count, len(authority), len(additional))
        extended = rcode >> 4  # the upper 8 bits of a 12-bit rcode go in the OPT (RFC 6891 6.1.3)
        self.opts = _OPTS if not extended else (opt_rr(False, None, extended),) * 2
        self.ordering = ordering
        self.fixed: bytes | None = None
        if isinstance(ordering, Fixed) or all(len(tier) <= 1 for tier in tiers):
            self.fixed = FIXED.arrange(tiers) + self.rest
        self.length = sum(len(record) for tier in tiers for record in tier) + len(self.rest)
        self.udp_limit = udp_limit
        # a question this long or shorter always fits:
        self.room = UDP_PLAIN_BYTES - HEADER_BYTES - self.length - _LONGEST_OPT

    def reply(self, ident: bytes, query: Query, ecs: bytes | None, tcp: bool) -> bytes:
        """The reply to ``query`` (whose first two bytes were ``ident``): our OPT
        record when the query had one (DO copied, ``ecs`` echoed when given),
        truncated (TC=1, no records) when longer over UDP than the asker takes (its
        EDNS payload size, at least 512 bytes; RFC 6891 6.2.5, RFC 1035 4.2.1) or
        than ``udp_limit`` bytes (DNS Flag Day 2020: no fragmented replies)."""
        flags = query.flags
        index = (flags >> 8 & 1) | (flags >> 3 & 2)  # RD, CD
        if query.edns:
            index |= 4
            opt = self.opts[query.do] if ecs is None else opt_rr(query.do, ecs, self.rcode >> 4)
        else:
            opt = b""
        question = query.question
        if len(question) > self.room and not tcp:  # the reply may be over 512 bytes
            size = 12 + len(question) + self.length + len(opt)
            if size > UDP_PLAIN_BYTES and (size > query.payload or not query.edns or size > self.udp_limit):
                return b"".join((ident, self.heads[index | 8], question, opt))
        body = self.fixed
        if body is None:
            body = self.ordering.arrange(self.tiers) + self.rest
        return b"".join((ident, self.heads[index], question, body, opt))

    def around_question(self, query: Query) -> tuple[bytes, bytes] | None:
        """The reply to ``query`` as what goes between its ID and its question (the
        header's flags and counts) and what follows the question, when those are
        the same whatever the qname: the records in one order, and room for the
        longest question (so never truncated); else ``None``. ``query`` has no ECS
        option to echo."""
        if self.fixed is None or self.room < _LONGEST_QUESTION:
            return None
        flags = query.flags
        index = (flags >> 8 & 1) | (flags >> 3 & 2)  # RD, CD
        if query.edns:
            return self.heads[index | 4], self.fixed + self.opts[query.do]
        return self.heads[index], self.fixed

    @property
    def single_order(self) -> bool:
        """True when every query gets the same records in the same order."""
        return self.fixed is not None


class Template:
    """A reply that carries no records of the name asked, made once per zone
    (NXDOMAIN, NODATA, REFUSED, SERVFAIL, BADVERS, FORMERR): its ``answer`` (the
    question is copied in from each query), ``labels`` for the metrics
    (``(qtype, rcode, source)``) and ``hits``, the queries it answered that it
    counts itself (the NXDOMAIN templates; the metrics add them up)."""

    __slots__ = ("answer", "hits", "labels")

    def __init__(self, answer: "Answer", labels: tuple[str, str, str]) -> None:
        self.answer = answer
        self.labels = labels
        self.hits = 0
