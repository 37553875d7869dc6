"""``feddns stubzone --backend kube-dns`` against a real kube-apiserver (harness/kubecluster.py).

tests/stubzone/test_configmaps.py checks the backend as the admin, in a namespace of each test's own
(and the faults against the fake API server). Here the ConfigMap
is the real ``kube-system/kube-dns`` as a cluster admin left it (upstreamNameservers, a stub domain of
their own, a key and a label of the addon manager), and the endpoint reaches the API server with the
token of a ServiceAccount bound to the Role of deploy/cluster-dns/kube-dns/stubzone.yaml: get and update
of that one ConfigMap, nothing else. So a verb the backend needs and the Role lacks, or a write the
real server stores otherwise than the backend expects, fails here.

The ServiceAccount, Role and RoleBinding are the manifest's with a suffix on their names: the shared
cluster may hold deploy/cluster-dns/coredns/'s Role of the same name (another ConfigMap in
``resourceNames``). Their rules are the manifest's as written.
"""

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.kubecluster import KubeCluster
from harness.stubzone import Pki, StubzoneProcess

REPO = Path(__file__).parents[2]
MANIFEST = REPO / "deploy" / "cluster-dns" / "kube-dns" / "stubzone.yaml"
RBAC = ("ServiceAccount", "Role", "RoleBinding")
ADMIN_DATA = {
    "upstreamNameservers": '["8.8.8.8", "8.8.4.4"]',
    "stubDomains": '{"acme.local": ["1.2.3.4"]}',
    "federations": "myfederation=example.com",  # the old federation key a cluster admin may have set
}
ADMIN_LABELS = {"addonmanager.kubernetes.io/mode": "EnsureExists"}


@pytest.fixture(scope="module")
def kube(kube_foo: KubeCluster) -> Iterator[KubeCluster]:
    """kube_foo without kube-system/kube-dns; one that was there is put back after the module."""
    before = kube_foo.get("ConfigMap", "kube-system", "kube-dns")
    if before is not None:
        kube_foo.delete("ConfigMap", "kube-system", "kube-dns")
    yield kube_foo
    if before is not None:
        meta = {k: v for k, v in before["metadata"].items() if k in ("name", "namespace", "labels", "annotations")}
        kube_foo.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": before.get("data", {})})


def rbac_objects(suffix: str) -> list[dict[str, Any]]:
    """The manifest's ServiceAccount, Role and RoleBinding of the backend (not the path check's
    feddns-stubzone-probe), each name with ``suffix``."""
    objects = [obj for obj in yaml.safe_load_all(MANIFEST.read_text())
               if obj and obj["kind"] in RBAC and obj["metadata"]["name"] == "feddns-stubzone"]
    assert sorted(obj["kind"] for obj in objects) == sorted(RBAC), objects
    for obj in objects:
        obj["metadata"]["name"] += suffix
        if obj["kind"] == "RoleBinding":
            obj["roleRef"]["name"] += suffix
            for subject in obj["subjects"]:
                subject["name"] += suffix
    return objects


