"""Stale clusters (docs/reference.md section 2): a cluster whose record says ``"stale": true``
has its shards in the last tier, or left out with ``"staleAction": "drop"``, except for
askers in that cluster itself. Cases are qname, qtype, asking cluster, answer as zone-file text."""

from collections.abc import Iterator

import pytest

from tests.dns.test_answers import lines
from tests.support.serve import ServeProcess, write_records

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
    (WEB, "A", "a", [f"{WEB} 30 IN A 10.0.0.1", f"{WEB} 30 IN A 1.1.1.4", f"{WEB} 30 IN A 1.1.1.24"]),
    # from x itself: its own shard first (its query shows it is up), c still left out
    (WEB, "A", "x", [f"{WEB} 30 IN A 10.0.0.24", f"{WEB} 30 IN A 1.1.1.1", f"{WEB} 30 IN A 1.1.1.4"]),
    # from c itself: own shard, a in its region, then d and the demoted x
    (WEB, "A", "c", [f"{WEB} 30 IN A 10.0.0.3", f"{WEB} 30 IN A 1.1.1.1", f"{WEB} 30 IN A 1.1.1.4",
                     f"{WEB} 30 IN A 1.1.1.24"]),
    # an external client: every shard but the dropped one
    (WEB, "A", None, [f"{WEB} 30 IN A 1.1.1.1", f"{WEB} 30 IN A 1.1.1.4", f"{WEB} 30 IN A 1.1.1.24"]),
    (SRV, "SRV", "a", [f"{SRV} 30 IN SRV 0 1 80 a.{WEB}", f"{SRV} 30 IN SRV 30 1 80 d.{WEB}",
                       f"{SRV} 30 IN SRV 30 1 80 x.{WEB}"]),
    # one cluster's shard by name is answered whatever its state
    (f"c.{WEB}", "A", "a", [f"c.{WEB} 30 IN A 1.1.1.3"]),
    # failover: x is listed first but stale, so it goes after every other; c is left out
    (FO, "A", "d", [f"{FO} 30 IN A 1.1.2.1", f"{FO} 30 IN A 10.0.1.4", f"{FO} 30 IN A 1.1.2.24"]),
    (FO, "A", "x", [f"{FO} 30 IN A 10.0.1.24", f"{FO} 30 IN A 1.1.2.1", f"{FO} 30 IN A 1.1.2.4"]),
]


@pytest.fixture(scope="module")
def stale_served() -> Iterator[ServeProcess]:
    with ServeProcess(records=write_records(RECORDS), extra_args=["--order", "stable"]) as server:
        yield server


@pytest.mark.parametrize("qname,qtype,cluster,expected", CASES)
def test_stale_clusters(stale_served: ServeProcess, qname: str, qtype: str, cluster: str | None,
                        expected: list[str]) -> None:
    reply = stale_served.query(qname, qtype, cluster)
    assert lines(reply.answer) == expected


def test_weighted_answers_put_a_stale_cluster_last_and_drop_the_other(stale_served: ServeProcess) -> None:
    """A weighted order is drawn afresh for each answer; the stale x is always after the
    drawn ones, and c (staleAction drop) never appears."""
    orders = set()
    for _ in range(30):
        addresses = [rd.address for rrset in stale_served.query(WT, "A").answer for rd in rrset]
        assert sorted(addresses[:2]) == ["1.1.3.1", "1.1.3.4"] and addresses[2:] == ["1.1.3.24"], addresses
        orders.add(tuple(addresses))
    assert len(orders) == 2  # the two fresh shards are still drawn in either order
