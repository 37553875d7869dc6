"""Answer policies (docs/reference.md section 2): every policy x asking cluster x health,
in-process (the function the transports call) and over UDP and TCP to a real server.

Each case: qname, qtype, asking cluster (EDNS0 option 65245), rcode, and the answer
section as groups of zone-file lines. The groups come in the order given; the lines of
one group in any order (a tier rotates, a weighted tier is drawn per answer).
"""

import dns.flags
import dns.rcode
import dns.rdatatype
import pytest

from tests.dns.tables import Ask, a, check_groups, in_process, lines, make_responder, over_network, srv

Z = "pol.svc.federation."


LOC, LOC_DOWN = f"loc.prod.{Z}", f"loc-down.prod.{Z}"
FO, FO_DOWN = f"fo.prod.{Z}", f"fo-down.prod.{Z}"
WT, WT_DOWN = f"wt.prod.{Z}", f"wt-down.prod.{Z}"
LW, LW_DOWN = f"lw.prod.{Z}", f"lw-down.prod.{Z}"
HL, HL_DOWN = f"hl.prod.{Z}", f"hl-down.prod.{Z}"

CASES = {
    # locality (the default): own clusterIP, then zone, region, the rest; unready shards out
    "locality from a": (LOC, "A", "a", "NOERROR",
                        [a(LOC, "10.1.0.1"), a(LOC, "1.1.0.2", "1.1.0.5"), a(LOC, "1.1.0.3"), a(LOC, "1.1.0.4")]),
    "locality from d": (LOC, "A", "d", "NOERROR",
                        [a(LOC, "10.1.0.4"), a(LOC, "1.1.0.1", "1.1.0.2", "1.1.0.3", "1.1.0.5")]),
    "locality external": (LOC, "A", None, "NOERROR", [a(LOC, *(f"1.1.0.{n}" for n in range(1, 6)))]),
    "locality down from a": (LOC_DOWN, "A", "a", "NOERROR", [a(LOC_DOWN, "10.1.1.1"), a(LOC_DOWN, "1.1.1.3")]),
    "locality down from b": (LOC_DOWN, "A", "b", "NOERROR", [a(LOC_DOWN, "1.1.1.1"), a(LOC_DOWN, "1.1.1.3")]),
    # failover: the list's order for everyone (own shard by its clusterIP), unlisted clusters last
    "failover from a": (FO, "A", "a", "NOERROR",
                        [a(FO, "2.2.0.3"), a(FO, "10.2.0.1"), a(FO, "2.2.0.2"), a(FO, "2.2.0.4")]),
    "failover from b": (FO, "A", "b", "NOERROR",
                        [a(FO, "2.2.0.3"), a(FO, "2.2.0.1"), a(FO, "10.2.0.2"), a(FO, "2.2.0.4")]),
    "failover from c": (FO, "A", "c", "NOERROR",
                        [a(FO, "10.2.0.3"), a(FO, "2.2.0.1"), a(FO, "2.2.0.2"), a(FO, "2.2.0.4")]),
    "failover from d": (FO, "A", "d", "NOERROR",
                        [a(FO, "2.2.0.3"), a(FO, "2.2.0.1"), a(FO, "2.2.0.2"), a(FO, "10.2.0.4")]),
    "failover external": (FO, "A", None, "NOERROR",
                          [a(FO, "2.2.0.3"), a(FO, "2.2.0.1"), a(FO, "2.2.0.2"), a(FO, "2.2.0.4")]),
    "failover first choice down, from c": (FO_DOWN, "A", "c", "NOERROR",
                                           [a(FO_DOWN, "2.2.1.1"), a(FO_DOWN, "2.2.1.2"), a(FO_DOWN, "2.2.1.4")]),
    "failover first choice down, from d": (FO_DOWN, "A", "d", "NOERROR",
                                           [a(FO_DOWN, "2.2.1.1"), a(FO_DOWN, "2.2.1.2"), a(FO_DOWN, "10.2.1.4")]),
    "failover SRV: priority by place": (
        f"_http._tcp.{FO}", "SRV", "a", "NOERROR",
        [srv(f"_http._tcp.{FO}", f"0 2 80 c.{FO}"), srv(f"_http._tcp.{FO}", f"10 1 80 a.{FO}"),
         srv(f"_http._tcp.{FO}", f"20 1 80 b.{FO}", f"20 1 80 d.{FO}")]),
    # weighted: one group drawn by weight; weight 0 is left out unless named
    "weighted from a": (WT, "A", "a", "NOERROR", [a(WT, "10.3.0.1", "3.3.0.2", "3.3.0.4")]),
    "weighted from c (weight 0: not even for itself)": (WT, "A", "c", "NOERROR",
                                                         [a(WT, "3.3.0.1", "3.3.0.2", "3.3.0.4")]),
    "weighted external": (WT, "A", None, "NOERROR", [a(WT, "3.3.0.1", "3.3.0.2", "3.3.0.4")]),
    "weighted down": (WT_DOWN, "A", "a", "NOERROR", [a(WT_DOWN, "3.3.1.2", "3.3.1.4")]),
    "weighted AAAA": (f"wt6.prod.{Z}", "AAAA", "a", "NOERROR",
                      [[f"wt6.prod.{Z} 30 IN AAAA fd00::3:1", f"wt6.prod.{Z} 30 IN AAAA 2001:db8::3:2"]]),
    "weighted ANY: IPv4 drawn, then IPv6 drawn": (
        f"wt6.prod.{Z}", "ANY", None, "NOERROR",
        [a(f"wt6.prod.{Z}", "3.3.2.1", "3.3.2.2"),
         [f"wt6.prod.{Z} 30 IN AAAA 2001:db8::3:1", f"wt6.prod.{Z} 30 IN AAAA 2001:db8::3:2"]]),
    "weighted: weight 0 named explicitly": (f"c.{WT}", "A", None, "NOERROR", [a(f"c.{WT}", "3.3.0.3")]),
    "weighted SRV: priority 0, the weights": (
        f"_http._tcp.{WT}", "SRV", None, "NOERROR",
        [srv(f"_http._tcp.{WT}", f"0 3 80 a.{WT}", f"0 1 80 b.{WT}", f"0 1 80 d.{WT}")]),
    # locality-weighted: the tiers, drawn by weight within each
    "locality-weighted from a": (LW, "A", "a", "NOERROR",
                                 [a(LW, "10.4.0.1"), a(LW, "4.4.0.2", "4.4.0.5"), a(LW, "4.4.0.3"), a(LW, "4.4.0.4")]),
    "locality-weighted from d": (LW, "A", "d", "NOERROR",
                                 [a(LW, "10.4.0.4"), a(LW, "4.4.0.1", "4.4.0.2", "4.4.0.3", "4.4.0.5")]),
    "locality-weighted external": (LW, "A", None, "NOERROR", [a(LW, *(f"4.4.0.{n}" for n in range(1, 6)))]),
    "locality-weighted down from a": (LW_DOWN, "A", "a", "NOERROR", [a(LW_DOWN, "10.4.1.1"), a(LW_DOWN, "4.4.1.2")]),
    "locality-weighted SRV": (
        f"_http._tcp.{LW}", "SRV", "a", "NOERROR",
        [srv(f"_http._tcp.{LW}", f"0 1 80 a.{LW}"), srv(f"_http._tcp.{LW}", f"10 3 80 b.{LW}", f"10 2 80 e.{LW}"),
         srv(f"_http._tcp.{LW}", f"20 1 80 c.{LW}"), srv(f"_http._tcp.{LW}", f"30 1 80 d.{LW}")]),
    # shards that disagree, or a bad policy field: the default (locality)
    "policies disagree": (f"mixed.prod.{Z}", "A", "a", "NOERROR",
                          [a(f"mixed.prod.{Z}", "10.5.0.1"), a(f"mixed.prod.{Z}", "5.5.0.2")]),
    "unknown policy": (f"badpolicy.prod.{Z}", "A", "a", "NOERROR",
                       [a(f"badpolicy.prod.{Z}", "10.6.0.1"), a(f"badpolicy.prod.{Z}", "6.6.0.4")]),
    "negative weight": (f"badweight.prod.{Z}", "A", "b", "NOERROR",
                        [a(f"badweight.prod.{Z}", "10.7.0.2"), a(f"badweight.prod.{Z}", "7.7.0.1")]),
    # headless: endpoint IPs, own cluster first, other clusters' only when their pods are routable
    "headless from a": (HL, "A", "a", "NOERROR", [a(HL, "10.60.0.1", "10.60.0.2"), a(HL, "10.62.0.1")]),
    "headless from b": (HL, "A", "b", "NOERROR",
                        [a(HL, "10.61.0.1"), a(HL, "10.60.0.1", "10.60.0.2"), a(HL, "10.62.0.1")]),
    "headless from d": (HL, "A", "d", "NOERROR", [a(HL, "10.63.0.1"), a(HL, "10.60.0.1", "10.60.0.2", "10.62.0.1")]),
    "headless external": (HL, "A", None, "NOERROR", [a(HL, "10.60.0.1", "10.60.0.2", "10.62.0.1")]),
    "headless AAAA": (HL, "AAAA", "a", "NOERROR", [[f"{HL} 30 IN AAAA fd00::62:1"]]),
    "headless down from b": (HL_DOWN, "A", "b", "NOERROR", [a(HL_DOWN, "10.61.1.1"), a(HL_DOWN, "10.62.1.1")]),
    "headless down from a": (HL_DOWN, "A", "a", "NOERROR", [a(HL_DOWN, "10.62.1.1")]),
    "headless weighted": (f"hlw.prod.{Z}", "A", None, "NOERROR",
                          [a(f"hlw.prod.{Z}", "10.70.0.1", "10.70.0.2", "10.72.0.1")]),
    "headless failover": (f"hlfo.prod.{Z}", "A", "a", "NOERROR",
                          [a(f"hlfo.prod.{Z}", "10.82.0.1"), a(f"hlfo.prod.{Z}", "10.80.0.1")]),
    "headless shard, routable": (f"a.{HL}", "A", "d", "NOERROR", [a(f"a.{HL}", "10.60.0.1", "10.60.0.2")]),
    "headless shard, isolated": (f"b.{HL}", "A", "a", "NOERROR", []),
    "headless shard, isolated, from itself": (f"b.{HL}", "A", "b", "NOERROR", [a(f"b.{HL}", "10.61.0.1")]),
    "one endpoint by hostname": (f"web-0.a.{HL}", "A", "d", "NOERROR", [a(f"web-0.a.{HL}", "10.60.0.1")]),
    "one endpoint of an isolated cluster": (f"web-0.b.{HL}", "A", "a", "NOERROR", []),
    "one endpoint of an isolated cluster, from itself": (f"web-0.b.{HL}", "A", "b", "NOERROR",
                                                          [a(f"web-0.b.{HL}", "10.61.0.1")]),
    "an endpoint without hostname, by its address": (f"10-62-0-1.c.{HL}", "A", None, "NOERROR",
                                                     [a(f"10-62-0-1.c.{HL}", "10.62.0.1")]),
    "an IPv6 endpoint by its address": (
        f"fd00-0000-0000-0000-0000-0000-0062-0001.c.{HL}", "AAAA", None, "NOERROR",
        [[f"fd00-0000-0000-0000-0000-0000-0062-0001.c.{HL} 30 IN AAAA fd00::62:1"]]),
    "no such endpoint": (f"web-1.b.{HL}", "A", "b", "NXDOMAIN", []),
    "no such endpoint name": (f"nosuch.a.{HL}", "A", "a", "NXDOMAIN", []),
    "headless SRV: one target per endpoint": (
        f"_http._tcp.{HL}", "SRV", "a", "NOERROR",
        [srv(f"_http._tcp.{HL}", f"0 1 8080 web-0.a.{HL}", f"0 1 8080 web-1.a.{HL}"),
         srv(f"_http._tcp.{HL}", f"20 1 8080 10-62-0-1.c.{HL}",
             f"20 1 8080 fd00-0000-0000-0000-0000-0000-0062-0001.c.{HL}")]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_answer(ask: Ask, case: str) -> None:
    qname, qtype, cluster, rcode, groups = CASES[case]
    for _ in range(3):  # the first answer is built, the next come from the caches
        reply = ask(qname, qtype, cluster)
        assert dns.rcode.to_text(reply.rcode()) == rcode
        check_groups(lines(reply.answer), groups)
        assert reply.flags & dns.flags.AA
        if not groups:
            assert [f"{r.name} {dns.rdatatype.to_text(r.rdtype)}" for r in reply.authority] == ["federation. SOA"]


def test_srv_additional_section_as_answered_for_the_asker(ask: Ask) -> None:
    reply = ask(f"_http._tcp.{FO}", "SRV", "a")
    assert sorted(lines(reply.additional)) == sorted(
        a(f"c.{FO}", "2.2.0.3") + a(f"a.{FO}", "10.2.0.1") + a(f"b.{FO}", "2.2.0.2") + a(f"d.{FO}", "2.2.0.4"))
    reply = ask(f"_http._tcp.{HL}", "SRV", "a")
    assert sorted(lines(reply.additional)) == sorted(
        a(f"web-0.a.{HL}", "10.60.0.1") + a(f"web-1.a.{HL}", "10.60.0.2") + a(f"10-62-0-1.c.{HL}", "10.62.0.1")
        + [f"fd00-0000-0000-0000-0000-0000-0062-0001.c.{HL} 30 IN AAAA fd00::62:1"])


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
