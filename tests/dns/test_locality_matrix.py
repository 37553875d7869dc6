"""The locality matrix, `feddns_dns_answers_first_tier_total{source_cluster, tier}`: each tier
counted for the asking cluster, through the answer cache and the UDP reply cache (counted per
entry, as the qtype and rcode counts), after entries leave the cache, and summed over two
workers of a real server; and `feddns_dns_answers_none_ready_total`, the fail-open answers
(no shard ready) among them, counted the same way."""

import pytest

from feddns.dns import metrics
from feddns.dns.metrics import ServeCollector
from feddns.dns.responder import Responder
from harness.ports import wait_until
from harness.serve import ServeProcess, write_records
from tests.dns import tables

# Clusters of federation `m`: a and b share zone z1; c shares region r1 only; d is far.
# Service `one` has a shard in a only; `none` has one, not ready, and answers NODATA then
# (noneReady: nodata); `down` has one in a and one in d, neither ready: it fails open;
# `pair` shards in a and d.
RECORDS = """
/m/_clusters/a: {zone: z1, region: r1}
/m/_clusters/b: {zone: z1, region: r1}
/m/_clusters/c: {zone: z2, region: r1}
/m/_clusters/d: {zone: z3, region: r2}
/m/ns/one/a: {clusterIP: 10.0.0.1, externalIP: 1.1.1.1, ports: [{name: http, protocol: TCP, port: 80}]}
/m/ns/none/a: {clusterIP: 10.0.1.1, externalIP: 1.1.2.1, ready: 0, noneReady: nodata}
/m/ns/down/a: {clusterIP: 10.0.4.1, externalIP: 1.1.4.1, ready: 0}
/m/ns/down/d: {clusterIP: 10.0.4.4, externalIP: 1.1.4.4, ready: 0}
/m/ns/pair/a: {clusterIP: 10.0.2.1, externalIP: 1.1.3.1, policy: failover, failoverOrder: [d, a]}
/m/ns/pair/d: {clusterIP: 10.0.2.4, externalIP: 1.1.3.4, policy: failover, failoverOrder: [d, a]}
"""
ONE = "one.ns.m.svc.federation."
NONE = "none.ns.m.svc.federation."
PAIR = "pair.ns.m.svc.federation."
DOWN = "down.ns.m.svc.federation."
SRV_ONE = "_http._tcp." + ONE

# (qname, qtype, asking cluster, tier of the first record)
CASES = [
    (ONE, "A", "a", "own"),
    (ONE, "A", "b", "zone"),
    (ONE, "A", "c", "region"),
    (ONE, "A", "d", "other"),
    (ONE, "A", None, "other"),
    (NONE, "A", "a", "none"),
    (ONE, "AAAA", "a", "none"),  # no IPv6 address: no record
    (PAIR, "A", "a", "other"),  # failover sends a to d first
    (PAIR, "A", "d", "own"),
    (SRV_ONE, "SRV", "b", "zone"),
    (DOWN, "A", "d", "own"),  # fail open: d's own shard first, though not ready
    (DOWN, "A", "b", "zone"),  # a, in b's zone
]
FAIL_OPEN = 2
"""Cases above whose answer is a fail-open one (``down``)."""
ASKED = 5
"""Times each case is asked over UDP: built, answered from the answer, then from the kept reply."""


def matrix(samples: dict[str, float]) -> dict[tuple[str, str], float]:
    """The locality matrix's samples by (source_cluster, tier)."""
    out = {}
    for name, value in samples.items():
        if name.startswith("feddns_dns_answers_first_tier_total{"):
            labels = dict(part.split("=") for part in name[name.index("{") + 1 : -1].split(","))
            out[(labels["source_cluster"].strip('"'), labels["tier"].strip('"'))] = value
    return out


def expected(times: int) -> dict[tuple[str, str], float]:
    want = {(cluster, tier): 0.0 for cluster in ("a", "b", "c", "d", "unknown") for tier in metrics.TIERS}
    for _, _, cluster, tier in CASES:
        key = (cluster or "unknown", tier)
        want[key] = want.get(key, 0.0) + times
    return want


def collected(responder: Responder) -> dict[tuple[str, str], float]:
    collector = ServeCollector(responder, lambda: 0, lambda: 0)
    return {(s.labels["source_cluster"], s.labels["tier"]): s.value
            for family in collector.collect() if family.name == "feddns_dns_answers_first_tier"
            for s in family.samples if s.name.endswith("_total")}


def none_ready(responder: Responder) -> float:
    """``feddns_dns_answers_none_ready_total`` as the collector gives it."""
    collector = ServeCollector(responder, lambda: 0, lambda: 0)
    return next(s.value for family in collector.collect() if family.name == "feddns_dns_answers_none_ready"
                for s in family.samples if s.name.endswith("_total"))


def test_each_tier_is_counted_through_the_answer_and_reply_caches():
    responder = tables.make_responder(RECORDS, stable=True)
    udp = tables.in_process(responder, False)
    for qname, qtype, cluster, _ in CASES:
        for _ in range(ASKED):
            udp(qname, qtype, cluster)
    assert collected(responder) == expected(ASKED)
    assert none_ready(responder) == FAIL_OPEN * ASKED
    kept = [entry for entry in responder.cache.store.entries() if entry.first is not None]
    assert any(type(entry).__name__ == "Reply" and entry.hits for entry in kept), "no query came from a kept reply"


def test_counts_survive_entries_leaving_the_cache():
    responder = tables.make_responder(RECORDS, stable=True)
    udp = tables.in_process(responder, False)
    for qname, qtype, cluster, _ in CASES:
        udp(qname, qtype, cluster)
        udp(qname, qtype, cluster)
    responder.cache.clear()  # a full load drops every entry: their hits move to the stats
    assert len(responder.cache) == 0
    for qname, qtype, cluster, _ in CASES:
        udp(qname, qtype, cluster)
    assert collected(responder) == expected(3)
    assert none_ready(responder) == FAIL_OPEN * 3


def test_clusters_past_the_cap_are_counted_as_other(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(metrics, "MATRIX_CLUSTERS", 2)  # a and b named; c and d past the cap
    responder = tables.make_responder(RECORDS, stable=True)
    udp = tables.in_process(responder, False)
    for cluster in "abcd":
        udp(ONE, "A", cluster)
    got = {key: value for key, value in collected(responder).items() if value}
    assert got == {("a", "own"): 1, ("b", "zone"): 1, ("other", "region"): 1, ("other", "other"): 1}
    assert {cluster for cluster, _ in collected(responder)} == {"a", "b", "other"}


def test_two_workers_sum_the_matrix_over_the_cached_udp_path():
    args = ["--metrics", "127.0.0.1:0", "--order", "stable"]
    with ServeProcess(records=write_records(RECORDS), workers=2, extra_args=args) as server:
        wait_until(lambda: server.addresses(ONE, cluster="a") == ["10.0.0.1"], timeout=15, what="both workers")
        before = matrix(server.metrics())
        for qname, qtype, cluster, _ in CASES:
            for _ in range(ASKED):  # each from a socket of its own: spread over both workers
                server.query(qname, qtype, cluster)
        got = matrix(server.metrics())
        after = server.metrics()
    delta = {key: got.get(key, 0.0) - before.get(key, 0.0) for key in got}
    assert delta == expected(ASKED)
    assert after["feddns_dns_answers_none_ready_total"] == FAIL_OPEN * ASKED
