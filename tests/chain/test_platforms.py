"""A member's cluster DNS as each platform ships it, wired to feddns the way docs/operations.md says for
that platform, answers the federation's names with the member's own clusterIP first.

Each platform's DNS is the real CoreDNS running that platform's Corefile, kept as a fixture in
tests/deploy/stock/ with where it comes from; :func:`harness.coredns.on_loopback` changes only what a node
gives (ports, the API server's address, the node's resolvers, the mount paths of ConfigMap volumes).
The rest of the chain (harness/chain.py) is real: kube-apiserver, controller, etcd, serve, and the
stub-zone endpoint writing ConfigMap coredns-feddns, projected as kubelet projects it.
"""

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dns.rcode
import pytest
import yaml

from harness.chain import FEDERATION, QNAME, Chain
from harness.coredns import ConfigMapProjector, CoreDNS, on_loopback
from harness.kubecluster import KubeCluster
from harness.ports import free_port
from harness.stubzone import StubzoneProcess
from tests.deploy.test_charts import script_env
from tests.deploy.test_platforms import template

REPO = Path(__file__).parents[2]
STOCK = REPO / "tests/deploy/stock"
SCRIPT = REPO / "deploy/cluster-dns/node-local-dns/node-local-dns-import.sh"
IMPORT_LINE = (REPO / "deploy/cluster-dns/coredns/corefile-import.txt").read_text().strip()


@pytest.fixture(scope="module")
def chain(etcd: Any, kube_foo: KubeCluster) -> Iterator[Chain]:
    running = Chain(etcd, {"foo": kube_foo}, f"/t{uuid.uuid4().hex[:12]}", ttl=1, members=("foo",)).start()
    yield running
    running.stop()


def corefiles(fixture: str) -> dict[str, str]:
    """The Corefiles of the ConfigMaps in ``fixture``, by ConfigMap name."""
    return {obj["metadata"]["name"]: obj["data"]["Corefile"]
            for obj in yaml.safe_load_all((STOCK / fixture).read_text()) if obj and obj["kind"] == "ConfigMap"}


@contextmanager
def member_dns(chain: Chain, corefile: str, name: str, mount: str = "/etc/coredns/feddns",
               listen: int = 53) -> Iterator[CoreDNS]:
    """The real CoreDNS running ``corefile`` (its servers on ``listen``) as cluster foo's DNS, programmed by
    a stub-zone endpoint of its own (``--backend coredns``, ConfigMap coredns-feddns of a namespace of the
    test's own, projected at ``mount`` as kubelet would) to which Federated-DNS's address was POSTed, as
    the controller does."""
    kube = chain.kubes["foo"]
    namespace = f"platform-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(namespace)
    upstream = free_port()
    zones = Path(tempfile.mkdtemp(prefix="feddns-zones-"))
    dns = CoreDNS(kube, corefile=lambda port: on_loopback(corefile, port, kube, {mount: zones}, upstream, listen),
                  name=f"{name} foo")
    projector = ConfigMapProjector(kube, zones, namespace=namespace, name="coredns-feddns")
    endpoint = StubzoneProcess(chain.pki, "--backend", "coredns", "--cluster", "foo", "--kubeconfig", kube.kubeconfig,
                               "--configmap", f"{namespace}/coredns-feddns", "--coredns-port", str(dns.port),
                               "--allow-loopback-nameservers")  # Federated-DNS is on 127.0.0.1
    endpoint.start()
    try:
        answer = endpoint.request("POST", f"/federations/{FEDERATION}",
                                  {"nameservers": [f"127.0.0.1:{chain.serve.port}"]})
        assert answer.status in (200, 201), answer
        projector.start()
        yield dns.start()
    finally:
        dns.close()
        projector.stop()
        endpoint.stop()
        shutil.rmtree(zones, ignore_errors=True)
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}")


def assert_federation(dns: CoreDNS, chain: Chain, reached: bool) -> None:
    """``dns`` gives foo's answer (its own clusterIP first), or, when not ``reached``, nothing of it."""
    if reached:
        assert dns.addresses(QNAME) == chain.expected("foo", members=("foo",)), dns.child.log[-2000:]
    else:
        assert dns.addresses(QNAME) == [], "the platform's stock DNS should not reach feddns"


