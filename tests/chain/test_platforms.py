"""A member's cluster DNS as each platform ships it, wired to feddns the way docs/operations.md says for
that platform, answers the federation's names with the member's own clusterIP first.

Each platform's DNS is the real CoreDNS running that platform's Corefile, kept as a fixture in
tests/deploy/stock/ with where it comes from; :func:`harness.coredns.on_loopback` changes only what a node
gives (ports, the API server's address, the node's resolvers, the mount paths of ConfigMap volumes).
The rest of the chain (harness/chain.py) is real: kube-apiserver, controller, etcd, serve, and the
stub-zone endpoint writing ConfigMap coredns-feddns, projected as kubelet projects it.
"""

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.chain import FEDERATION, QNAME, Chain
from harness.coredns import ConfigMapProjector, CoreDNS, on_loopback
from harness.kubecluster import KubeCluster
from harness.ports import free_port
from harness.stubzone import StubzoneProcess

REPO = Path(__file__).parents[2]
STOCK = REPO / "tests/deploy/stock"
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
def member_dns(chain: Chain, corefile: str, name: str, mount: str = "/etc/coredns/feddns") -> Iterator[CoreDNS]:
    """The real CoreDNS running ``corefile`` as cluster foo's DNS, programmed by a stub-zone endpoint of its
    own (``--backend coredns``, ConfigMap coredns-feddns of a namespace of the test's own, projected at
    ``mount`` as kubelet would) to which Federated-DNS's address was POSTed, as the controller does."""
    kube = chain.kubes["foo"]
    namespace = f"platform-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(namespace)
    upstream = free_port()
    zones = Path(tempfile.mkdtemp(prefix="feddns-zones-"))
    dns = CoreDNS(kube, corefile=lambda port: on_loopback(corefile, port, kube, {mount: zones}, upstream),
                  name=f"{name} foo")
    projector = ConfigMapProjector(kube, zones, namespace=namespace, name="coredns-feddns")
    endpoint = StubzoneProcess(chain.pki, "--backend", "coredns", "--cluster", "foo", "--kubeconfig", kube.kubeconfig,
                               "--configmap", f"{namespace}/coredns-feddns", "--coredns-port", str(dns.port))
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
