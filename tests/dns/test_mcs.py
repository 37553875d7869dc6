"""The Multi-Cluster Services names (``--mcs-zone clusterset.local.``, docs/reference.md
section 1): the same answers as the federation names, in-process and over UDP and TCP."""

import dns.flags
import dns.rcode
import dns.rdatatype
import pytest

from tests.dns import tables
from tests.dns.conftest import RECORDS as OTHER_FEDERATION
from tests.dns.policy_records import RECORDS
from tests.dns.tables import Ask, a, check_groups, lines, srv
from tests.support.serve import ServeProcess, write_records

M = "clusterset.local."
LOC, FO, WT, HL = (f"{name}.prod.svc.{M}" for name in ("loc", "fo", "wt", "hl"))

CASES = {
    "service, locality": (LOC, "A", "a", "NOERROR",
                          [a(LOC, "10.1.0.1"), a(LOC, "1.1.0.2", "1.1.0.5"), a(LOC, "1.1.0.3"), a(LOC, "1.1.0.4")]),
    "service, external": (LOC, "A", None, "NOERROR", [a(LOC, *(f"1.1.0.{n}" for n in range(1, 6)))]),
    "service, failover": (FO, "A", "b", "NOERROR",
                          [a(FO, "2.2.0.3"), a(FO, "2.2.0.1"), a(FO, "10.2.0.2"), a(FO, "2.2.0.4")]),
    "service, weighted": (WT, "A", None, "NOERROR", [a(WT, "3.3.0.1", "3.3.0.2", "3.3.0.4")]),
    "cluster's shard": (f"a.{LOC}", "A", "b", "NOERROR", [a(f"a.{LOC}", "1.1.0.1")]),
    "cluster's shard, own": (f"b.{LOC}", "A", "b", "NOERROR", [a(f"b.{LOC}", "10.1.0.2")]),
    "headless": (HL, "A", "b", "NOERROR", [a(HL, "10.61.0.1"), a(HL, "10.60.0.1", "10.60.0.2"), a(HL, "10.62.0.1")]),
    "headless endpoint": (f"web-0.a.{HL}", "A", None, "NOERROR", [a(f"web-0.a.{HL}", "10.60.0.1")]),
    "SRV targets in the MCS zone": (
        f"_http._tcp.{FO}", "SRV", "a", "NOERROR",
        [srv(f"_http._tcp.{FO}", f"0 2 80 c.{FO}"), srv(f"_http._tcp.{FO}", f"10 1 80 a.{FO}"),
         srv(f"_http._tcp.{FO}", f"20 1 80 b.{FO}", f"20 1 80 d.{FO}")]),
    "headless SRV": (
        f"_http._tcp.{HL}", "SRV", "a", "NOERROR",
        [srv(f"_http._tcp.{HL}", f"0 1 8080 web-0.a.{HL}", f"0 1 8080 web-1.a.{HL}"),
         srv(f"_http._tcp.{HL}", f"20 1 8080 10-62-0-1.c.{HL}",
             f"20 1 8080 fd00-0000-0000-0000-0000-0000-0062-0001.c.{HL}")]),
    "namespace (empty non-terminal)": (f"prod.svc.{M}", "A", None, "NOERROR", []),
    "svc (empty non-terminal)": (f"svc.{M}", "A", None, "NOERROR", []),
    "no such service": (f"nosuch.prod.svc.{M}", "A", "a", "NXDOMAIN", []),
    "no such namespace": (f"loc.nosuch.svc.{M}", "A", "a", "NXDOMAIN", []),
    "the federation's label is not part of MCS names": (f"loc.prod.pol.svc.{M}", "A", "a", "NXDOMAIN", []),
    "outside svc": (f"www.{M}", "A", None, "NXDOMAIN", []),
    "apex": (M, "NS", None, "NOERROR", [[f"{M} 30 IN NS ns.dns.{M}"]]),
    "apex A": (M, "A", None, "NOERROR", []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_answer(ask: Ask, case: str) -> None:
    qname, qtype, cluster, rcode, groups = CASES[case]
    for _ in range(2):
        reply = ask(qname, qtype, cluster)
        assert dns.rcode.to_text(reply.rcode()) == rcode
        check_groups(lines(reply.answer), groups)
        assert reply.flags & dns.flags.AA
        if not groups:  # negative answers carry the MCS zone's SOA (RFC 2308)
            assert [f"{r.name} {dns.rdatatype.to_text(r.rdtype)}" for r in reply.authority] == [f"{M} SOA"]


def test_srv_additional_names_are_in_the_mcs_zone(ask: Ask) -> None:
    reply = ask(f"_http._tcp.{FO}", "SRV", "a")
    assert sorted(lines(reply.additional)) == sorted(
        a(f"c.{FO}", "2.2.0.3") + a(f"a.{FO}", "10.2.0.1") + a(f"b.{FO}", "2.2.0.2") + a(f"d.{FO}", "2.2.0.4"))


def test_apex_soa_names_the_mcs_zone(ask: Ask) -> None:
    (soa,) = ask(M, "SOA").answer[0]
    assert (str(soa.mname), str(soa.rname)) == (f"ns.dns.{M}", f"hostmaster.{M}")


def test_federation_names_still_answer_beside_the_mcs_zone(ask: Ask) -> None:
    assert lines(ask("a.loc.prod.pol.svc.federation.", "A", "b").answer) == a("a.loc.prod.pol.svc.federation.",
                                                                           "1.1.0.1")
    assert dns.rcode.to_text(ask("example.com.", "A").rcode()) == "REFUSED"


def test_several_federations_without_mcs_federation_answer_servfail_logged_once(caplog):
    responder = tables.make_responder(RECORDS + OTHER_FEDERATION, mcs_zone=M)
    ask = tables.in_process(responder, False)
    for _ in range(3):
        assert dns.rcode.to_text(ask(LOC, "A", "a").rcode()) == "SERVFAIL"
    assert dns.rcode.to_text(ask(f"nosuch.{M}", "A").rcode()) == "NXDOMAIN"  # only svc names need a federation
    assert len([r for r in caplog.records if "--mcs-federation" in r.getMessage()]) == 1
    chosen = tables.in_process(tables.make_responder(RECORDS + OTHER_FEDERATION, mcs_zone=M, mcs_federation="fed"),
                               False)
    assert lines(chosen("web.prod.svc." + M, "A", "a").answer)[0] == f"web.prod.svc.{M} 30 IN A 10.0.0.1"
    assert dns.rcode.to_text(chosen(LOC, "A", "a").rcode()) == "NXDOMAIN"  # loc.prod is pol's, not fed's


def test_mcs_federation_flag_over_the_network():
    path = write_records(RECORDS + OTHER_FEDERATION)
    with ServeProcess(records=path, extra_args=["--mcs-zone", "ClusterSet.Local", "--mcs-federation", "pol"]) as server:
        assert server.addresses(LOC, cluster="d")[0] == "10.1.0.4"
        assert server.addresses("web.prod.fed.svc.federation.", cluster="a")[0] == "10.0.0.1"
