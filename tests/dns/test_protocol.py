"""Protocol edges over real UDP: opcodes, malformed packets, EDNS versions and options."""

import socket
import struct

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from harness.serve import ServeProcess, write_records

WEB = "web.prod.fed.svc.federation."


def raw_exchange(port: int, packet: bytes, timeout: float = 0.5) -> bytes | None:
    """Send ``packet`` over UDP and return the reply bytes, or None when none comes."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, ("127.0.0.1", port))
        try:
            return sock.recv(65535)
        except TimeoutError:
            return None


def rcode_of(reply: bytes) -> int:
    return struct.unpack_from("!H", reply, 2)[0] & 0xF


def query_bytes(**kwargs) -> bytes:
    return dns.message.make_query(WEB, "A", **kwargs).to_wire()


def test_opcode_other_than_query_gets_notimp(served):
    message = dns.message.make_query(WEB, "A")
    message.set_opcode(dns.opcode.NOTIFY)
    reply = raw_exchange(served.port, message.to_wire())
    assert reply[:2] == message.to_wire()[:2]
    assert rcode_of(reply) == dns.rcode.NOTIMP


MALFORMED = {
    "no question": struct.pack("!HHHHHH", 7, 0, 0, 0, 0, 0),
    "two questions": struct.pack("!HHHHHH", 7, 0, 2, 0, 0, 0) + b"\x01a\x00\x00\x01\x00\x01" * 2,
    "label past end": struct.pack("!HHHHHH", 7, 0, 1, 0, 0, 0) + b"\x09abc",
    "compression loop": struct.pack("!HHHHHH", 7, 0, 1, 0, 0, 0) + b"\x01a\xc0\x0c\x00\x01\x00\x01",
    "forward pointer": struct.pack("!HHHHHH", 7, 0, 1, 0, 0, 0) + b"\xc0\x20\x00\x01\x00\x01",
    "reserved label type": struct.pack("!HHHHHH", 7, 0, 1, 0, 0, 0) + b"\x41a\x00\x00\x01\x00\x01",
    "question cut short": struct.pack("!HHHHHH", 7, 0, 1, 0, 0, 0) + b"\x01a\x00\x00",
    "trailing junk": query_bytes() + b"junk",
    "truncated OPT": query_bytes(use_edns=0)[:-3],
    "additional count too high": query_bytes()[:10] + b"\x00\x05" + query_bytes()[12:],
}


@pytest.mark.parametrize("packet", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_query_gets_formerr_and_server_goes_on(served, packet):
    reply = raw_exchange(served.port, packet)
    assert reply is not None and reply[:2] == packet[:2]
    assert rcode_of(reply) == dns.rcode.FORMERR
    assert served.addresses(WEB, cluster="a")[0] == "10.0.0.1"


def test_two_opt_records_get_formerr(served):
    packet = bytearray(query_bytes(use_edns=0))
    opt = bytes(packet[-11:])
    packet[10:12] = b"\x00\x02"
    assert rcode_of(raw_exchange(served.port, bytes(packet) + opt)) == dns.rcode.FORMERR


def test_truncated_edns_option_gets_formerr(served):
    packet = bytearray(query_bytes(use_edns=0))
    packet[-2:] = b"\x00\x06"  # RDLENGTH 6
    packet += b"\xfe\xdd\x00\x09ab"  # an option claiming 9 bytes, carrying 2
    assert rcode_of(raw_exchange(served.port, bytes(packet))) == dns.rcode.FORMERR


@pytest.mark.parametrize("packet", [b"", b"\x00", b"\x01\x02\x03" * 3], ids=["empty", "1 byte", "9 bytes"])
def test_packet_shorter_than_header_is_dropped(served, packet):
    assert raw_exchange(served.port, packet, timeout=0.2) is None
    assert served.addresses(WEB, cluster="a")[0] == "10.0.0.1"


def test_response_is_never_answered(served):
    packet = bytearray(query_bytes())
    packet[2] |= 0x80  # QR
    assert raw_exchange(served.port, bytes(packet), timeout=0.2) is None


def test_edns_version_above_zero_gets_badvers(served):
    reply = served.query(WEB, "A", use_edns=1)
    assert reply.rcode() == dns.rcode.BADVERS
    assert reply.edns == 0 and not reply.answer


def test_unknown_options_and_skydns_marker_are_ignored(served):
    options = [dns.edns.GenericOption(65011, b"\x01"), dns.edns.GenericOption(65000, b"xyz")]
    reply = served.query(WEB, "A", "a", options=options)
    assert next(rd.address for rd in reply.answer[0]) == "10.0.0.1"
    assert not reply.options


def test_non_in_class_is_refused(served):
    reply = served.query(WEB, "A", rdclass="CH")
    assert reply.rcode() == dns.rcode.REFUSED


def ecs(address: str, prefix: int) -> dns.edns.ECSOption:
    return dns.edns.ECSOption(address, prefix)


def test_ecs_inside_cluster_cidrs_picks_that_cluster_and_is_echoed_with_scope(served):
    reply = served.query(WEB, "A", options=[ecs("10.240.7.0", 24)])
    assert next(rd.address for rd in reply.answer[0]) == "10.0.0.1"
    (echo,) = reply.options
    assert (echo.address, echo.srclen, echo.scopelen) == ("10.240.7.0", 24, 16)


def test_ecs_outside_every_cidr_means_no_source(served):
    reply = served.query(WEB, "A", options=[ecs("192.0.2.0", 24)])
    assert next(rd.address for rd in reply.answer[0]) == "1.1.1.1"
    (echo,) = reply.options
    assert echo.scopelen == 24


def test_cluster_option_wins_over_ecs(served):
    reply = served.query(WEB, "A", "b", options=[ecs("10.240.7.0", 24)])
    assert next(rd.address for rd in reply.answer[0]) == "10.0.0.2"
    assert reply.options[0].scopelen == 0


def test_malformed_ecs_gets_formerr(served):
    bad = dns.edns.GenericOption(8, b"\x00\x01\x18\x00\x0a\xf0")  # /24 with 2 address bytes
    assert served.query(WEB, "A", options=[bad]).rcode() == dns.rcode.FORMERR


def test_source_address_inside_cluster_cidrs_picks_that_cluster():
    path = write_records("""
