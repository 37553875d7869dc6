"""The whole chain through real programs: kube-apiserver per cluster -> feddns controller -> etcd ->
feddns serve -> CoreDNS (programmed by feddns stubzone) and unbound per cluster (0xfedd tag) -> the asking pod."""

import os
import re
import signal
import time
import uuid
from pathlib import Path

import dns.rcode
import pytest

from harness.chain import CACHE_MIN_TTL, CLUSTERS, QNAME, SERVE_STALE, Chain, myservice
from harness.ports import wait_until
from harness.unbound import UnboundResolver

COREDNS_MINTTL = 5
"""Seconds: the least time CoreDNS's cache plugin keeps a successful answer (its default MINTTL)."""


@pytest.fixture(scope="module")
def chain(etcd, kube_foo, kube_bar):
    """One chain for the module (it takes seconds to build); a test that changes a cluster
    puts it back before it ends, so each test starts from both shards being served."""
    running = Chain(etcd, {"foo": kube_foo, "bar": kube_bar}, f"/t{uuid.uuid4().hex[:12]}", ttl=1).start()
    yield running
    running.stop()


def test_each_cluster_gets_its_own_shard_first(chain):
    for server in ("coredns", "unbound"):
        assert chain.answers("foo")[server] == ["10.0.3.64", "104.32.64.130"], server
        assert chain.answers("bar")[server] == ["10.0.4.20", "104.32.64.128"], server


def test_the_resolver_tags_its_queries_with_its_cluster_name(chain):
    # The same question straight to Federated-DNS without a tag is an external client's:
    # every externalIP, no clusterIP. So the clusterIPs above came from the resolvers' tags.
    assert sorted(chain.serve.addresses(QNAME)) == sorted(c["externalIP"] for c in CLUSTERS.values())


def test_deleting_the_service_in_foo_changes_both_resolvers_after_the_ttl(chain):
    for asker in CLUSTERS:  # warm both caches
        chain.wait_for(asker, chain.expected(asker))
    chain.kubes["foo"].delete("Service", "myns", "myservice")
    try:
        for asker in CLUSTERS:
            chain.wait_for(asker, chain.expected(asker, deleted=frozenset({"foo"})), timeout=20)
        # unbound keeps Federated-DNS's TTL; CoreDNS's cache plugin keeps an answer at least its MINTTL,
        # 5 s by default (docs/stubzone.md, "coredns"), so bar's CoreDNS TTL may be up to 5 here; foo's
        # stub zone (--cache-min-ttl 0) holds no answer past Federated-DNS's TTL.
        assert CACHE_MIN_TTL.get("foo") == 0 and "bar" not in CACHE_MIN_TTL
        for _ in range(3 * COREDNS_MINTTL):
            for reply, limit in ((chain.resolvers["foo"].query(QNAME), chain.ttl),
                                 (chain.coredns["foo"].query(QNAME), chain.ttl),
                                 (chain.coredns["bar"].query(QNAME), max(chain.ttl, COREDNS_MINTTL))):
                assert reply.answer, "the other shard is still served"
                assert all(rrset.ttl <= limit for rrset in reply.answer), reply
            time.sleep(0.4)
    finally:
        chain.kubes["foo"].apply(myservice("foo"))
    for asker in CLUSTERS:  # and creating it again brings it back
        chain.wait_for(asker, chain.expected(asker), timeout=20)


def test_the_stub_zone_is_a_configmap_that_coredns_imports_and_reloads(chain):
    for name, kube in chain.kubes.items():
        configmap = kube.get("ConfigMap", "kube-system", "coredns-feddns")
        assert configmap is not None
        block = configmap["data"]["myfederation.server"]
        assert f"rewrite edns0 local set 0xfedd {name}" in block
        assert f"forward . 127.0.0.1:{chain.serve.port}" in block
        assert chain.coredns[name].projector.volume.files() == configmap["data"]
        assert chain.coredns[name].reloads() >= 1


def test_delete_stops_coredns_forwarding_and_cluster_local_is_answered_throughout(chain):
    coredns = chain.coredns["foo"]
    kubernetes_service = "kubernetes.default.svc.cluster.local."
    assert coredns.addresses(kubernetes_service) == ["10.0.0.1"]
    reloads = coredns.reloads()
    chain.unprogram("foo")
    try:
        # No block for the federation's zone: the names fall to the "." block, whose kubernetes plugin
        # serves only cluster.local (a stock Corefile would forward them to the node's resolver).
        wait_until(lambda: coredns.query(QNAME).rcode() == dns.rcode.SERVFAIL, timeout=20, interval=0.2,
                   what="foo's CoreDNS no longer forwarding the federation's names")
        assert coredns.child.wait_for(r"no next plugin found", timeout=5)
        assert coredns.reloads() > reloads
        assert coredns.addresses(kubernetes_service) == ["10.0.0.1"]
        assert chain.answers("bar")["coredns"] == chain.expected("bar")
    finally:
        chain.program("foo")
    chain.wait_for("foo", chain.expected("foo"), timeout=20)
    assert coredns.addresses(kubernetes_service) == ["10.0.0.1"]


def test_unbound_checkconf_refuses_a_bad_config_and_start_says_so():
    resolver = UnboundResolver("foo", stub_zone="myfederation.svc.federation.", stub_port=53)
    resolver.conf.write_text(resolver.conf.read_text().replace("rrset-roundrobin: no", "rrset-roundrobin: maybe"))
    with pytest.raises(RuntimeError, match=re.escape(str(resolver.conf))):
        resolver.start()
    resolver.stop()


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process under it (``/proc/PID/task/*/children``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            todo += [int(child) for child in children.read_text().split()]
    return found


def test_while_federated_dns_is_frozen_a_serve_stale_stub_zone_gives_the_expired_answer(chain):
    """serve (its parent and workers) stopped with SIGSTOP past the TTL, as a pod that is gone while
    kube-proxy still sends to it: foo's stub zone (``--cache-serve-stale 30``) asks again, gets nothing,
    and gives the expired answer; bar's (the command's default) answers SERVFAIL. Once serve runs
    again, foo's answers are fresh."""
    assert SERVE_STALE.get("foo") == 30 and "bar" not in SERVE_STALE
    for asker in CLUSTERS:  # warm both caches
        chain.wait_for(asker, chain.expected(asker))
    pids = process_tree(chain.serve.child.pid)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(chain.ttl + 1.5)  # every cached answer has expired
        stale = chain.coredns["foo"].query(QNAME, timeout=8)
        assert dns.rcode.to_text(stale.rcode()) == "NOERROR", stale
        assert [rr.address for rrset in stale.answer for rr in rrset] == chain.expected("foo"), stale
        failed = chain.coredns["bar"].query(QNAME, timeout=8)
        assert failed.rcode() == dns.rcode.SERVFAIL, failed
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    for asker in CLUSTERS:
        chain.wait_for(asker, chain.expected(asker), timeout=20)
