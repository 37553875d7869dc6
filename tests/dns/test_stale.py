"""Stale clusters (docs/reference.md section 2): a cluster whose record says ``"stale": true``
has its shards in the last tier, or left out with ``"staleAction": "drop"``, except for
askers in that cluster itself. Named cases (:class:`tests.dns.tables.Case`) asked in-process
of the responder the transports call, with a fixed order (``--order stable``)."""

import pytest

from feddns.dns.responder import Responder
from tests.dns.tables import Case, a, check_in_process, ids, in_process, make_responder, ordered, srv

# a and x share zone z1, c shares region r1, d is far. x is stale (demoted), c stale with drop.
RECORDS = """
/sf/_clusters/a: {zone: z1, region: r1}
/sf/_clusters/x: {zone: z1, region: r1, stale: true}
/sf/_clusters/c: {zone: z2, region: r1, stale: true, staleAction: drop}
/sf/_clusters/d: {zone: z3, region: r2}
/sf/prod/web/a: {clusterIP: 10.0.0.1, externalIP: 1.1.1.1, ports: [{name: http, protocol: TCP, port: 80}]}
/sf/prod/web/x: {clusterIP: 10.0.0.24, externalIP: 1.1.1.24, ports: [{name: http, protocol: TCP, port: 80}]}
/sf/prod/web/c: {clusterIP: 10.0.0.3, externalIP: 1.1.1.3, ports: [{name: http, protocol: TCP, port: 80}]}
/sf/prod/web/d: {clusterIP: 10.0.0.4, externalIP: 1.1.1.4, ports: [{name: http, protocol: TCP, port: 80}]}
/sf/prod/fo/a: {clusterIP: 10.0.1.1, externalIP: 1.1.2.1, policy: failover, failoverOrder: [x, a, d]}
/sf/prod/fo/x: {clusterIP: 10.0.1.24, externalIP: 1.1.2.24, policy: failover, failoverOrder: [x, a, d]}
/sf/prod/fo/c: {clusterIP: 10.0.1.3, externalIP: 1.1.2.3, policy: failover, failoverOrder: [x, a, d]}
/sf/prod/fo/d: {clusterIP: 10.0.1.4, externalIP: 1.1.2.4, policy: failover, failoverOrder: [x, a, d]}
/sf/prod/wt/a: {externalIP: 1.1.3.1, clusterIP: 10.0.2.1, policy: weighted, weight: 5}
/sf/prod/wt/x: {externalIP: 1.1.3.24, clusterIP: 10.0.2.24, policy: weighted, weight: 5}
/sf/prod/wt/c: {externalIP: 1.1.3.3, clusterIP: 10.0.2.3, policy: weighted, weight: 5}
/sf/prod/wt/d: {externalIP: 1.1.3.4, clusterIP: 10.0.2.4, policy: weighted, weight: 5}
"""
WEB = "web.prod.sf.svc.federation."
SRV = f"_http._tcp.{WEB}"
FO = "fo.prod.sf.svc.federation."
WT = "wt.prod.sf.svc.federation."

CASES = [
    # from a: x would be tier 1 (same zone) and c tier 2; x goes last, c is left out
    Case(WEB, "A", "a", "NOERROR", ordered(a(WEB, "10.0.0.1", "1.1.1.4", "1.1.1.24")), id="from a"),
    # from x itself: its own shard first (its query shows it is up), c still left out
    Case(WEB, "A", "x", "NOERROR", ordered(a(WEB, "10.0.0.24", "1.1.1.1", "1.1.1.4")), id="from the stale x"),
    # from c itself: own shard, a in its region, then d and the demoted x
    Case(WEB, "A", "c", "NOERROR", ordered(a(WEB, "10.0.0.3", "1.1.1.1", "1.1.1.4", "1.1.1.24")),
         id="from the dropped c"),
    # an external client: every shard but the dropped one
    Case(WEB, "A", None, "NOERROR", ordered(a(WEB, "1.1.1.1", "1.1.1.4", "1.1.1.24")), id="external"),
    Case(SRV, "SRV", "a", "NOERROR", ordered(srv(SRV, f"0 1 80 a.{WEB}", f"30 1 80 d.{WEB}", f"30 1 80 x.{WEB}")),
         additional=ordered(a(f"a.{WEB}", "10.0.0.1"), a(f"d.{WEB}", "1.1.1.4"), a(f"x.{WEB}", "1.1.1.24")),
         id="SRV from a: stale priority 30"),
    # one cluster's shard by name is answered whatever its state
    Case(f"c.{WEB}", "A", "a", "NOERROR", ordered(a(f"c.{WEB}", "1.1.1.3")), id="a dropped cluster's shard by name"),
    Case(f"x.{WEB}", "A", "a", "NOERROR", ordered(a(f"x.{WEB}", "1.1.1.24")), id="a stale cluster's shard by name"),
    # failover: x is listed first but stale, so it goes after every other; c is left out
    Case(FO, "A", "d", "NOERROR", ordered(a(FO, "1.1.2.1", "10.0.1.4", "1.1.2.24")), id="failover from d"),
    Case(FO, "A", "x", "NOERROR", ordered(a(FO, "10.0.1.24", "1.1.2.1", "1.1.2.4")), id="failover from x"),
]


@pytest.fixture(scope="module")
def stale_responder() -> Responder:
    return make_responder(RECORDS, stable=True)


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_stale_clusters(stale_responder: Responder, case: Case) -> None:
    check_in_process(stale_responder, case)


def test_weighted_answers_put_a_stale_cluster_last_and_drop_the_other(stale_responder: Responder) -> None:
    """A weighted order is drawn afresh for each answer; the stale x is always after the
    drawn ones, and c (staleAction drop) never appears."""
    orders = set()
    ask = in_process(stale_responder, False)
    for _ in range(30):
        addresses = [rd.address for rrset in ask(WT, "A").answer for rd in rrset]
        assert sorted(addresses[:2]) == ["1.1.3.1", "1.1.3.4"] and addresses[2:] == ["1.1.3.24"], addresses
        orders.add(tuple(addresses))
    assert len(orders) == 2  # the two fresh shards are still drawn in either order