/fed/_clusters/a: {cidrs: ["127.0.0.0/8"]}
/fed/prod/web/a: {clusterIP: 10.0.0.1, externalIP: 1.1.1.1}
/fed/prod/web/b: {clusterIP: 10.0.0.2, externalIP: 1.1.1.2}
""")
    with ServeProcess(records=path) as server:
        assert server.addresses(WEB) == ["10.0.0.1", "1.1.1.2"]
        assert server.addresses(WEB, cluster="b") == ["10.0.0.2", "1.1.1.1"]
        reply = server.query(WEB, "A", options=[ecs("192.0.2.0", 24)])
        assert [rd.address for rd in reply.answer[0]] == ["10.0.0.1", "1.1.1.2"]


def test_order_rotates_within_a_tier_from_query_to_query():
    path = write_records("""
/fed/_clusters/a: {zone: z1, region: r1}
/fed/_clusters/b: {zone: z1, region: r1}
/fed/_clusters/c: {zone: z1, region: r1}
/fed/prod/web/a: {clusterIP: 10.0.0.1, externalIP: 1.1.1.1}
/fed/prod/web/b: {clusterIP: 10.0.0.2, externalIP: 1.1.1.2}
/fed/prod/web/c: {clusterIP: 10.0.0.3, externalIP: 1.1.1.3}
/fed/prod/web/d: {clusterIP: 10.0.0.4, externalIP: 1.1.1.4}
""")
    with ServeProcess(records=path) as server:
        orders = [server.addresses(WEB, cluster="a", tcp=i % 2 == 1) for i in range(4)]
    assert {order[0] for order in orders} == {"10.0.0.1"}
    assert {tuple(order[1:3]) for order in orders} == {("1.1.1.2", "1.1.1.3"), ("1.1.1.3", "1.1.1.2")}
    assert {order[3] for order in orders} == {"1.1.1.4"}


def genreport_opcode_query(flags: int) -> bytes:
    """What ISC's genreport sends for ``opcode``/``opcodeflg``: opcode 15, a header only."""
    return struct.pack("!HHHHHH", 0x1234, (15 << 11) | flags, 0, 0, 0, 0)


@pytest.mark.parametrize("flags", [0, 0x0200 | 0x0100 | 0x0080 | 0x0040 | 0x0020 | 0x0010 | 0x0400],
                         ids=["opcode", "opcodeflg"])
def test_unknown_opcode_gets_notimp_as_genreport_expects(served, flags):
    reply = raw_exchange(served.port, genreport_opcode_query(flags))
    message = dns.message.from_wire(reply)
    assert message.id == 0x1234 and message.flags & dns.flags.QR
    assert message.opcode() == 15 and message.rcode() == dns.rcode.NOTIMP
    # AA, RD, RA, AD and CD are defined for QUERY only: none is echoed; Z never is
    assert not message.flags & (dns.flags.AA | dns.flags.RD | dns.flags.RA | dns.flags.AD | dns.flags.CD | 0x0040)
    assert message.edns == -1 and not (message.question or message.answer or message.additional)


