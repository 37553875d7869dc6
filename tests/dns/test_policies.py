"""Answer policies (docs/reference.md section 2): every policy x asking cluster x health, as
named cases (:class:`tests.dns.tables.Case`) asked in-process of the responder the
transports call, on the records of tests/dns/policy_records.py with rotation on (as
deployed). Within a group of lines the order is free (a tier rotates, a weighted tier
is drawn per answer); the groups come in the order given. tests/dns/test_network_smoke.py
asks a few such cases of the real server over UDP and TCP.
"""

import dns.flags
import pytest

from feddns.dns.responder import Responder
from tests.dns.tables import (
    Ask,
    Case,
    a,
    aaaa,
    check_in_process,
    ids,
    in_process,
    lines,
    make_responder,
    negative,
    over_network,
    srv,
)

Z = "pol.svc.federation."
NEG = negative("federation.")

LOC, LOC_DOWN = f"loc.prod.{Z}", f"loc-down.prod.{Z}"
FO, FO_DOWN = f"fo.prod.{Z}", f"fo-down.prod.{Z}"
WT, WT_DOWN, WT6 = f"wt.prod.{Z}", f"wt-down.prod.{Z}", f"wt6.prod.{Z}"
LW, LW_DOWN = f"lw.prod.{Z}", f"lw-down.prod.{Z}"
HL, HL_DOWN = f"hl.prod.{Z}", f"hl-down.prod.{Z}"
MIXED, BADPOLICY, BADWEIGHT = f"mixed.prod.{Z}", f"badpolicy.prod.{Z}", f"badweight.prod.{Z}"
HLW, HLFO = f"hlw.prod.{Z}", f"hlfo.prod.{Z}"


def failover_srv(fo: str, name: str) -> Case:
    """``_http._tcp`` of service fo (its name ``fo`` in some zone) asked from a: priority by
    place in the failover order; the targets' addresses as each would be answered to a."""
    owner = f"_http._tcp.{fo}"
    return Case(owner, "SRV", "a", "NOERROR",
                (srv(owner, f"0 2 80 c.{fo}"), srv(owner, f"10 1 80 a.{fo}"), srv(owner, f"20 1 80 b.{fo}",
                                                                                  f"20 1 80 d.{fo}")),
                additional=(a(f"c.{fo}", "2.2.0.3") + a(f"a.{fo}", "10.2.0.1") + a(f"b.{fo}", "2.2.0.2")
                            + a(f"d.{fo}", "2.2.0.4"),),
                id=name)


def headless_srv(hl: str, name: str) -> Case:
    """``_http._tcp`` of headless service hl (its name ``hl`` in some zone) asked from a: one
    target per endpoint a may reach (its own, and routable c's), each endpoint's address."""
    owner, c6 = f"_http._tcp.{hl}", f"fd00-0000-0000-0000-0000-0000-0062-0001.c.{hl}"
    return Case(owner, "SRV", "a", "NOERROR",
                (srv(owner, f"0 1 8080 web-0.a.{hl}", f"0 1 8080 web-1.a.{hl}"),
                 srv(owner, f"20 1 8080 10-62-0-1.c.{hl}", f"20 1 8080 {c6}")),
                additional=(a(f"web-0.a.{hl}", "10.60.0.1") + a(f"web-1.a.{hl}", "10.60.0.2")
                            + a(f"10-62-0-1.c.{hl}", "10.62.0.1") + aaaa(c6, "fd00::62:1"),),
                id=name)


HL_C6 = f"fd00-0000-0000-0000-0000-0000-0062-0001.c.{HL}"

