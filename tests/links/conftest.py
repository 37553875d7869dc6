"""Fixtures of the links tests: certificates, the local cluster's API, and the cluster DNS.

The local cluster is the session's real kube-apiserver foo (``kube_foo``, tests/conftest.py), shared
with other packages: the links tests keep their Services in namespace ``data`` and delete them after
each module. The chain the webhook's DNS gating goes through is the real one:
``feddns links --resolver`` -> unbound (a member cluster's DNS, stub zone for
the federation) -> ``feddns serve`` (Federated-DNS, serving RECORDS).
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.kubecluster import KubeCluster
from harness.serve import ServeProcess, write_records
from harness.unbound import UnboundResolver
from tests.links.support import RECORDS, STUB_ZONE, LinksProcess, Pki, clear_services, local_services, make_pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA and a server certificate for 127.0.0.1, made by `feddns certs`."""
    return make_pki(tmp_path_factory.mktemp("links-pki"))


@pytest.fixture(scope="module")
def kube(kube_foo: KubeCluster) -> Iterator[KubeCluster]:
    """The local cluster's API server (real, the session's foo), holding :func:`local_services` for the
    module; after it, every Service in their namespace is deleted, a test's own included."""
    for obj in local_services():
        kube_foo.apply(obj)
    yield kube_foo
    clear_services(kube_foo)


@pytest.fixture(scope="module")
def kubeconfig(kube: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    return kube.write_kubeconfig(str(tmp_path_factory.mktemp("kube") / "foo.kubeconfig"))


@pytest.fixture(scope="module")
def federated_dns() -> Iterator[ServeProcess]:
    """Federated-DNS (`feddns serve`) serving RECORDS."""
    with ServeProcess(records=write_records(RECORDS)) as server:
        yield server


@pytest.fixture(scope="module")
def cluster_dns(federated_dns: ServeProcess) -> Iterator[UnboundResolver]:
    """The member cluster's DNS: unbound, with a stub zone for the federation pointing at Federated-DNS."""
    resolver = UnboundResolver("foo", stub_zone=STUB_ZONE, stub_port=federated_dns.port).start()
    yield resolver
    resolver.stop()


@pytest.fixture(scope="module")
def webhook(pki: Pki, kubeconfig: str, cluster_dns: UnboundResolver) -> Iterator[LinksProcess]:
    """The real `feddns links`, no policy file, asking the cluster DNS."""
    process = LinksProcess(pki, kubeconfig=kubeconfig, resolver=f"127.0.0.1:{cluster_dns.port}").start()
    yield process
    assert process.stop() == 0, process.lines[-20:]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
