"""One test's view of a session's real kube-apiserver (tests/support/membercluster.py): what a test made
is gone after it, and a fault only FakeKube shows is refused by name."""

from typing import Any

import pytest

from harness.kubecluster import KubeCluster
from harness.objects import service
from tests.controller.harness import FIXTURES, LABEL
from tests.support.membercluster import TestObjects


def contents(kube: KubeCluster) -> dict[str, list[str]]:
    """Namespaces, Services and EndpointSlices of the server, by name."""
    def names(path: str) -> list[str]:
        items: list[dict[str, Any]] = kube.request("GET", path)["items"]
        return sorted(f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in items)
    return {kind: names(path) for kind, path in (("namespaces", "/api/v1/namespaces"),
                                                 ("services", "/api/v1/services"),
                                                 ("endpointslices", "/apis/discovery.k8s.io/v1/endpointslices"))}


def test_close_leaves_the_server_as_it_was(kube_bar: KubeCluster) -> None:
    before = contents(kube_bar)
    objects = TestObjects(kube_bar)
    objects.load(FIXTURES / "bar.yaml")
    cart = objects.get("Service", "shop", "cart")
    assert cart is not None and cart["spec"]["clusterIPs"] == ["10.0.4.33", "fd00:10:96::33"]  # dual-stack, as given
    moved = objects.get("Service", "myns", "myservice")
    assert moved is not None
    moved["status"]["loadBalancer"]["ingress"] = [{"ip": "104.32.64.140"}]
    objects.delete("Service", "myns", "myservice")
    objects.apply(moved)  # read back, deleted, applied again: its old uid and resourceVersion are no precondition
    objects.apply(service("extra", "made-later", labels=LABEL))
    assert contents(kube_bar) != before
    objects.close()
    assert contents(kube_bar) == before


def test_a_fault_is_refused_naming_the_fake_to_use(kube_foo: KubeCluster) -> None:
    objects = TestObjects(kube_foo)
    with pytest.raises(AttributeError, match=r"'black_hole' is not something .* fake_foo"):
        objects.black_hole()
