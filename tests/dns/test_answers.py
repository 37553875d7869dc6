"""What Federated-DNS answers (docs/reference.md sections 1 and 2), as a table of named
cases (:class:`tests.dns.tables.Case`) asked in-process of the responder the transports
call, on the records of tests/dns/conftest.py with a fixed order (``--order stable``:
rotation has tests of its own). The same kinds of answers, on the policy records, are
asked of the real server over UDP and TCP by tests/dns/test_network_smoke.py; the
protocol edges below (flags, OPT, truncation) ask the real server of these records.
"""

import dns.flags
import dns.message
import dns.query
import pytest

from feddns.dns.responder import Responder
from tests.dns.tables import Case, a, aaaa, check_in_process, ids, negative, ordered, soa, srv

Z = "federation."
WEB = f"web.prod.fed.svc.{Z}"
SRV_WEB = f"_http._tcp.{WEB}"
DUAL = f"dual.prod.fed.svc.{Z}"
NEG = negative(Z)

CASES = [
    # the design document's lookup: own clusterIP, then same zone, same region, the rest
    Case(WEB, "A", "a", "NOERROR", ordered(a(WEB, "10.0.0.1", "1.1.1.2", "1.1.1.3")), id="own cluster first, from a"),
    # b: own clusterIP, a in its zone; c in its region; d is not ready; e has no externalIP
    Case(WEB, "A", "b", "NOERROR", ordered(a(WEB, "10.0.0.2", "1.1.1.1", "1.1.1.3")), id="own cluster first, from b"),
    # e has no cluster record: own shard first, every other shard is tier 3
    Case(WEB, "A", "e", "NOERROR", ordered(a(WEB, "10.0.0.5", "1.1.1.1", "1.1.1.2", "1.1.1.3")),
         id="a cluster without a record"),
    # no source cluster (an external client), or an unknown one: every healthy shard's externalIP
    Case(WEB, "A", None, "NOERROR", ordered(a(WEB, "1.1.1.1", "1.1.1.2", "1.1.1.3")), id="external client"),
    Case(WEB, "A", "nosuch", "NOERROR", ordered(a(WEB, "1.1.1.1", "1.1.1.2", "1.1.1.3")), id="unknown cluster"),
    # names match case-insensitively; the question and the owner names are echoed as asked
    Case("WeB.PROD.fed.SVC.Federation.", "A", "a", "NOERROR",
         ordered(a("WeB.PROD.fed.SVC.Federation.", "10.0.0.1", "1.1.1.2", "1.1.1.3")), id="mixed case"),
    Case("web.prod.FED.svc.federation.", "A", "A", "NOERROR",
         ordered(a("web.prod.FED.svc.federation.", "10.0.0.1", "1.1.1.2", "1.1.1.3")),
         id="mixed case, cluster name in upper case"),
    # every shard unready: every shard as if ready, in the usual order (fail open)
    Case(f"down.prod.fed.svc.{Z}", "A", "a", "NOERROR", ordered(a(f"down.prod.fed.svc.{Z}", "10.0.1.1", "1.1.2.2")),
         id="every shard unready: fail open"),
    Case(f"down.prod.fed.svc.{Z}", "A", "b", "NOERROR", ordered(a(f"down.prod.fed.svc.{Z}", "10.0.1.2", "1.1.2.1")),
         id="every shard unready: fail open, from b"),
    # ... unless the records say noneReady: nodata (the annotation federation.feddns.io/none-ready)
    Case(f"quiet.prod.fed.svc.{Z}", "A", "a", "NOERROR", authority=NEG, id="every shard unready, noneReady nodata"),
    # a service's TTL: the least its shards' records give (the annotation federation.feddns.io/ttl),
    # for its shards' names too; a service whose records give none has serve's --ttl (30 here)
    Case(f"brief.prod.fed.svc.{Z}", "A", "a", "NOERROR",
         ordered(a(f"brief.prod.fed.svc.{Z}", "10.0.4.1", "4.4.4.2", "4.4.4.3", ttl=3)),
         id="the least ttl of the records"),
    Case(f"c.brief.prod.fed.svc.{Z}", "A", "a", "NOERROR", ordered(a(f"c.brief.prod.fed.svc.{Z}", "4.4.4.3", ttl=3)),
         id="a shard's name has its service's ttl"),
    # AAAA from the same tiers
    Case(DUAL, "AAAA", "a", "NOERROR", ordered(aaaa(DUAL, "fd00::1", "2001:db8::2")), id="AAAA"),
    Case(DUAL, "A", "d", "NOERROR", ordered(a(DUAL, "10.0.2.4", "2.2.2.1", "2.2.2.2")), id="A of a dual-stack service"),
    Case(DUAL, "ANY", "a", "NOERROR", ordered(a(DUAL, "10.0.2.1", "2.2.2.2", "2.2.2.4"), aaaa(DUAL, "fd00::1",
                                                                                          "2001:db8::2")),
         id="ANY: A then AAAA"),
    Case(WEB, "AAAA", "a", "NOERROR", authority=NEG, id="AAAA of an IPv4 service: NODATA"),
    Case(WEB, "TXT", "a", "NOERROR", authority=NEG, id="TXT of a service: NODATA"),
    Case(WEB, "MX", None, "NOERROR", authority=NEG, id="MX of a service: NODATA"),
    Case(WEB, "SRV", "a", "NOERROR", authority=NEG, id="SRV of a service name: NODATA"),
    # one cluster's shard: clusterIP from itself, externalIP from others, whatever its ready count
    Case(f"a.{WEB}", "A", "a", "NOERROR", ordered(a(f"a.{WEB}", "10.0.0.1")), id="shard, own"),
    Case(f"a.{WEB}", "A", "b", "NOERROR", ordered(a(f"a.{WEB}", "1.1.1.1")), id="shard, other"),
    Case(f"A.{WEB}", "A", "b", "NOERROR", ordered(a(f"A.{WEB}", "1.1.1.1")), id="shard, in upper case"),
    Case(f"d.{WEB}", "A", None, "NOERROR", ordered(a(f"d.{WEB}", "1.1.1.4")), id="shard, not ready"),
    Case(f"e.{WEB}", "A", "a", "NOERROR", authority=NEG, id="shard without externalIP, other"),
    Case(f"e.{WEB}", "A", "e", "NOERROR", ordered(a(f"e.{WEB}", "10.0.0.5")), id="shard without externalIP, own"),
    Case(f"e.{WEB}", "TXT", "e", "NOERROR", authority=NEG, id="TXT of a shard: NODATA"),
    Case(f"x.{WEB}", "A", "a", "NXDOMAIN", authority=NEG, id="no such shard"),
    Case(f"*.{WEB}", "A", "a", "NXDOMAIN", authority=NEG, id="no wildcards below a service"),
    Case(f"*.prod.fed.svc.{Z}", "A", "a", "NXDOMAIN", authority=NEG, id="no wildcards in a namespace"),
    Case(f"x.a.{WEB}", "A", "a", "NXDOMAIN", authority=NEG, id="below a shard"),
    # SRV: priority by tier, weight by ready count, the shard's own port; targets as answered to the asker
    Case(SRV_WEB, "SRV", "a", "NOERROR",
         ordered(srv(SRV_WEB, f"0 2 80 a.{WEB}", f"10 1 8080 b.{WEB}", f"20 1 80 c.{WEB}")),
         additional=ordered(a(f"a.{WEB}", "10.0.0.1"), a(f"b.{WEB}", "1.1.1.2"), a(f"c.{WEB}", "1.1.1.3")),
         id="SRV"),
    Case("_HTTP._TCP.Web.prod.fed.svc.federation.", "SRV", "b", "NOERROR",
         ordered(srv("_HTTP._TCP.Web.prod.fed.svc.federation.",
                     f"0 1 8080 b.{WEB}", f"10 2 80 a.{WEB}", f"20 1 80 c.{WEB}")),
         additional=ordered(a(f"b.{WEB}", "10.0.0.2"), a(f"a.{WEB}", "1.1.1.1"), a(f"c.{WEB}", "1.1.1.3")),
         id="SRV in upper case, from b"),
    Case(SRV_WEB, "A", "a", "NOERROR", authority=NEG, id="A of an SRV name: NODATA"),
    Case(f"_tcp.{WEB}", "SRV", "a", "NOERROR", authority=NEG, id="protocol: empty non-terminal"),
    Case(f"_udp.{WEB}", "SRV", "a", "NXDOMAIN", authority=NEG, id="no port of that protocol"),
    Case(f"_grpc._tcp.{WEB}", "SRV", "a", "NXDOMAIN", authority=NEG, id="no port of that name"),
    # names that do not exist, and empty non-terminals (RFC 8020)
    Case(f"nosuch.prod.fed.svc.{Z}", "A", "a", "NXDOMAIN", authority=NEG, id="no such service"),
    Case(f"nosuch.prod.fed.svc.{Z}", "TXT", None, "NXDOMAIN", authority=NEG, id="no such service, TXT"),
    Case(f"prod.fed.svc.{Z}", "A", "a", "NOERROR", authority=NEG, id="namespace: empty non-terminal"),
    Case(f"fed.svc.{Z}", "A", None, "NOERROR", authority=NEG, id="federation: empty non-terminal"),
    Case(f"svc.{Z}", "A", None, "NOERROR", authority=NEG, id="svc: empty non-terminal"),
    Case(f"other.svc.{Z}", "A", None, "NXDOMAIN", authority=NEG, id="no such federation"),
    Case(f"www.{Z}", "A", None, "NXDOMAIN", authority=NEG, id="not below svc"),
    # the zone apex
    Case(Z, "NS", None, "NOERROR", ordered((f"{Z} 30 IN NS ns.dns.{Z}",)), id="apex NS"),
    Case(Z, "SOA", None, "NOERROR", (soa(Z),), id="apex SOA"),
    Case("FEDERATION.", "SOA", "a", "NOERROR", (soa(Z, "FEDERATION."),), id="apex SOA in upper case"),
    Case(Z, "ANY", None, "NOERROR", (soa(Z),), id="apex ANY: the SOA alone"),
    Case(Z, "A", None, "NOERROR", authority=NEG, id="apex A: NODATA"),
    # outside the zone
    Case("example.com.", "A", None, "REFUSED", id="outside the zone"),
    Case("federation.example.", "A", None, "REFUSED", id="a zone that ends like ours"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_answer(answers_responder: Responder, case: Case) -> None:
    check_in_process(answers_responder, case)


def test_rd_and_cd_copied_z_not_echoed(served):
    query = dns.message.make_query(WEB, "A")
    query.flags |= dns.flags.RD | dns.flags.CD | 0x0040  # Z bit
    reply = dns.query.udp(query, "127.0.0.1", port=served.port, timeout=2)
    assert reply.flags & dns.flags.RD and reply.flags & dns.flags.CD
    assert not reply.flags & 0x0040
    query.flags &= ~(dns.flags.RD | dns.flags.CD)
    reply = dns.query.udp(query, "127.0.0.1", port=served.port, timeout=2)
    assert not reply.flags & (dns.flags.RD | dns.flags.CD)


def test_opt_echoed_with_our_payload_and_do_bit_only(served):
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