@pytest.fixture(scope="module")
def kubeconfig(kube: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kubeconfig with the token of the manifest's ServiceAccount, bound to the manifest's Role only."""
    objects = rbac_objects(f"-{uuid.uuid4().hex[:8]}")
    for obj in objects:
        kube.apply(obj)
    account = next(obj["metadata"]["name"] for obj in objects if obj["kind"] == "ServiceAccount")
    token = kube.service_account_token("kube-system", account)
    yield kube.write_kubeconfig(tmp_path_factory.mktemp("kube-dns") / "foo.kubeconfig", token=token)
    for obj in reversed(objects):
        kube.delete(obj["kind"], "kube-system", obj["metadata"]["name"])


@pytest.fixture
def admin_configmap(kube: KubeCluster) -> Iterator[dict[str, Any]]:
    """kube-system/kube-dns as a cluster admin left it (stored); deleted after the test."""
    stored = kube.apply({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"namespace": "kube-system", "name": "kube-dns", "labels": ADMIN_LABELS},
                         "data": ADMIN_DATA})
    yield stored
    kube.delete("ConfigMap", "kube-system", "kube-dns")


@pytest.fixture
def endpoint(pki: Pki, kubeconfig: str) -> Iterator[StubzoneProcess]:
    with StubzoneProcess(pki, "--backend", "kube-dns", "--kubeconfig", kubeconfig) as server:
        yield server


def configmap(kube: KubeCluster) -> dict[str, Any]:
    obj = kube.get("ConfigMap", "kube-system", "kube-dns")
    assert obj is not None, "ConfigMap kube-system/kube-dns does not exist"
    return obj


def stub_domains(kube: KubeCluster) -> dict[str, list[str]]:
    return dict(json.loads(configmap(kube)["data"]["stubDomains"]))


def test_post_merges_its_stub_domain_into_the_real_configmap_and_keeps_the_rest(
        kube: KubeCluster, admin_configmap: dict[str, Any], endpoint: StubzoneProcess) -> None:
    answer = endpoint.request("POST", "/federations/myfederation",
                              {"nameservers": ["203.0.113.53", "203.0.113.54:5353", "2001:db8::53"]})
    assert answer.status == 200, answer
    stored = configmap(kube)
    assert stub_domains(kube) == {"acme.local": ["1.2.3.4"], "myfederation.svc.federation": [
        "203.0.113.53", "203.0.113.54:5353", "2001:db8::53"]}
    assert {k: v for k, v in stored["data"].items() if k != "stubDomains"} == {
        k: v for k, v in ADMIN_DATA.items() if k != "stubDomains"}
    assert stored["metadata"]["labels"] == ADMIN_LABELS
    assert stored["metadata"]["uid"] == admin_configmap["metadata"]["uid"]  # replaced, never re-created
    assert int(stored["metadata"]["resourceVersion"]) > int(admin_configmap["metadata"]["resourceVersion"])
    assert endpoint.request("GET", "/federations/myfederation").body["nameservers"] == [
        "203.0.113.53", "203.0.113.54:5353", "2001:db8::53"]
    # the same POST again: nothing to write
    version = stored["metadata"]["resourceVersion"]
    again = endpoint.request("POST", "/federations/myfederation",
                             {"nameservers": ["203.0.113.53", "203.0.113.54:5353", "2001:db8::53"]})
    assert again.status == 200, again
    assert configmap(kube)["metadata"]["resourceVersion"] == version


def test_delete_removes_only_its_domain(kube: KubeCluster, admin_configmap: dict[str, Any],
                                        endpoint: StubzoneProcess) -> None:
    assert endpoint.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]}).status == 200
    assert endpoint.request("POST", "/federations/b", {"nameservers": ["192.0.2.2"]}).status == 200
    deleted = endpoint.request("DELETE", "/federations/a")
    assert deleted.status == 200, deleted
    assert deleted.body["nameservers"] == ["192.0.2.1"]
    assert stub_domains(kube) == {"acme.local": ["1.2.3.4"], "b.svc.federation": ["192.0.2.2"]}
    assert endpoint.request("DELETE", "/federations/b").status == 200
    assert configmap(kube)["data"] == ADMIN_DATA
    assert endpoint.request("GET", "/federations/b").status == 404


def test_the_role_does_not_let_it_create_the_configmap(kube: KubeCluster, endpoint: StubzoneProcess) -> None:
    """As the manifest says: without kube-dns's ConfigMap, an admin must create it; the endpoint may not."""
    assert kube.get("ConfigMap", "kube-system", "kube-dns") is None
    answer = endpoint.request("POST", "/federations/myfederation", {"nameservers": ["203.0.113.53"]})
    assert answer.status == 503, answer
    assert "forbidden" in answer.body["error"].lower(), answer.body
    assert kube.get("ConfigMap", "kube-system", "kube-dns") is None