def test_rke2_coredns_with_the_helmchartconfig_imports_the_stub_zones(chain: Chain) -> None:
    """RKE2 (docs/operations.md, "RKE2"): deploy/cluster-dns/rke2/'s HelmChartConfig gives its chart's
    Corefile the same import line as coredns-import.sh; an RKE2 upgrade re-renders the chart with it."""
    rendered = corefiles("rke2-coredns.yaml")
    stock, wired = rendered["rke2-coredns"], rendered["rke2-coredns-with-feddns"]
    assert wired == IMPORT_LINE + "\n" + stock
    for corefile, reached in ((stock, False), (wired, True)):
        with member_dns(chain, corefile, "rke2-coredns") as dns:
            assert_federation(dns, chain, reached)


def platform_dns(kube: KubeCluster, corefile: str, name: str) -> CoreDNS:
    """The real CoreDNS running ``corefile``, which mounts nothing of ours, started."""
    upstream = free_port()

    def runnable(port: int) -> str:
        return on_loopback(corefile, port, kube, {}, upstream)
    return CoreDNS(kube, corefile=runnable, name=f"{name} {kube.name}").start()


def forwarder_corefile() -> str:
    """The Corefile of the member chart's own CoreDNS, feddns-forwarder, as helm renders it for EKS."""
    (configmap,) = [obj for obj in template("eks") if obj["kind"] == "ConfigMap"
                    and obj["metadata"]["name"] == "feddns-forwarder"]
    return str(configmap["data"]["Corefile"])


def test_eks_forwards_the_zone_once_to_the_charts_forwarder_which_tags_it(chain: Chain) -> None:
    """EKS (docs/operations.md, "EKS"): the add-on's Corefile with the one server block its ``corefile``
    value adds (``federation.:53 { forward . <feddns-forwarder> }``), in front of the chart's forwarder,
    whose blocks the endpoint writes with ``--coredns-port 1053``. An add-on update with resolveConflicts
    OVERWRITE puts the stock Corefile back: the federation is lost, which the endpoint's probe shows."""
    stock, kube = corefiles("eks-coredns.yaml")["coredns"], chain.kubes["foo"]
    with member_dns(chain, forwarder_corefile(), "feddns-forwarder", listen=1053) as forwarder:
        edit = f"federation.:53 {{\n    forward . 127.0.0.1:{forwarder.port}\n}}\n"
        for corefile, reached in ((stock, False), (stock + edit, True)):
            eks = platform_dns(kube, corefile, "eks coredns")
            try:
                assert_federation(eks, chain, reached)
            finally:
                eks.close()


ADDRESSES = "bind 169.254.20.10 10.96.0.10"
"""The link-local and kube-dns addresses the stock Corefile binds on a node; here, 127.0.0.1."""


@pytest.fixture
def node_local_dns(kube_foo: KubeCluster) -> Iterator[str]:
    """The stock node-local-dns ConfigMap, applied for real in a namespace of the test's own."""
    ns = f"nodelocaldns-{uuid.uuid4().hex[:8]}"
    kube_foo.ensure_namespace(ns)
    for obj in yaml.safe_load_all((STOCK / "nodelocaldns.yaml").read_text()):
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


def cache(chain: Chain, text: str, addresses: str = ADDRESSES) -> CoreDNS:
    """A node-local cache running ``text`` as node-cache would: its pillars filled, on loopback
    (``addresses``: its bind line on a node)."""
    assert addresses in text, "the stock Corefile's bind line moved: update ADDRESSES"
    dead = free_port()  # the node's resolvers: nothing answers there, as nothing knows the federation

    def runtime(port: int) -> str:
        return (text.replace(addresses, "bind 127.0.0.1")
                .replace(":53 federation.:53 {", f":{port} federation.:{port} {{").replace(":53 {", f":{port} {{")
                .replace("__PILLAR__CLUSTER__DNS__", f"127.0.0.1:{chain.coredns['foo'].port}")
                .replace("__PILLAR__UPSTREAM__SERVERS__", f"127.0.0.1:{dead}")
                .replace("prometheus :9253", f"prometheus 127.0.0.1:{free_port()}")
                .replace("health 169.254.20.10:8080", f"health 127.0.0.1:{free_port()}"))
    return CoreDNS(chain.kubes["foo"], corefile=runtime, name="node-local-dns foo").start()


