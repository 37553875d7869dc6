"""NodeLocal DNSCache in front of a member's CoreDNS (docs/operations.md, "NodeLocal DNSCache").

The upstream node-local-dns Corefile (tests/deploy/stock/nodelocaldns.yaml) sends only the cluster domain
and the reverse zones to CoreDNS; a federation name goes to the node's resolvers and is lost. After
deploy/cluster-dns/node-local-dns/node-local-dns-import.sh, run with the real kubectl against the real
kube-apiserver, the ConfigMap's Corefile sends the federation zone to CoreDNS, which tags it: a pod's
query through the cache gets its own cluster's clusterIP first. The cache is the real CoreDNS running
that ConfigMap's Corefile, with what node-cache fills in when it starts (the kube-dns-upstream address,
the node's resolvers) and loopback addresses for the node's (harness/chain.py has the rest of the chain).
"""

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import dns.rcode
import pytest
import yaml

from harness.chain import FEDERATION, QNAME, Chain
from harness.coredns import CoreDNS
from harness.kubecluster import KubeCluster
from harness.ports import free_port
from tests.deploy.test_charts import script_env

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "deploy/cluster-dns/node-local-dns/node-local-dns-import.sh"
STOCK = REPO / "tests/deploy/stock/nodelocaldns.yaml"
ADDRESSES = "bind 169.254.20.10 10.96.0.10"
"""The link-local and kube-dns addresses the stock Corefile binds on a node; here, 127.0.0.1."""


@pytest.fixture(scope="module")
def chain(etcd, kube_foo) -> Iterator[Chain]:
    running = Chain(etcd, {"foo": kube_foo}, f"/t{uuid.uuid4().hex[:12]}", ttl=1, members=("foo",)).start()
    yield running
    running.stop()


@pytest.fixture
def node_local_dns(kube_foo: KubeCluster) -> Iterator[str]:
    """The stock node-local-dns ConfigMap, applied for real in a namespace of the test's own."""
    ns = f"nodelocaldns-{uuid.uuid4().hex[:8]}"
    kube_foo.ensure_namespace(ns)
    for obj in yaml.safe_load_all(STOCK.read_text()):
        if obj["kind"] == "ConfigMap":
            obj["metadata"]["namespace"] = ns
            kube_foo.apply(obj)
    yield ns
    kube_foo.request("DELETE", f"/api/v1/namespaces/{ns}")


def corefile(kube: KubeCluster, ns: str) -> str:
    return str(kube.request("GET", f"/api/v1/namespaces/{ns}/configmaps/node-local-dns")["data"]["Corefile"])


def import_script(kube: KubeCluster, ns: str, *args: str) -> str:
    done = subprocess.run(["bash", str(SCRIPT), "--context", kube.name, "--namespace", ns, *args],
                          capture_output=True, text=True, timeout=120, check=False, env=script_env(kube))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def cache(chain: Chain, text: str) -> CoreDNS:
    """A node-local cache running ``text`` as node-cache would: its pillars filled, on loopback."""
    assert ADDRESSES in text, "the stock Corefile's bind line moved: update ADDRESSES"
    dead = free_port()  # the node's resolvers: nothing answers there, as nothing knows the federation

    def runtime(port: int) -> str:
        return (text.replace(ADDRESSES, "bind 127.0.0.1").replace(":53 {", f":{port} {{")
                .replace("__PILLAR__CLUSTER__DNS__", f"127.0.0.1:{chain.coredns['foo'].port}")
                .replace("__PILLAR__UPSTREAM__SERVERS__", f"127.0.0.1:{dead}")
                .replace("prometheus :9253", f"prometheus 127.0.0.1:{free_port()}")
                .replace("health 169.254.20.10:8080", f"health 127.0.0.1:{free_port()}"))
    return CoreDNS(chain.kubes["foo"], corefile=runtime, name="node-local-dns foo").start()


def test_the_federation_zone_goes_through_the_node_local_cache_to_coredns_which_tags_it(
        chain: Chain, kube_foo: KubeCluster, node_local_dns: str) -> None:
    stock = corefile(kube_foo, node_local_dns)
    before = cache(chain, stock)
    try:
        lost = before.query(QNAME)
        assert lost.rcode() != dns.rcode.NOERROR or not lost.answer, "the stock cache should not reach feddns"
    finally:
        before.close()

    import_script(kube_foo, node_local_dns)
    patched = corefile(kube_foo, node_local_dns)
    assert patched.startswith(stock), "the stock blocks are kept as they were"
    assert "already as wanted" in import_script(kube_foo, node_local_dns)
    after = cache(chain, patched)
    try:
        assert after.addresses(QNAME) == chain.expected("foo", members=("foo",))
        assert after.addresses(f"foo.myservice.myns.{FEDERATION}.svc.federation.") == \
            chain.expected("foo", members=("foo",))
    finally:
        after.close()

    import_script(kube_foo, node_local_dns, "--undo")
    assert corefile(kube_foo, node_local_dns) == stock
