"""Fixtures of the controller tests: member clusters foo and bar.

``foo`` and ``bar`` are the session's real kube-apiservers (``kube_foo``, ``kube_bar``) loaded with
fixtures/foo.yaml and bar.yaml for one test; what the test and the fixture made is deleted after it.
``fake_foo``, ``fake_bar`` and ``fake`` are FakeKube, only for a fault a real server cannot show on
demand (stopped, black-holed, held, watches expired, ...): a test using them says which."""

from collections.abc import Iterator

import pytest

from harness import peers
from harness.kubecluster import KubeCluster
from tests.controller.harness import FIXTURES, LABEL
from tests.support.fakekube import FakeKube
from tests.support.membercluster import TestObjects

SELECTOR = ",".join(f"{key}={value}" for key, value in LABEL.items())


@pytest.fixture(scope="session")
def _service_export_crds(kube_foo: KubeCluster, kube_bar: KubeCluster) -> None:
    """The MCS API's ServiceExport CRD in both clusters (as test_real_cluster.py installs it: once is enough)."""
    for kube in (kube_foo, kube_bar):
        kube.install_crds(peers.crd("serviceexports.yaml"))


def _leftovers(kube: KubeCluster) -> list[str]:
    """Services labelled for the tests' federation, and ServiceExports, that some other test left behind:
    the controller would shard them, and the tests compare etcd's whole content."""
    services = kube.request("GET", f"/api/v1/services?labelSelector={SELECTOR}")["items"]
    exports = kube.request("GET", "/apis/multicluster.x-k8s.io/v1alpha1/serviceexports")["items"]
    return [f"{kind} {o['metadata']['namespace']}/{o['metadata']['name']}"
            for kind, found in (("Service", services), ("ServiceExport", exports)) for o in found]


def _real(kube: KubeCluster) -> Iterator[TestObjects]:
    if left := _leftovers(kube):
        pytest.fail(f"cluster {kube.name} holds what another test left: {', '.join(left)}")
    objects = TestObjects(kube)
    try:
        objects.load(FIXTURES / f"{kube.name}.yaml")
        yield objects
    finally:
        objects.close()


@pytest.fixture
def foo(kube_foo: KubeCluster, _service_export_crds: None) -> Iterator[TestObjects]:
    """Cluster foo (a real kube-apiserver), loaded with fixtures/foo.yaml for this test."""
    yield from _real(kube_foo)


@pytest.fixture
def bar(kube_bar: KubeCluster, _service_export_crds: None) -> Iterator[TestObjects]:
    """Cluster bar (a real kube-apiserver), loaded with fixtures/bar.yaml for this test."""
    yield from _real(kube_bar)


def _fake(name: str) -> Iterator[FakeKube]:
    fake = FakeKube(name, bookmark_interval=0.3)
    fake.start()
    fake.load(str(FIXTURES / f"{name}.yaml"))
    yield fake
    fake.close()


@pytest.fixture
def fake_foo() -> Iterator[FakeKube]:
    """Fake cluster foo, loaded with fixtures/foo.yaml: for faults only."""
    yield from _fake("foo")


@pytest.fixture
def fake_bar() -> Iterator[FakeKube]:
    """Fake cluster bar, loaded with fixtures/bar.yaml: for faults only."""
    yield from _fake("bar")


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    """An empty fake cluster "t" with quick bookmarks: for faults only."""
    server = FakeKube("t", bookmark_interval=0.2)
    server.start()
    yield server
    server.close()