def test_notify_with_a_question_gets_notimp_with_rd_cleared(served):
    message = dns.message.make_query(WEB, "A")
    message.set_opcode(dns.opcode.NOTIFY)
    message.flags |= dns.flags.RD
    reply = dns.message.from_wire(raw_exchange(served.port, message.to_wire()))
    assert reply.rcode() == dns.rcode.NOTIMP and reply.opcode() == dns.opcode.NOTIFY
    assert not reply.flags & dns.flags.RD


COOKIE_LENGTHS = {  # RFC 7873 4: a client cookie of 8 bytes, then no server cookie or one of 8 to 32 bytes
    0: dns.rcode.FORMERR, 1: dns.rcode.FORMERR, 7: dns.rcode.FORMERR, 8: dns.rcode.NOERROR,
    9: dns.rcode.FORMERR, 15: dns.rcode.FORMERR, 16: dns.rcode.NOERROR, 24: dns.rcode.NOERROR,
    40: dns.rcode.NOERROR, 41: dns.rcode.FORMERR, 64: dns.rcode.FORMERR,
}


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
@pytest.mark.parametrize(("length", "rcode"), COOKIE_LENGTHS.items(), ids=[f"{n} bytes" for n in COOKIE_LENGTHS])
def test_cookie_option_of_a_wrong_length_gets_formerr(served, length, rcode, tcp):
    """RFC 7873 section 5.2.2: a COOKIE option shorter than 8 bytes, longer than 40, or of 9 to
    15 (a server cookie under 8 bytes) is FORMERR; alone or beside the cluster option (the
    reader of the common shape takes one option without a loop, several with one)."""
    cookie = dns.edns.GenericOption(10, b"\x01" * length)
    for options in ([cookie], [dns.edns.GenericOption(65245, b"a"), cookie]):
        reply = served.query(WEB, "A", options=options, tcp=tcp)
        assert reply.rcode() == rcode
        if rcode == dns.rcode.FORMERR:  # with the question and our OPT, as a malformed ECS option
            assert reply.edns == 0 and not reply.answer and reply.question[0].name == dns.name.from_text(WEB)


def test_a_kept_reply_is_never_served_to_a_malformed_cookie(served):
    """A packet answered from the UDP reply cache (asked three times, so kept) and the same
    packet with its cookie one byte longer: the second is FORMERR, not the kept NOERROR."""
    good = dns.message.make_query(WEB, "A", use_edns=0, options=[dns.edns.GenericOption(10, b"\x02" * 8)])
    for _ in range(3):
        assert rcode_of(raw_exchange(served.port, good.to_wire())) == dns.rcode.NOERROR
    packet = bytearray(good.to_wire())
    packet[-10:-8] = b"\x00\x09"  # OPT RDLENGTH 4 + 9
    packet[-6:-4] = b"\x00\x09"  # the option's length
    packet += b"\x02"
    assert rcode_of(raw_exchange(served.port, bytes(packet))) == dns.rcode.FORMERR


def test_formerr_for_a_malformed_ecs_option_carries_an_opt_record(served):
    bad = dns.edns.GenericOption(8, b"\x00\x01\x18\x00\x0a\xf0")
    reply = served.query(WEB, "A", options=[bad])
    assert reply.rcode() == dns.rcode.FORMERR
    assert reply.edns == 0 and reply.payload == 1232  # RFC 6891 7: the OPT tells the asker we speak EDNS
    assert not reply.options


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
@pytest.mark.parametrize("qtype", ["AXFR", "IXFR"])
def test_zone_transfers_are_refused(served, qtype, tcp):
    reply = served.query("federation.", qtype, tcp=tcp)
    assert reply.rcode() == dns.rcode.REFUSED and not reply.answer


def test_any_at_the_apex_gets_one_rrset(served):
    reply = served.query("federation.", "ANY")
    assert reply.rcode() == dns.rcode.NOERROR
    assert [dns.rdatatype.to_text(r.rdtype) for r in reply.answer] == ["SOA"]  # RFC 8482 4.2


def test_a_zero_byte_inside_a_label_is_read_strictly(served):
    # The common reader takes the first zero byte for the root label; a name with a
    # zero byte in a label must still get the answer its real name gets.
    name = dns.name.Name([b"a\x00b", b"web", b"prod", b"fed", b"svc", b"federation", b""])
    query = dns.message.make_query(name, "A")
    reply = dns.message.from_wire(raw_exchange(served.port, query.to_wire()))
    assert reply.rcode() == dns.rcode.NXDOMAIN and reply.question[0].name == name
    outside = dns.name.Name([b"x\x00", b"federation", b""])  # "federation" only after the zero byte
    reply = dns.message.from_wire(raw_exchange(served.port, dns.message.make_query(outside, "A").to_wire()))
    assert reply.rcode() == dns.rcode.NXDOMAIN
