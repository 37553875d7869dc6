"""``feddns stubzone --backend coredns-custom`` on AKS and k3s as they ship, end to end.

A real kube-apiserver holds the platform's ConfigMaps as the platform ships them
(tests/fixtures/platforms/) and a customer's own keys in ``coredns-custom``; the endpoint reaches it as a
ServiceAccount that may only ``get`` and ``update`` ConfigMap ``coredns-custom`` (docs/stubzone.md);
a real CoreDNS runs the platform's Corefile with that ConfigMap's keys as files in its custom directory
(harness/platformdns.py plays kubelet); a real ``feddns serve`` answers. A dig through that CoreDNS gets
cluster foo's own clusterIP first: foo's ``cidrs`` do not hold 127.0.0.1, so only the tag the block adds
can tell Federated-DNS the query is foo's.
"""

import copy
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.kubecluster import KubeCluster
from harness.platformdns import PlatformCoreDNS
from harness.serve import ServeProcess, write_records
from harness.stubzone import Pki, StubzoneProcess
from tests.stubzone.platforms import EXTERNAL, FOO_FIRST, QNAME, delete_all, fixture, kubeconfig_with_rules, records

RULES = [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["coredns-custom"],
          "verbs": ["get", "update"]}]
"""The endpoint's Role as docs/stubzone.md ("coredns-custom") gives it: no create, no delete."""
PLATFORM_CONFIGMAPS = ("coredns", "coredns-custom")


@pytest.fixture(scope="module")
def serve() -> Iterator[ServeProcess]:
    """Federated-DNS; cluster foo's queries would come from 10.240.0.0/16, not loopback."""
    with ServeProcess(records=write_records(records(["10.240.0.0/16"]))) as server:
        yield server


@pytest.fixture(scope="module")
def kubeconfig(kube_foo: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path, made = kubeconfig_with_rules(kube_foo, tmp_path_factory.mktemp("coredns-custom"), "kube-system", RULES)
    yield path
    delete_all(kube_foo, made)


@pytest.fixture
def kube(kube_foo: KubeCluster) -> Iterator[KubeCluster]:
    """kube_foo; the platform's ConfigMaps a test made are deleted after it."""
    yield kube_foo
    for name in PLATFORM_CONFIGMAPS:
        if kube_foo.get("ConfigMap", "kube-system", name) is not None:
            kube_foo.delete("ConfigMap", "kube-system", name)


@pytest.fixture
def coredns(kube: KubeCluster) -> Iterator[PlatformCoreDNS]:
    """The platform's CoreDNS (not started): its port is known before the customer's keys are written."""
    server = PlatformCoreDNS(kube)
    yield server
    server.close()


def install(kube: KubeCluster, platform: str) -> None:
    """The platform's ConfigMaps as it ships them."""
    for obj in fixture(f"{platform}-coredns.yaml"):
        kube.apply(obj)


def customer_keys(port: int) -> dict[str, str]:
    """A customer's own keys: a server block of theirs, and notes whose name starts like ours."""
    return {"mine.server": f"mine.example:{port} {{\n    errors\n    whoami\n}}\n",
            "feddns-notes.server": "# the federation's stub zone is feddns.myfederation.server\n"}


def add_customer_keys(kube: KubeCluster, port: int) -> dict:
    """Write the customer's keys into coredns-custom (creating it, as k3s's users do); returns it stored."""
    configmap = kube.get("ConfigMap", "kube-system", "coredns-custom") or {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "kube-system", "name": "coredns-custom"}}
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        k: v for k, v in configmap["metadata"].items() if k in ("namespace", "name", "labels")}}
    return kube.apply({**body, "data": customer_keys(port)})


def custom(kube: KubeCluster) -> dict:
    found = kube.get("ConfigMap", "kube-system", "coredns-custom")
    assert found is not None, "ConfigMap kube-system/coredns-custom is gone"
    return found


def endpoint(pki: Pki, kubeconfig: str, coredns: PlatformCoreDNS) -> StubzoneProcess:
    return StubzoneProcess(pki, "--backend", "coredns-custom", "--cluster", "foo", "--kubeconfig", kubeconfig,
                           "--coredns-port", str(coredns.port), "--allow-loopback-nameservers")  # serve: 127.0.0.1


@pytest.mark.parametrize("platform", ["aks", "k3s"])
def test_post_forwards_through_the_platforms_coredns_and_keeps_the_customers_keys(
        pki: Pki, kube: KubeCluster, kubeconfig: str, coredns: PlatformCoreDNS, serve: ServeProcess,
        platform: str) -> None:
    install(kube, platform)
    before = add_customer_keys(kube, coredns.port)
    with endpoint(pki, kubeconfig, coredns) as server:
        answer = server.request("POST", "/federations/myfederation", {"nameservers": [f"127.0.0.1:{serve.port}"]})
        assert answer.status == 200, answer
        stored = custom(kube)
        assert stored["metadata"]["uid"] == before["metadata"]["uid"]  # replaced, never re-created
        assert {k: v for k, v in stored["data"].items() if k != "feddns.myfederation.server"} == before["data"]
        block = stored["data"]["feddns.myfederation.server"]
        assert f"myfederation.svc.federation.:{coredns.port} {{" in block
        assert "rewrite edns0 local set 0xfedd foo" in block
        listed = server.request("GET", "/federations").body["federations"]
        assert [(zone["federation"], zone["nameservers"]) for zone in listed] == [
            ("myfederation", [f"127.0.0.1:{serve.port}"])]

        coredns.start()
        coredns.wait_for(QNAME, FOO_FIRST)
        assert sorted(serve.addresses(QNAME)) == EXTERNAL  # untagged from loopback: no cluster, so the tag did it

        deleted = server.request("DELETE", "/federations/myfederation")
        assert deleted.status == 200, deleted
        after = custom(kube)  # the last federation gone: the ConfigMap stays, the customer's keys as they were
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["data"] == before["data"]
        assert after["metadata"].get("labels") == before["metadata"].get("labels")
        assert server.request("GET", "/federations").body["federations"] == []


