"""Fixtures of the links tests: certificates, the local cluster's API, and the cluster DNS.

The chain the webhook's DNS gating goes through is the real one:
``feddns links --resolver`` -> unbound (a member cluster's DNS, stub zone for
the federation) -> ``feddns serve`` (Federated-DNS, serving RECORDS).
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.objects import service
from harness.serve import ServeProcess, write_records
from harness.unbound import UnboundResolver
from tests.links.support import LABEL, RECORDS, STUB_ZONE, LinksProcess, Pki, make_pki
from tests.support.fakekube import FakeKube


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA and a server certificate for 127.0.0.1, made by `feddns certs`."""
    return make_pki(tmp_path_factory.mktemp("links-pki"))


def local_services() -> list[dict]:
    """The local cluster (foo): shards of postgres and redis, a Service of another federation, a plain one."""
    return [
        service("data", "postgres", labels=LABEL, ports=[("sql", "TCP", 5432), ("admin", "TCP", 5433)]),
        service("data", "redis", labels=LABEL, ports=[("redis", "TCP", 6379)]),
        service("data", "mysql", labels={"federation.feddns.io/name": "otherfed"}, ports=[("mysql", "TCP", 3306)]),
        service("data", "idle", ports=[("http", "TCP", 80)]),
    ]


@pytest.fixture(scope="module")
def kube() -> Iterator[FakeKube]:
    """The local cluster's API server, holding :func:`local_services`."""
    fake = FakeKube("foo", bookmark_interval=0.3)
    fake.start()
    for obj in local_services():
        fake.apply(obj)
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def kubeconfig(kube: FakeKube, tmp_path_factory: pytest.TempPathFactory) -> str:
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