def test_the_federation_zone_goes_through_the_node_local_cache_to_coredns_which_tags_it(
        chain: Chain, kube_foo: KubeCluster, node_local_dns: str) -> None:
    """NodeLocal DNSCache (docs/operations.md): the upstream node-local-dns Corefile sends only the cluster
    domain to CoreDNS; after deploy/cluster-dns/node-local-dns/'s script, run with the real kubectl against
    the real kube-apiserver, it sends the federation zone there too, and CoreDNS tags it. The cache is the
    real CoreDNS running that ConfigMap's Corefile with what node-cache fills in when it starts (the
    kube-dns-upstream address, the node's resolvers) and loopback for the node's addresses."""
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


RKE2_ADDRESSES = "bind 169.254.20.10 10.43.0.10"
"""The bind line of RKE2's node-local-dns Corefile on a node (its cluster DNS address 10.43.0.10)."""


def rke2_node_local_dns() -> dict[str, dict[str, Any]]:
    """RKE2's node-local-dns ConfigMaps (tests/deploy/stock/rke2-nodelocaldns.yaml) by name."""
    return {obj["metadata"]["name"]: obj for obj in yaml.safe_load_all((STOCK / "rke2-nodelocaldns.yaml").read_text())
            if obj}


def test_rke2_sends_the_federation_zone_to_coredns_through_its_helmchartconfig_nodelocal_values(
        chain: Chain) -> None:
    """RKE2's node-local-dns as its chart renders it: without nodelocal.extraClusterDomains the federation
    is lost at the cache; with [federation.] (deploy/cluster-dns/rke2/), CoreDNS gets it and tags it."""
    config = yaml.safe_load((REPO / "deploy/cluster-dns/rke2/rke2-coredns-config.yaml").read_text())
    assert yaml.safe_load(config["spec"]["valuesContent"])["nodelocal"] == {"extraClusterDomains": ["federation."]}
    rendered = rke2_node_local_dns()  # with-feddns: rendered with those values
    for name, reached in (("node-local-dns", False), ("node-local-dns-with-feddns", True)):
        node_cache = cache(chain, rendered[name]["data"]["Corefile"], RKE2_ADDRESSES)
        try:
            if reached:
                assert node_cache.addresses(QNAME) == chain.expected("foo", members=("foo",))
            else:
                lost = node_cache.query(QNAME)
                assert lost.rcode() != dns.rcode.NOERROR or not lost.answer, "the stock cache should not reach feddns"
        finally:
            node_cache.close()


def test_the_import_script_refuses_a_node_local_dns_configmap_that_a_helm_release_renders(
        kube_foo: KubeCluster) -> None:
    """RKE2's node-local-dns, with the ownership Helm gives what it installs: a patch would be gone at the next
    upgrade, so the script changes nothing and names RKE2's way."""
    ns = f"nodelocaldns-{uuid.uuid4().hex[:8]}"
    kube_foo.ensure_namespace(ns)
    try:
        configmap = rke2_node_local_dns()["node-local-dns"]
        configmap["metadata"].update(namespace=ns, annotations={"meta.helm.sh/release-name": "rke2-coredns",
                                                                "meta.helm.sh/release-namespace": "kube-system"})
        configmap["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "Helm"
        kube_foo.apply(configmap)
        done = subprocess.run(["bash", str(SCRIPT), "--context", kube_foo.name, "--namespace", ns],
                              capture_output=True, text=True, timeout=120, check=False, env=script_env(kube_foo))
        assert done.returncode == 1, done.stdout + done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            "node-local-dns-import.sh: ConfigMap node-local-dns belongs to Helm release rke2-coredns, which puts it "
            "back at its next upgrade; not patched. RKE2: add federation. to nodelocal.extraClusterDomains in the "
            "valuesContent of HelmChartConfig rke2-coredns (deploy/cluster-dns/rke2/rke2-coredns-config.yaml)")
        assert corefile(kube_foo, ns) == configmap["data"]["Corefile"]
    finally:
        kube_foo.request("DELETE", f"/api/v1/namespaces/{ns}")
