"""What Federated-DNS answers (docs/reference.md sections 1 and 2), as a table of cases.

Each case: qname, qtype, the asking cluster (EDNS0 option 65245), the rcode,
and the answer section as zone-file text, in order.
"""

import dns.flags
import dns.rcode
import dns.rdatatype
import pytest

Z = "federation."
WEB = f"web.prod.fed.svc.{Z}"
SRV_WEB = f"_http._tcp.{WEB}"

CASES = [
    # the design document's lookup: own clusterIP, then same zone, same region, the rest
    (WEB, "A", "a", "NOERROR", [f"{WEB} 30 IN A 10.0.0.1", f"{WEB} 30 IN A 1.1.1.2", f"{WEB} 30 IN A 1.1.1.3"]),
    # b: own clusterIP, a in its zone; c in its region; d is not ready; e has no externalIP
    (WEB, "A", "b", "NOERROR", [f"{WEB} 30 IN A 10.0.0.2", f"{WEB} 30 IN A 1.1.1.1", f"{WEB} 30 IN A 1.1.1.3"]),
    # e has no cluster record: own shard first, every other shard is tier 3
    (WEB, "A", "e", "NOERROR", [f"{WEB} 30 IN A 10.0.0.5", f"{WEB} 30 IN A 1.1.1.1",
                                f"{WEB} 30 IN A 1.1.1.2", f"{WEB} 30 IN A 1.1.1.3"]),
    # no source cluster (an external client), or an unknown one: every healthy shard's externalIP
    (WEB, "A", None, "NOERROR", [f"{WEB} 30 IN A 1.1.1.1", f"{WEB} 30 IN A 1.1.1.2", f"{WEB} 30 IN A 1.1.1.3"]),
    (WEB, "A", "nosuch", "NOERROR", [f"{WEB} 30 IN A 1.1.1.1", f"{WEB} 30 IN A 1.1.1.2", f"{WEB} 30 IN A 1.1.1.3"]),
    # every shard unready: NODATA
    (f"down.prod.fed.svc.{Z}", "A", "a", "NOERROR", []),
    # AAAA from the same tiers
    (f"dual.prod.fed.svc.{Z}", "AAAA", "a", "NOERROR",
     [f"dual.prod.fed.svc.{Z} 30 IN AAAA fd00::1", f"dual.prod.fed.svc.{Z} 30 IN AAAA 2001:db8::2"]),
    (f"dual.prod.fed.svc.{Z}", "A", "d", "NOERROR",
     [f"dual.prod.fed.svc.{Z} 30 IN A 10.0.2.4", f"dual.prod.fed.svc.{Z} 30 IN A 2.2.2.1",
      f"dual.prod.fed.svc.{Z} 30 IN A 2.2.2.2"]),
    (WEB, "AAAA", "a", "NOERROR", []),
    # one cluster's shard: clusterIP from itself, externalIP from others, whatever its ready count
    (f"a.{WEB}", "A", "a", "NOERROR", [f"a.{WEB} 30 IN A 10.0.0.1"]),
    (f"a.{WEB}", "A", "b", "NOERROR", [f"a.{WEB} 30 IN A 1.1.1.1"]),
    (f"d.{WEB}", "A", None, "NOERROR", [f"d.{WEB} 30 IN A 1.1.1.4"]),
    (f"e.{WEB}", "A", "a", "NOERROR", []),
    (f"e.{WEB}", "A", "e", "NOERROR", [f"e.{WEB} 30 IN A 10.0.0.5"]),
    (f"x.{WEB}", "A", "a", "NXDOMAIN", []),
    # SRV: priority by tier, weight by ready count, the shard's own port
    (SRV_WEB, "SRV", "a", "NOERROR", [f"{SRV_WEB} 30 IN SRV 0 2 80 a.{WEB}", f"{SRV_WEB} 30 IN SRV 10 1 8080 b.{WEB}",
                                      f"{SRV_WEB} 30 IN SRV 20 1 80 c.{WEB}"]),
    (SRV_WEB, "A", "a", "NOERROR", []),
    (f"_tcp.{WEB}", "SRV", "a", "NOERROR", []),
    (f"_udp.{WEB}", "SRV", "a", "NXDOMAIN", []),
    (f"_grpc._tcp.{WEB}", "SRV", "a", "NXDOMAIN", []),
    # names that do not exist, and empty non-terminals (RFC 8020)
    (f"nosuch.prod.fed.svc.{Z}", "A", "a", "NXDOMAIN", []),
    (f"prod.fed.svc.{Z}", "A", "a", "NOERROR", []),
    (f"fed.svc.{Z}", "A", None, "NOERROR", []),
    (f"svc.{Z}", "A", None, "NOERROR", []),
    (f"other.svc.{Z}", "A", None, "NXDOMAIN", []),
    (f"www.{Z}", "A", None, "NXDOMAIN", []),
    # the zone apex
    (Z, "NS", None, "NOERROR", [f"{Z} 30 IN NS ns.dns.{Z}"]),
    (Z, "A", None, "NOERROR", []),
    # outside the zone
    ("example.com.", "A", None, "REFUSED", []),
    ("federation.example.", "A", None, "REFUSED", []),
]


