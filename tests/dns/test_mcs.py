"""The Multi-Cluster Services names (``--mcs-zone clusterset.local.``, docs/reference.md
section 1): the same answers as the federation names, as named cases
(:class:`tests.dns.tables.Case`) asked in-process of the responder on the policy records
(tests/dns/policy_records.py); tests/dns/test_network_smoke.py asks one over UDP and TCP."""

import dns.rcode
import pytest

from feddns.dns.responder import Responder
from harness.serve import ServeProcess, write_records
from tests.dns import tables
from tests.dns.conftest import RECORDS as OTHER_FEDERATION
from tests.dns.policy_records import RECORDS
from tests.dns.tables import Case, a, check_in_process, ids, lines, negative, soa
from tests.dns.test_policies import failover_srv, headless_srv

M = "clusterset.local."
LOC, FO, WT, HL = (f"{name}.prod.svc.{M}" for name in ("loc", "fo", "wt", "hl"))
NEG = negative(M)
FED_LOC = "loc.prod.pol.svc.federation."

CASES = [
    Case(LOC, "A", "a", "NOERROR", (a(LOC, "10.1.0.1"), a(LOC, "1.1.0.2", "1.1.0.5"), a(LOC, "1.1.0.3"),
                                    a(LOC, "1.1.0.4")), id="service, locality"),
    Case(LOC, "A", None, "NOERROR", (a(LOC, *(f"1.1.0.{n}" for n in range(1, 6))),), id="service, external"),
    Case(FO, "A", "b", "NOERROR", (a(FO, "2.2.0.3"), a(FO, "2.2.0.1"), a(FO, "10.2.0.2"), a(FO, "2.2.0.4")),
         id="service, failover"),
    Case(WT, "A", None, "NOERROR", (a(WT, "3.3.0.1", "3.3.0.2", "3.3.0.4"),), id="service, weighted"),
    Case(f"a.{LOC}", "A", "b", "NOERROR", (a(f"a.{LOC}", "1.1.0.1"),), id="cluster's shard"),
    Case(f"b.{LOC}", "A", "b", "NOERROR", (a(f"b.{LOC}", "10.1.0.2"),), id="cluster's shard, own"),
    Case(HL, "A", "b", "NOERROR", (a(HL, "10.61.0.1"), a(HL, "10.60.0.1", "10.60.0.2"), a(HL, "10.62.0.1")),
         id="headless"),
    Case(f"web-0.a.{HL}", "A", None, "NOERROR", (a(f"web-0.a.{HL}", "10.60.0.1"),), id="headless endpoint"),
    failover_srv(FO, "SRV targets in the MCS zone"),  # targets and their addresses in the MCS zone too
    headless_srv(HL, "headless SRV"),
    Case(f"prod.svc.{M}", "A", None, "NOERROR", authority=NEG, id="namespace (empty non-terminal)"),
    Case(f"svc.{M}", "A", None, "NOERROR", authority=NEG, id="svc (empty non-terminal)"),
    Case(f"nosuch.prod.svc.{M}", "A", "a", "NXDOMAIN", authority=NEG, id="no such service"),
    Case(f"loc.nosuch.svc.{M}", "A", "a", "NXDOMAIN", authority=NEG, id="no such namespace"),
    Case(f"loc.prod.pol.svc.{M}", "A", "a", "NXDOMAIN", authority=NEG,
         id="the federation's label is not part of MCS names"),
    Case(f"www.{M}", "A", None, "NXDOMAIN", authority=NEG, id="outside svc"),
    Case(M, "NS", None, "NOERROR", ((f"{M} 30 IN NS ns.dns.{M}",),), id="apex"),
    Case(M, "SOA", None, "NOERROR", (soa(M),), id="apex SOA names the MCS zone"),
    Case(M, "A", None, "NOERROR", authority=NEG, id="apex A"),
    # the federation names still answer beside the MCS zone
    Case(f"a.{FED_LOC}", "A", "b", "NOERROR", (a(f"a.{FED_LOC}", "1.1.0.1"),), id="federation name beside"),
    Case("example.com.", "A", None, "REFUSED", id="outside both zones"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_answer(policy_responder: Responder, case: Case) -> None:
    check_in_process(policy_responder, case)


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
