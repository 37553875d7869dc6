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
"""
WEB = "web.prod.sf.svc.federation."
SRV = f"_http._tcp.{WEB}"

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