CASES = [
    # locality (the default): own clusterIP, then zone, region, the rest; unready shards out
    Case(LOC, "A", "a", "NOERROR", (a(LOC, "10.1.0.1"), a(LOC, "1.1.0.2", "1.1.0.5"), a(LOC, "1.1.0.3"),
                                    a(LOC, "1.1.0.4")), id="locality from a"),
    Case(LOC, "A", "d", "NOERROR", (a(LOC, "10.1.0.4"), a(LOC, "1.1.0.1", "1.1.0.2", "1.1.0.3", "1.1.0.5")),
         id="locality from d"),
    Case(LOC, "A", None, "NOERROR", (a(LOC, *(f"1.1.0.{n}" for n in range(1, 6))),), id="locality external"),
    Case(LOC_DOWN, "A", "a", "NOERROR", (a(LOC_DOWN, "10.1.1.1"), a(LOC_DOWN, "1.1.1.3")), id="locality down from a"),
    Case(LOC_DOWN, "A", "b", "NOERROR", (a(LOC_DOWN, "1.1.1.1"), a(LOC_DOWN, "1.1.1.3")), id="locality down from b"),
    # failover: the list's order for everyone (own shard by its clusterIP), unlisted clusters last
    Case(FO, "A", "a", "NOERROR", (a(FO, "2.2.0.3"), a(FO, "10.2.0.1"), a(FO, "2.2.0.2"), a(FO, "2.2.0.4")),
         id="failover from a"),
    Case(FO, "A", "b", "NOERROR", (a(FO, "2.2.0.3"), a(FO, "2.2.0.1"), a(FO, "10.2.0.2"), a(FO, "2.2.0.4")),
         id="failover from b"),
    Case(FO, "A", "c", "NOERROR", (a(FO, "10.2.0.3"), a(FO, "2.2.0.1"), a(FO, "2.2.0.2"), a(FO, "2.2.0.4")),
         id="failover from c"),
    Case(FO, "A", "d", "NOERROR", (a(FO, "2.2.0.3"), a(FO, "2.2.0.1"), a(FO, "2.2.0.2"), a(FO, "10.2.0.4")),
         id="failover from d"),
    Case(FO, "A", None, "NOERROR", (a(FO, "2.2.0.3"), a(FO, "2.2.0.1"), a(FO, "2.2.0.2"), a(FO, "2.2.0.4")),
         id="failover external"),
    Case(FO_DOWN, "A", "c", "NOERROR", (a(FO_DOWN, "2.2.1.1"), a(FO_DOWN, "2.2.1.2"), a(FO_DOWN, "2.2.1.4")),
         id="failover first choice down, from c"),
    Case(FO_DOWN, "A", "d", "NOERROR", (a(FO_DOWN, "2.2.1.1"), a(FO_DOWN, "2.2.1.2"), a(FO_DOWN, "10.2.1.4")),
         id="failover first choice down, from d"),
    failover_srv(FO, "failover SRV: priority by place"),
    # weighted: one group drawn by weight; weight 0 is left out unless named
    Case(WT, "A", "a", "NOERROR", (a(WT, "10.3.0.1", "3.3.0.2", "3.3.0.4"),), id="weighted from a"),
    Case(WT, "A", "c", "NOERROR", (a(WT, "3.3.0.1", "3.3.0.2", "3.3.0.4"),),
         id="weighted from c (weight 0: not even for itself)"),
    Case(WT, "A", None, "NOERROR", (a(WT, "3.3.0.1", "3.3.0.2", "3.3.0.4"),), id="weighted external"),
    # wt-down: a (weight 3) not ready, b weight 1, d weight 2, no shard in c or e
    Case(WT_DOWN, "A", "a", "NOERROR", (a(WT_DOWN, "3.3.1.2", "3.3.1.4"),), id="weighted down from a"),
    Case(WT_DOWN, "A", "b", "NOERROR", (a(WT_DOWN, "10.3.1.2", "3.3.1.4"),), id="weighted down from b"),
    Case(WT_DOWN, "A", "c", "NOERROR", (a(WT_DOWN, "3.3.1.2", "3.3.1.4"),), id="weighted down from c"),
    Case(WT_DOWN, "A", "d", "NOERROR", (a(WT_DOWN, "3.3.1.2", "10.3.1.4"),), id="weighted down from d"),
    Case(WT_DOWN, "A", "e", "NOERROR", (a(WT_DOWN, "3.3.1.2", "3.3.1.4"),), id="weighted down from e"),
    Case(WT_DOWN, "A", None, "NOERROR", (a(WT_DOWN, "3.3.1.2", "3.3.1.4"),), id="weighted down external"),
    Case(WT6, "AAAA", "a", "NOERROR", (aaaa(WT6, "fd00::3:1", "2001:db8::3:2"),), id="weighted AAAA"),
    Case(WT6, "ANY", None, "NOERROR", (a(WT6, "3.3.2.1", "3.3.2.2"), aaaa(WT6, "2001:db8::3:1", "2001:db8::3:2")),
         id="weighted ANY: IPv4 drawn, then IPv6 drawn"),
    Case(f"c.{WT}", "A", None, "NOERROR", (a(f"c.{WT}", "3.3.0.3"),), id="weighted: weight 0 named explicitly"),
    Case(f"_http._tcp.{WT}", "SRV", None, "NOERROR",
         (srv(f"_http._tcp.{WT}", f"0 3 80 a.{WT}", f"0 1 80 b.{WT}", f"0 1 80 d.{WT}"),),
         additional=(a(f"a.{WT}", "3.3.0.1") + a(f"b.{WT}", "3.3.0.2") + a(f"d.{WT}", "3.3.0.4"),),
         id="weighted SRV: priority 0, the weights"),
    # locality-weighted: the tiers, drawn by weight within each
    Case(LW, "A", "a", "NOERROR", (a(LW, "10.4.0.1"), a(LW, "4.4.0.2", "4.4.0.5"), a(LW, "4.4.0.3"),
                                   a(LW, "4.4.0.4")), id="locality-weighted from a"),
    Case(LW, "A", "d", "NOERROR", (a(LW, "10.4.0.4"), a(LW, "4.4.0.1", "4.4.0.2", "4.4.0.3", "4.4.0.5")),
         id="locality-weighted from d"),
    Case(LW, "A", None, "NOERROR", (a(LW, *(f"4.4.0.{n}" for n in range(1, 6))),), id="locality-weighted external"),
    # lw-down: a (weight 1) and b (3) ready, e (2) not ready; a, b and e share zone z1, c region r1, d is far
    Case(LW_DOWN, "A", "a", "NOERROR", (a(LW_DOWN, "10.4.1.1"), a(LW_DOWN, "4.4.1.2")),
         id="locality-weighted down from a"),
    Case(LW_DOWN, "A", "b", "NOERROR", (a(LW_DOWN, "10.4.1.2"), a(LW_DOWN, "4.4.1.1")),
         id="locality-weighted down from b"),
    Case(LW_DOWN, "A", "c", "NOERROR", (a(LW_DOWN, "4.4.1.1", "4.4.1.2"),), id="locality-weighted down from c"),
    Case(LW_DOWN, "A", "d", "NOERROR", (a(LW_DOWN, "4.4.1.1", "4.4.1.2"),), id="locality-weighted down from d"),
    Case(LW_DOWN, "A", "e", "NOERROR", (a(LW_DOWN, "4.4.1.1", "4.4.1.2"),), id="locality-weighted down from e"),
    Case(LW_DOWN, "A", None, "NOERROR", (a(LW_DOWN, "4.4.1.1", "4.4.1.2"),), id="locality-weighted down external"),
    Case(f"_http._tcp.{LW}", "SRV", "a", "NOERROR",
         (srv(f"_http._tcp.{LW}", f"0 1 80 a.{LW}"), srv(f"_http._tcp.{LW}", f"10 3 80 b.{LW}", f"10 2 80 e.{LW}"),
          srv(f"_http._tcp.{LW}", f"20 1 80 c.{LW}"), srv(f"_http._tcp.{LW}", f"30 1 80 d.{LW}")),
         additional=(a(f"a.{LW}", "10.4.0.1") + a(f"b.{LW}", "4.4.0.2") + a(f"e.{LW}", "4.4.0.5")
                     + a(f"c.{LW}", "4.4.0.3") + a(f"d.{LW}", "4.4.0.4"),),
         id="locality-weighted SRV"),
    # shards that disagree, or a bad policy field: the default (locality)
    Case(MIXED, "A", "a", "NOERROR", (a(MIXED, "10.5.0.1"), a(MIXED, "5.5.0.2")), id="policies disagree"),
    Case(BADPOLICY, "A", "a", "NOERROR", (a(BADPOLICY, "10.6.0.1"), a(BADPOLICY, "6.6.0.4")), id="unknown policy"),
    Case(BADWEIGHT, "A", "b", "NOERROR", (a(BADWEIGHT, "10.7.0.2"), a(BADWEIGHT, "7.7.0.1")), id="negative weight"),
    # headless: endpoint IPs, own cluster first, other clusters' only when their pods are routable
    Case(HL, "A", "a", "NOERROR", (a(HL, "10.60.0.1", "10.60.0.2"), a(HL, "10.62.0.1")), id="headless from a"),
    Case(HL, "A", "b", "NOERROR", (a(HL, "10.61.0.1"), a(HL, "10.60.0.1", "10.60.0.2"), a(HL, "10.62.0.1")),
         id="headless from b"),
    Case(HL, "A", "d", "NOERROR", (a(HL, "10.63.0.1"), a(HL, "10.60.0.1", "10.60.0.2", "10.62.0.1")),
         id="headless from d"),
    Case(HL, "A", None, "NOERROR", (a(HL, "10.60.0.1", "10.60.0.2", "10.62.0.1"),), id="headless external"),
    Case(HL, "AAAA", "a", "NOERROR", (aaaa(HL, "fd00::62:1"),), id="headless AAAA"),
    Case(HL_DOWN, "A", "b", "NOERROR", (a(HL_DOWN, "10.61.1.1"), a(HL_DOWN, "10.62.1.1")), id="headless down from b"),
    Case(HL_DOWN, "A", "a", "NOERROR", (a(HL_DOWN, "10.62.1.1"),), id="headless down from a"),
    Case(HLW, "A", None, "NOERROR", (a(HLW, "10.70.0.1", "10.70.0.2", "10.72.0.1"),), id="headless weighted"),
    Case(HLFO, "A", "a", "NOERROR", (a(HLFO, "10.82.0.1"), a(HLFO, "10.80.0.1")), id="headless failover"),
    Case(f"a.{HL}", "A", "d", "NOERROR", (a(f"a.{HL}", "10.60.0.1", "10.60.0.2"),), id="headless shard, routable"),
    Case(f"b.{HL}", "A", "a", "NOERROR", authority=NEG, id="headless shard, isolated"),
    Case(f"b.{HL}", "A", "b", "NOERROR", (a(f"b.{HL}", "10.61.0.1"),), id="headless shard, isolated, from itself"),
    Case(f"web-0.a.{HL}", "A", "d", "NOERROR", (a(f"web-0.a.{HL}", "10.60.0.1"),), id="one endpoint by hostname"),
    Case(f"WEB-0.A.{HL}", "A", "d", "NOERROR", (a(f"WEB-0.A.{HL}", "10.60.0.1"),),
         id="one endpoint by hostname, in upper case"),
    Case(f"web-0.b.{HL}", "A", "a", "NOERROR", authority=NEG, id="one endpoint of an isolated cluster"),
    Case(f"web-0.b.{HL}", "A", "b", "NOERROR", (a(f"web-0.b.{HL}", "10.61.0.1"),),
         id="one endpoint of an isolated cluster, from itself"),
    Case(f"10-62-0-1.c.{HL}", "A", None, "NOERROR", (a(f"10-62-0-1.c.{HL}", "10.62.0.1"),),
         id="an endpoint without hostname, by its address"),
    Case(HL_C6, "AAAA", None, "NOERROR", (aaaa(HL_C6, "fd00::62:1"),), id="an IPv6 endpoint by its address"),
    Case(HL_C6, "A", None, "NOERROR", authority=NEG, id="A of an IPv6 endpoint: NODATA"),
    Case(f"web-1.b.{HL}", "A", "b", "NXDOMAIN", authority=NEG, id="no such endpoint"),
    Case(f"nosuch.a.{HL}", "A", "a", "NXDOMAIN", authority=NEG, id="no such endpoint name"),
    Case(f"*.a.{HL}", "A", "a", "NXDOMAIN", authority=NEG, id="no wildcard endpoint"),
    headless_srv(HL, "headless SRV: one target per endpoint"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_answer(policy_responder: Responder, case: Case) -> None:
    check_in_process(policy_responder, case)


def test_weighted_shards_keep_their_records_together(ask: Ask) -> None:
    """A shard with two endpoints is one unit of the draw: its records stay side by side."""
    seen = set()
    for _ in range(40):
        got = [line.rsplit(" ", 1)[1] for line in lines(ask(f"hlw.prod.{Z}", "A").answer)]
        at = got.index("10.70.0.1")
        assert sorted(got[at : at + 2]) == ["10.70.0.1", "10.70.0.2"] or got[at - 1] == "10.70.0.2", got
        seen.add(got[0])
    assert len(seen) == 2  # both shards come first in some answers (odds of not: 2 x 0.75^40)


def test_failover_answer_is_one_order_for_everyone(ask: Ask) -> None:
    answers = {tuple(lines(ask(FO, "A", "d").answer)) for _ in range(20)}
    assert len(answers) == 1


BIG = f"hlbig.prod.{Z}"


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_big_headless_answer_is_truncated_over_udp_and_whole_over_tcp(policy_server, transport):
    ask = over_network(policy_server, transport == "tcp")
    reply = ask(BIG, "A", "a")
    if transport == "udp":
        assert reply.flags & dns.flags.TC and not reply.answer
    else:
        assert not reply.flags & dns.flags.TC
        addresses = [line.rsplit(" ", 1)[1] for line in lines(reply.answer)]
        own = {f"10.100.{i // 250}.{i % 250 + 1}" for i in range(1000)}
        assert set(addresses[:1000]) == own  # a's own endpoints first (tier 0), then c's (tier 2)
        assert set(addresses[1000:]) == {f"10.102.{i // 250}.{i % 250 + 1}" for i in range(1000)}


def test_srv_past_the_largest_tcp_message_keeps_what_fits(policy_server):
    """2,000 SRV targets and their addresses are more than 65,535 bytes: the additional
    section goes, then the last tier's records past what fits, without TC (a subset of
    the endpoints, as KEP-1645 allows for headless services)."""
    reply = over_network(policy_server, True)(f"_http._tcp.{BIG}", "SRV", "a")
    assert not reply.flags & dns.flags.TC and not reply.additional
    records = lines(reply.answer)
    assert 1000 < len(records) < 2000
    assert all(" 0 1 8080 " in line and ".a.hlbig." in line for line in records[:1000])  # a's tier whole
    assert len(reply.to_wire()) <= 65535
    udp = over_network(policy_server, False)(f"_http._tcp.{BIG}", "SRV", "a")
    assert udp.flags & dns.flags.TC


def test_srv_targets_longer_than_a_dns_name_are_left_out():
    """<hostname>.<cluster>.<svc>.<ns>.F.svc.Z of four 63-byte labels is past 255 bytes (RFC 1035 3.1)."""
    long, cluster = "x" * 63, "c" * 63
    records = (f"/f/{long}/{long}/{cluster}: {{endpoints: [{{ip: 10.0.0.1, hostname: {long}}}, {{ip: 10.0.0.2}}], "
               f"ports: [{{name: http, port: 80}}]}}\n")
    ask = in_process(make_responder(records), False)
    service = f"{long}.{long}.f.svc.federation."
    reply = ask(f"_http._tcp.{service}", "SRV", cluster)
    assert lines(reply.answer) == [f"_http._tcp.{service} 30 IN SRV 0 1 80 10-0-0-2.{cluster}.{service}"]
    assert sorted(rd.address for rd in ask(service, "A", cluster).answer[0]) == ["10.0.0.1", "10.0.0.2"]
