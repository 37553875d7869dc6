"""The whole chain through real resolvers: fake clusters -> feddns controller ->
etcd -> feddns serve -> unbound per cluster (stub zone + 0xfedd tag) -> the asking pod."""

import re
import uuid

import pytest

from tests.chain.chain import CLUSTERS, QNAME, Chain, myservice
from tests.support.unbound import UnboundResolver


@pytest.fixture(scope="module")
def chain(etcd):
    """One chain for the module (it takes seconds to build); a test that changes a cluster
    puts it back before it ends, so each test starts from both shards being served."""
    running = Chain(etcd, f"/t{uuid.uuid4().hex[:12]}", ttl=1).start()
    yield running
    running.stop()


def test_each_cluster_gets_its_own_shard_first(chain):
    assert chain.resolvers["foo"].addresses(QNAME) == ["10.0.3.64", "104.32.64.130"]
    assert chain.resolvers["bar"].addresses(QNAME) == ["10.0.4.20", "104.32.64.128"]


def test_the_resolver_tags_its_queries_with_its_cluster_name(chain):
    # The same question straight to Federated-DNS without a tag is an external client's:
    # every externalIP, no clusterIP. So the clusterIPs above came from the resolvers' tags.
    assert sorted(chain.serve.addresses(QNAME)) == sorted(c["externalIP"] for c in CLUSTERS.values())


def test_deleting_the_service_in_foo_changes_both_resolvers_after_the_ttl(chain):
    for asker in CLUSTERS:  # warm both caches
        chain.wait_for(asker, chain.expected(asker))
    chain.fakes["foo"].delete("Service", "myns", "myservice")
    try:
        for asker in CLUSTERS:
            chain.wait_for(asker, chain.expected(asker, deleted=frozenset({"foo"})), timeout=20)
        reply = chain.resolvers["foo"].query(QNAME)
        assert reply.answer, "bar's shard is still served"
        assert all(rrset.ttl <= chain.ttl for rrset in reply.answer)
    finally:
        chain.fakes["foo"].apply(myservice("foo"))
    for asker in CLUSTERS:  # and creating it again brings it back
        chain.wait_for(asker, chain.expected(asker), timeout=20)


def test_unbound_checkconf_refuses_a_bad_config_and_start_says_so():
    resolver = UnboundResolver("foo", stub_zone="myfederation.svc.federation.", stub_port=53)
    resolver.conf.write_text(resolver.conf.read_text().replace("rrset-roundrobin: no", "rrset-roundrobin: maybe"))
    with pytest.raises(RuntimeError, match=re.escape(str(resolver.conf))):
        resolver.start()
    resolver.stop()