def test_k3s_rewriting_its_coredns_configmap_leaves_the_stub_zone_working(
        pki: Pki, kube: KubeCluster, kubeconfig: str, coredns: PlatformCoreDNS, serve: ServeProcess) -> None:
    """k3s writes ConfigMap coredns as shipped at every server start, undoing an edit to it; the stub zone
    lives in coredns-custom, which k3s never writes, so it survives."""
    install(kube, "k3s")
    add_customer_keys(kube, coredns.port)
    with endpoint(pki, kubeconfig, coredns) as server:
        answer = server.request("POST", "/federations/myfederation", {"nameservers": [f"127.0.0.1:{serve.port}"]})
        assert answer.status == 200, answer
    coredns.start()
    coredns.wait_for(QNAME, FOO_FIRST)
    programmed = custom(kube)

    (shipped,) = fixture("k3s-coredns.yaml")
    edited = copy.deepcopy(shipped)  # an admin's edit of the platform's Corefile...
    edited["data"]["Corefile"] = edited["data"]["Corefile"].replace("cache 30", "cache 10")
    kube.apply(edited)
    kube.apply(shipped)  # ...undone by k3s's restart
    coredns.restart()  # and the CoreDNS pods restarted with it

    coredns.wait_for(QNAME, FOO_FIRST)
    assert kube.get("ConfigMap", "kube-system", "coredns")["data"] == shipped["data"]
    assert custom(kube)["metadata"]["resourceVersion"] == programmed["metadata"]["resourceVersion"]


def test_without_coredns_custom_the_endpoint_says_how_to_create_it_and_creates_nothing(
        pki: Pki, kube: KubeCluster, kubeconfig: str, coredns: PlatformCoreDNS) -> None:
    install(kube, "k3s")  # k3s mounts coredns-custom as optional and does not create it
    with endpoint(pki, kubeconfig, coredns) as server:
        answer = server.request("POST", "/federations/myfederation", {"nameservers": ["192.0.2.53"]})
        assert answer.status == 503, answer
        assert "ConfigMap kube-system/coredns-custom does not exist" in answer.body["error"]
        assert "kubectl -n kube-system create configmap coredns-custom" in answer.body["error"]
        assert answer.body["mayHaveApplied"] is False
        listed = server.request("GET", "/federations")
        assert listed.status == 200 and listed.body["federations"] == []
        assert server.request("GET", "/federations/myfederation").status == 404
        health = server.request("GET", "/healthz")
        assert health.status == 200 and "does not exist" in health.body["store"], health
    assert kube.get("ConfigMap", "kube-system", "coredns-custom") is None


def test_only_keys_of_its_own_shape_are_federations(pki: Pki, kube: KubeCluster, kubeconfig: str,
                                                    coredns: PlatformCoreDNS, tmp_path: Path) -> None:
    install(kube, "aks")
    before = add_customer_keys(kube, coredns.port)
    with endpoint(pki, kubeconfig, coredns) as server:
        assert server.request("GET", "/federations").body["federations"] == []
        assert server.request("GET", "/federations/mine").status == 404
        assert server.request("DELETE", "/federations/mine").status == 404
        assert server.request("POST", "/federations/mine", {"nameservers": ["192.0.2.53"]}).status == 200
        data = custom(kube)["data"]
        assert data["mine.server"] == before["data"]["mine.server"]  # the customer's key, untouched
        assert "mine.svc.federation." in data["feddns.mine.server"]


def test_a_customers_key_named_like_ours_or_serving_our_zone_is_never_read_changed_or_deleted(
        pki: Pki, kube: KubeCluster, kubeconfig: str, coredns: PlatformCoreDNS, serve: ServeProcess) -> None:
    """Ownership is by content, not by name: ``feddns.corp.server`` written by a customer (no marker line)
    is not federation corp's, and a customer block already serving F's stub domain makes a POST for F a
    409 (CoreDNS would refuse a Corefile serving one zone twice). Nothing is written either way."""
    install(kube, "aks")
    theirs = {"feddns.corp.server": f"corp.example:{coredns.port} {{\n    forward . 192.0.2.53\n}}\n",
              "mine.server": f"myfederation.svc.federation.:{coredns.port} {{\n    forward . 192.0.2.54\n}}\n"}
    before = kube.apply({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"namespace": "kube-system", "name": "coredns-custom"}, "data": theirs})
    nameservers = {"nameservers": [f"127.0.0.1:{serve.port}"]}
    with endpoint(pki, kubeconfig, coredns) as server:
        assert server.request("GET", "/federations").body["federations"] == []
        assert server.request("GET", "/federations/corp").status == 404
        for method, path, body in (("POST", "/federations/corp", nameservers), ("DELETE", "/federations/corp", None),
                                   ("POST", "/federations/myfederation", nameservers)):
            answer = server.request(method, path, body)
            assert answer.status == 409, (method, path, answer)
        done = subprocess.run([*server.args, "--remove-all"], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0 and "removed" not in done.stdout, done.stdout + done.stderr
    after = custom(kube)
    assert after["data"] == theirs
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
