"""Records as packed by feddns read the same with dnslib and with dnspython.

A/AAAA records are packed by hand (fixed size, owned by a pointer to the
question); SOA, NS and SRV RDATA by dnslib with name compression off. Both kinds
go through two independent readers, and through the answers of a responder.
"""

import ipaddress
import struct

import dns.message
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dnslib
import pytest

from feddns.dns import answer
from tests.dns.test_cache import ask, responder
from tests.dns.udp import respond

QNAME = "web.prod.fed.svc.federation."
ADDRESSES = ["10.0.0.1", "203.0.113.255", "0.0.0.0", "255.255.255.255", "fd00::1", "2001:db8::ffff:1", "::"]


def message(records: list[bytes], qtype: int = 1) -> bytes:
    """A reply with the question QNAME and ``records`` as its answer section."""
    header = struct.pack("!HHHHHH", 0x1234, 0x8400, 1, len(records), 0, 0)
    return header + answer.name_wire(QNAME) + struct.pack("!HH", qtype, 1) + b"".join(records)


def by_dnslib(wire: bytes) -> list[tuple[str, str, int, str]]:
    record = dnslib.DNSRecord.parse(wire)
    return [(str(rr.rname).lower(), dnslib.QTYPE[rr.rtype], rr.ttl, str(rr.rdata)) for rr in record.rr]


def by_dnspython(wire: bytes) -> list[tuple[str, str, int, str]]:
    reply = dns.message.from_wire(wire)
    return [(str(rrset.name).lower(), dns.rdatatype.to_text(rrset.rdtype), rrset.ttl, rd.to_text())
            for rrset in reply.answer for rd in rrset]


def test_hand_packed_address_records_read_the_same_with_dnslib_and_dnspython():
    records = [answer.address_rr(ipaddress.ip_address(a).packed, 30 + n) for n, a in enumerate(ADDRESSES)]
    assert [len(r) for r in records] == [16, 16, 16, 16, 28, 28, 28]  # fixed size: a pointer owner
    wire = message(records)
    expected = [(QNAME, "A" if ":" not in a else "AAAA", 30 + n, str(ipaddress.ip_address(a)))
                for n, a in enumerate(ADDRESSES)]
    assert by_dnslib(wire) == expected
    # dnspython merges records of one type and name into an RRset with one TTL (the lowest)
    assert sorted((n, t, rd) for n, t, _, rd in by_dnspython(wire)) == sorted((n, t, rd) for n, t, _, rd in expected)


def test_address_records_owned_by_a_target_name_read_the_same():
    owner = answer.name_wire("a.web.prod.fed.svc.federation.")
    wire = message([answer.address_rr(b"\x0a\x00\x00\x01", 30, owner)])
    assert by_dnslib(wire) == by_dnspython(wire) == [("a.web.prod.fed.svc.federation.", "A", 30, "10.0.0.1")]


@pytest.mark.parametrize("record, rtype, text", [
    (answer.soa_rr(answer.POINTER_TO_QNAME, "federation.", 1700000000, 30, 60), "SOA",
     "ns.dns.federation. hostmaster.federation. 1700000000 7200 1800 86400 30"),
    (answer.ns_rr(answer.POINTER_TO_QNAME, "federation.", 60), "NS", "ns.dns.federation."),
    (answer.srv_rr(10, 3, 8443, answer.subdomain("federation.", "a.web.prod.fed.svc"), 60), "SRV",
     "10 3 8443 a.web.prod.fed.svc.federation."),
])
def test_dnslib_packed_records_read_the_same_and_hold_no_pointer(record, rtype, text):
    wire = message([record], dns.rdatatype.from_text(rtype))
    assert by_dnslib(wire) == by_dnspython(wire) == [(QNAME, rtype, 60, text)]
    rdata = record[12:]  # after the pointer owner and the fixed fields: the RDATA alone must parse
    parsed = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.from_text(rtype), rdata, 0, len(rdata))
    assert parsed.to_text() == text


def test_answers_of_the_responder_read_the_same_with_both():
    server = responder()
    for qname, qtype in ((QNAME, "A"), ("dual.prod.fed.svc.federation.", "AAAA"), ("federation.", "SOA"),
                         ("federation.", "NS"), ("_http._tcp." + QNAME, "SRV")):
        query = dns.message.make_query(qname, qtype, use_edns=0)
        wire = respond(server, query.to_wire(), "192.0.2.1", False)
        assert wire is not None
        ours = by_dnslib(wire)
        assert ours and sorted(ours) == sorted(by_dnspython(wire)), (qname, qtype)
    reply = ask(server, "_http._tcp." + QNAME, "SRV")
    targets = {str(rd.target) for rd in reply.answer[0]}
    assert {str(rrset.name) for rrset in reply.additional} == targets
    assert dns.name.from_text("a." + QNAME) in {rrset.name for rrset in reply.additional}


def test_names_longer_than_dns_allows_are_refused_by_dnslib():
    with pytest.raises((dnslib.DNSLabelError, UnicodeError)):
        answer.name_wire("x" * 64 + ".federation.")
    with pytest.raises(dnslib.DNSLabelError):
        answer.name_wire(dnslib.DNSLabel([b"x" * 64, b"federation"]))