def lines(rrsets) -> list[str]:
    """The records of a section as zone-file lines, in wire order."""
    return [f"{rrset.name} {rrset.ttl} IN {dns.rdatatype.to_text(rrset.rdtype)} {rd.to_text()}"
            for rrset in rrsets for rd in rrset]


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
@pytest.mark.parametrize("qname,qtype,cluster,rcode,expected", CASES)
def test_answer(served, qname, qtype, cluster, rcode, expected, tcp):
    reply = served.query(qname, qtype, cluster, tcp=tcp)
    assert dns.rcode.to_text(reply.rcode()) == rcode
    assert lines(reply.answer) == expected
    assert bool(reply.flags & dns.flags.AA) == (rcode != "REFUSED")
    assert not reply.flags & (dns.flags.RA | dns.flags.AD)
    if rcode in ("NXDOMAIN", "NOERROR") and not expected:
        assert [f"{r.name} {dns.rdatatype.to_text(r.rdtype)}" for r in reply.authority] == [f"{Z} SOA"]
        assert reply.authority[0].ttl == 30


def test_srv_additional_section_carries_targets_as_answered_for_asker(served):
    reply = served.query(SRV_WEB, "SRV", "a")
    assert lines(reply.additional) == [f"a.{WEB} 30 IN A 10.0.0.1", f"b.{WEB} 30 IN A 1.1.1.2",
                                       f"c.{WEB} 30 IN A 1.1.1.3"]


def test_apex_soa(served):
    reply = served.query(Z, "SOA")
    (soa,) = reply.answer[0]
    assert (str(soa.mname), str(soa.rname), soa.minimum) == (f"ns.dns.{Z}", f"hostmaster.{Z}", 30)


def test_question_echoed_in_the_case_asked(served):
    reply = served.query("WeB.PROD.fed.SVC.Federation.", "A", "a")
    assert str(reply.question[0].name) == "WeB.PROD.fed.SVC.Federation."
    assert next(rd.address for rd in reply.answer[0]) == "10.0.0.1"
    # asked again in another case: the cache must not replay the first case
    reply = served.query("web.prod.FED.svc.federation.", "A", "a")
    assert str(reply.question[0].name) == "web.prod.FED.svc.federation."


def test_rd_and_cd_copied_z_not_echoed(served):
    import dns.message
    import dns.query

    query = dns.message.make_query(WEB, "A")
    query.flags |= dns.flags.RD | dns.flags.CD | 0x0040  # Z bit
    reply = dns.query.udp(query, "127.0.0.1", port=served.port, timeout=2)
    assert reply.flags & dns.flags.RD and reply.flags & dns.flags.CD
    assert not reply.flags & 0x0040
    query.flags &= ~(dns.flags.RD | dns.flags.CD)
    reply = dns.query.udp(query, "127.0.0.1", port=served.port, timeout=2)
    assert not reply.flags & (dns.flags.RD | dns.flags.CD)


def test_opt_echoed_with_our_payload_and_do_bit_only(served):
    import dns.message
    import dns.query

    query = dns.message.make_query(WEB, "A", use_edns=0, payload=4096, ednsflags=dns.flags.DO | 0x0100)
    reply = dns.query.udp(query, "127.0.0.1", port=served.port, timeout=2)
    assert reply.edns == 0 and reply.payload == 1232
    assert reply.ednsflags == dns.flags.DO
    plain = served.query(WEB, "A")
    assert plain.edns == -1  # no OPT in the query, none in the reply
    assert not served.query(WEB, "A", "a").options  # the 0xFEDD option is not echoed


def test_udp_reply_too_big_is_truncated_and_tcp_carries_it(served):
    big = f"big.prod.fed.svc.{Z}"
    udp = served.query(big, "A")
    assert udp.flags & dns.flags.TC and not udp.answer
    bigger = served.query(big, "A", use_edns=0, payload=4096)
    assert not bigger.flags & dns.flags.TC and len(bigger.answer[0]) == 40
    tcp = served.query(big, "A", tcp=True)
    assert not tcp.flags & dns.flags.TC and len(tcp.answer[0]) == 40
