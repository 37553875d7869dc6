"""Packing replies (RFC 1035 4.1) with dnslib.

Only the slow path calls this, when an answer is not cached yet: packed
bytes are then cached and reused (``feddns.dns.responder``). Replies are
packed for a canonical query (ID 0, lowercase qname, RD and CD clear), which
the responder patches per query.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from dnslib import AAAA, EDNS0, NS, QTYPE, RR, SOA, SRV, A, DNSHeader, DNSLabel, DNSQuestion, DNSRecord, EDNSOption

from feddns.dns import wire
from feddns.records import IPAddress

OUR_PAYLOAD = 1232
"""The UDP payload size (bytes) advertised in our OPT record (DNS Flag Day 2020)."""


@dataclass(frozen=True, slots=True)
class EdnsReply:
    """The OPT record of a reply: the DO bit copied from the query (RFC 3225),
    options to echo (ECS, RFC 7871) and the upper 8 bits of the rcode."""

    do: bool
    options: tuple[tuple[int, bytes], ...] = ()
    ext_rcode: int = 0


def address_rr(owner: DNSLabel | str, ip: IPAddress, ttl: int) -> RR:
    """An A (IPv4) or AAAA (IPv6) record."""
    if ip.version == 4:
        return RR(owner, QTYPE.A, rdata=A(str(ip)), ttl=ttl)
    return RR(owner, QTYPE.AAAA, rdata=AAAA(str(ip)), ttl=ttl)


def srv_rr(owner: DNSLabel, priority: int, weight: int, port: int, target: str, ttl: int) -> RR:
    """An SRV record (RFC 2782); the target is never compressed."""
    return RR(owner, QTYPE.SRV, rdata=SRV(priority, weight, port, target), ttl=ttl)


def soa_rr(zone: str, serial: int, minimum: int, ttl: int) -> RR:
    """The zone's SOA; MNAME ``ns.dns.<zone>``, RNAME ``hostmaster.<zone>`` (as CoreDNS)."""
    times = (serial, 7200, 1800, 86400, minimum)
    return RR(zone, QTYPE.SOA, rdata=SOA(f"ns.dns.{zone}", f"hostmaster.{zone}", times), ttl=ttl)


def ns_rr(zone: str, ttl: int) -> RR:
    """The zone's NS record, naming ``ns.dns.<zone>``."""
    return RR(zone, QTYPE.NS, rdata=NS(f"ns.dns.{zone}"), ttl=ttl)


def pack(
    labels: Sequence[bytes],
    qtype: int,
    qclass: int,
    rcode: int,
    *,
    authoritative: bool = True,
    answer: Sequence[RR] = (),
    authority: Sequence[RR] = (),
    additional: Sequence[RR] = (),
    edns: EdnsReply | None = None,
    limit: int = 512,
) -> bytes:
    """Pack a reply to the canonical query for ``labels``/``qtype``/``qclass``.

    ``limit`` is the largest reply in bytes the requester takes (RFC 6891
    6.2.3 for UDP; 65535 over TCP). A reply that does not fit is sent with
    TC=1 and no records but the OPT (RFC 2181 9, RFC 7766 5).
    """
    full = _record(labels, qtype, qclass, rcode, authoritative, edns)
    for rr in answer:
        full.add_answer(rr)
    for rr in authority:
        full.add_auth(rr)
    for rr in additional:
        full.add_ar(rr)
    _add_opt(full, edns)
    packed = bytes(full.pack())
    if len(packed) <= limit:
        return packed
    short = _record(labels, qtype, qclass, rcode, authoritative, edns)
    short.header.tc = 1
    _add_opt(short, edns)
    return bytes(short.pack())


def _record(
    labels: Sequence[bytes], qtype: int, qclass: int, rcode: int, authoritative: bool, edns: EdnsReply | None
) -> DNSRecord:
    header = DNSHeader(id=0, qr=1, aa=int(authoritative), rd=0, ra=0, rcode=rcode & 0xF)
    return DNSRecord(header, q=DNSQuestion(DNSLabel(list(labels)), qtype, qclass))


def _add_opt(record: DNSRecord, edns: EdnsReply | None) -> None:
    if edns is None:
        return
    options = [EDNSOption(code, data) for code, data in edns.options]
    record.add_ar(
        EDNS0(udp_len=OUR_PAYLOAD, ext_rcode=edns.ext_rcode, flags="do" if edns.do else "", opts=options)
    )


def qtype_name(qtype: int) -> str:
    """The mnemonic of ``qtype`` (``"A"``, ``"SRV"``; ``"TYPE65280"`` when unknown)."""
    name = QTYPE.get(qtype)
    return name if isinstance(name, str) else f"TYPE{qtype}"


RCODE_NAMES = {
    wire.NOERROR: "NOERROR", wire.FORMERR: "FORMERR", wire.SERVFAIL: "SERVFAIL",
    wire.NXDOMAIN: "NXDOMAIN", wire.NOTIMP: "NOTIMP", wire.REFUSED: "REFUSED", wire.BADVERS: "BADVERS",
}
