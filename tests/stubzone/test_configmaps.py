"""coredns and kube-dns: the ConfigMap as the API server holds it after each request.

Most tests run against the session's real kube-apiserver (``kube_foo``), in a namespace of the test's
own (``--configmap NS/NAME``), deleted after it. The fake API server of tests/support/fakekube.py (in
``kube-system``) stays only for what a real one cannot show on demand: another writer's change at the
exact moment between the endpoint's GET and its PUT (``before_next_write``: the resourceVersion
conflict and the AlreadyExists), each write's method and the resourceVersion it carried
(``writes``), a connection cut just after a write was applied (``drop_after_next_write``), and a
write refused with a chosen status (``fail_next_write``).
"""

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.kubecluster import KubeCluster
from harness.stubzone import Pki, StubzoneProcess
from stubzone.backends.corefile import parse
from tests.stubzone.stores import changes_since, list_version
from tests.support.fakekube import FakeKube
from tests.support.membercluster import MemberCluster, TestObjects

BLOCK = """\
# Written by feddns stubzone for cluster foo; each POST /federations/myfederation rewrites it.
myfederation.svc.federation.:53 {
    errors
    rewrite edns0 local set 0xfedd foo
    forward . 203.0.113.53:53 [2001:db8::53]:5353
    cache 30
}
"""


@dataclass
class Cluster:
    """An API server (real or fake) and the namespace the test's ConfigMaps are in."""

    api: MemberCluster
    namespace: str

    def configmap(self, name: str) -> dict[str, Any]:
        obj = self.api.get("ConfigMap", self.namespace, name)
        assert obj is not None, f"ConfigMap {self.namespace}/{name} does not exist"
        return obj

    def put(self, name: str, data: dict[str, str], **metadata: Any) -> dict[str, Any]:
        """Create or replace ConfigMap ``name`` with ``data`` (as an operator would)."""
        return self.api.apply({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"namespace": self.namespace, "name": name, **metadata}, "data": data})

    def endpoint(self, pki: Pki, tmp_path: Path, backend: str) -> StubzoneProcess:
        kubeconfig = self.api.write_kubeconfig(str(tmp_path / "kubeconfig"))
        cluster = ["--cluster", "foo"] if backend == "coredns" else []
        name = "coredns-feddns" if backend == "coredns" else "kube-dns"
        return StubzoneProcess(pki, "--backend", backend, *cluster, "--kubeconfig", kubeconfig,
                               "--configmap", f"{self.namespace}/{name}")


@pytest.fixture
def real(kube_foo: KubeCluster) -> Iterator[Cluster]:
    """The session's real kube-apiserver, in a namespace of this test's own (deleted after it, with
    the ConfigMaps the endpoint made in it)."""
    objects = TestObjects(kube_foo)
    namespace = f"stubzone-{uuid.uuid4().hex[:8]}"
    for name in ("coredns-feddns", "kube-dns"):
        objects.own("ConfigMap", namespace, name)
    yield Cluster(objects, namespace)
    objects.close()


@pytest.fixture
def faulty(fake: FakeKube) -> Cluster:
    """The fake API server, for a fault a test names."""
    return Cluster(fake, "kube-system")


def writes(fake: FakeKube) -> list[str]:
    return [method for method, _, _ in fake.writes]


# -- coredns -----------------------------------------------------------------------------------


def test_coredns_creates_the_configmap_with_one_server_block(pki, real, kube_foo, tmp_path):
    since = list_version(kube_foo, real.namespace)  # the point to count writes from
    with real.endpoint(pki, tmp_path, "coredns") as server:
        answer = server.request("POST", "/federations/myfederation",
                                {"nameservers": ["203.0.113.53", "[2001:db8::53]:5353"]})
        assert answer.status == 200, answer
    obj = real.configmap("coredns-feddns")
    assert obj["data"] == {"myfederation.server": BLOCK}
    assert changes_since(kube_foo, real.namespace, "coredns-feddns", since) == ["ADDED"]  # created, not rewritten
    (block,) = parse(obj["data"]["myfederation.server"]).blocks
    assert block.keys == ("myfederation.svc.federation.:53",)


def test_coredns_replaces_with_the_resource_version_read(pki, faulty, fake, tmp_path):
    """Fake: the resourceVersion the PUT carried (``writes``)."""
    faulty.put("coredns-feddns", {}, annotations={"note": "kept"})
    version = faulty.configmap("coredns-feddns")["metadata"]["resourceVersion"]
    with faulty.endpoint(pki, tmp_path, "coredns") as server:
        assert server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]}).status == 200
    assert [(method, rv) for method, _, rv in fake.writes] == [("PUT", int(version))]
    obj = faulty.configmap("coredns-feddns")
    assert set(obj["data"]) == {"a.server"} and obj["metadata"]["annotations"] == {"note": "kept"}


def test_coredns_keeps_what_else_the_configmap_holds(pki, real, tmp_path):
    real.put("coredns-feddns", {"README": "made by hand"}, annotations={"note": "kept"})
    with real.endpoint(pki, tmp_path, "coredns") as server:
        assert server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]}).status == 200
    obj = real.configmap("coredns-feddns")
    assert set(obj["data"]) == {"README", "a.server"} and obj["metadata"]["annotations"] == {"note": "kept"}


def test_coredns_a_writer_between_get_and_put_keeps_its_change(pki, faulty, fake, tmp_path):
    """Fake: a write by someone else between the endpoint's GET and PUT (``before_next_write``)."""
    faulty.put("coredns-feddns", {"a.server": "old"})

    def someone_else() -> None:
        obj = faulty.configmap("coredns-feddns")
        obj["data"]["b.server"] = "their block"
        fake.apply(obj)

    fake.before_next_write(someone_else)
    with faulty.endpoint(pki, tmp_path, "coredns") as server:
        assert server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]}).status == 200
        server.wait_for_log(r"Conflict|modified; please apply")
    data = faulty.configmap("coredns-feddns")["data"]
    assert data["b.server"] == "their block"
    assert "forward . 192.0.2.1:53" in data["a.server"]
    assert writes(fake) == ["PUT", "PUT"]


def test_coredns_configmap_created_by_someone_else_meanwhile_is_merged_into(pki, faulty, fake, tmp_path):
    """Fake: a create by someone else between the endpoint's GET (404) and its POST (``before_next_write``)."""
    def someone_creates() -> None:
        faulty.put("coredns-feddns", {"README": "made by hand"})

    fake.before_next_write(someone_creates)
    with faulty.endpoint(pki, tmp_path, "coredns") as server:
        assert server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]}).status == 200
    assert set(faulty.configmap("coredns-feddns")["data"]) == {"README", "a.server"}
    assert writes(fake) == ["POST", "PUT"]


def test_coredns_connection_cut_after_the_write_says_it_may_have_applied(pki, faulty, fake, tmp_path):
    """Fake: the connection cut just after the write was applied (``drop_after_next_write``)."""
    with faulty.endpoint(pki, tmp_path, "coredns") as server:
        fake.drop_after_next_write()
        answer = server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]})
        assert answer.status == 503, answer
        assert answer.body["mayHaveApplied"] is True
        assert answer.body["error"].endswith("the POST may have been applied; it is idempotent, so retry it")
        assert "a.server" in faulty.configmap("coredns-feddns")["data"]
        retry = server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]})
        assert retry.status == 200
        server.wait_for_log(r"POST /federations/a .*status=200 .*\(unchanged\)")


@pytest.mark.parametrize(("status", "applied"), [(403, False), (422, False), (500, True)])
def test_coredns_write_refused_by_the_api_server(pki, faulty, fake, tmp_path, status, applied):
    """Fake: the write refused with a chosen status (``fail_next_write``)."""
    with faulty.endpoint(pki, tmp_path, "coredns") as server:
        fake.fail_next_write(status)
        answer = server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]})
        assert answer.status == 503, answer
        assert f"the API server answered {status} for ConfigMap kube-system/coredns-feddns" in answer.body["error"]
        assert answer.body["mayHaveApplied"] is applied
    assert fake.get("ConfigMap", "kube-system", "coredns-feddns") is None


def test_coredns_forwards_to_at_most_15(pki, real, tmp_path):
    with real.endpoint(pki, tmp_path, "coredns") as server:
        answer = server.request("POST", "/federations/a", {"nameservers": [f"192.0.2.{i}" for i in range(1, 17)]})
        assert answer.status == 400
        assert answer.body["error"] == "'nameservers' has 16 entries; the coredns backend forwards to at most 15"
    assert real.api.get("ConfigMap", real.namespace, "coredns-feddns") is None


def test_coredns_hand_edited_block_shows_what_it_forwards_to_and_is_replaced(pki, real, tmp_path):
    real.put("coredns-feddns", {"a.server": "a.svc.federation.:53 {\n    log\n    forward . 192.0.2.9\n}\n",
                                "b.server": "not a Corefile {"})
    with real.endpoint(pki, tmp_path, "coredns") as server:
        listed = server.request("GET", "/federations").body["federations"]
        assert [(z["federation"], z["nameservers"]) for z in listed] == [("a", ["192.0.2.9"]), ("b", [])]
        server.wait_for_log(r"key b\.server is not a block feddns stubzone writes: line 1: '\{' is never closed")
        assert server.request("POST", "/federations/b", {"nameservers": ["192.0.2.2"]}).status == 200
    assert "rewrite edns0 local set 0xfedd foo" in real.configmap("coredns-feddns")["data"]["b.server"]


# -- kube-dns ----------------------------------------------------------------------------------

ADMIN_LABELS = {"addonmanager.kubernetes.io/mode": "EnsureExists"}
KUBE_DNS = {"upstreamNameservers": '["8.8.8.8"]', "stubDomains": '{"acme.local": ["1.2.3.4"]}'}


def stub_domains(cluster: Cluster) -> dict:
    return json.loads(cluster.configmap("kube-dns")["data"]["stubDomains"])


def test_kubedns_merges_its_stub_domain_and_keeps_everything_else(pki, real, tmp_path):
    real.put("kube-dns", KUBE_DNS, labels=ADMIN_LABELS)
    with real.endpoint(pki, tmp_path, "kube-dns") as server:
        answer = server.request("POST", "/federations/myfederation",
                                {"nameservers": ["203.0.113.53", "203.0.113.54:5353", "2001:db8::53"]})
        assert answer.status == 200
    obj = real.configmap("kube-dns")
    assert stub_domains(real) == {"acme.local": ["1.2.3.4"], "myfederation.svc.federation": [
        "203.0.113.53", "203.0.113.54:5353", "2001:db8::53"]}
    assert obj["data"]["upstreamNameservers"] == '["8.8.8.8"]'
    assert obj["metadata"]["labels"] == ADMIN_LABELS


@pytest.mark.parametrize("nameserver", ["[2001:db8::53]:5353", "[2001:db8::53]:1"])
def test_kubedns_refuses_an_ipv6_nameserver_on_a_port_other_than_53(pki, real, tmp_path, nameserver):
    """kube-dns's nanny would hand dnsmasq ``--server=/D/[2001:db8::53]#5353``, which dnsmasq refuses at start."""
    real.put("kube-dns", KUBE_DNS, labels=ADMIN_LABELS)
    with real.endpoint(pki, tmp_path, "kube-dns") as server:
        answer = server.request("POST", "/federations/a", {"nameservers": ["203.0.113.53", nameserver]})
        assert answer.status == 400, answer
        assert answer.body["error"] == (
            f"{nameserver!r}: the kube-dns backend takes no port on an IPv6 nameserver (its cluster DNS cannot "
            "forward to one); give that address on port 53, or an IPv4 address")
        assert server.request("POST", "/federations/a", {"nameservers": ["[2001:db8::53]:53"]}).status == 200
    assert stub_domains(real) == {"acme.local": ["1.2.3.4"], "a.svc.federation": ["2001:db8::53"]}


def test_kubedns_delete_removes_only_its_domain_and_an_empty_map(pki, real, tmp_path):
    real.put("kube-dns", {"upstreamNameservers": '["8.8.8.8"]'}, labels=ADMIN_LABELS)
    with real.endpoint(pki, tmp_path, "kube-dns") as server:
        server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]})
        server.request("POST", "/federations/b", {"nameservers": ["192.0.2.2"]})
        assert server.request("DELETE", "/federations/a").body["nameservers"] == ["192.0.2.1"]
        assert stub_domains(real) == {"b.svc.federation": ["192.0.2.2"]}
        assert server.request("DELETE", "/federations/b").status == 200
    assert real.configmap("kube-dns")["data"] == {"upstreamNameservers": '["8.8.8.8"]'}


def test_kubedns_a_writer_between_get_and_put_keeps_its_stub_domain(pki, faulty, fake, tmp_path):
    """Fake: a write by someone else between the endpoint's GET and PUT (``before_next_write``)."""
    faulty.put("kube-dns", KUBE_DNS, labels=ADMIN_LABELS)

    def someone_else() -> None:
        obj = faulty.configmap("kube-dns")
        obj["data"]["stubDomains"] = json.dumps({**stub_domains(faulty), "corp.local": ["10.1.1.1"]})
        fake.apply(obj)

    fake.before_next_write(someone_else)
    with faulty.endpoint(pki, tmp_path, "kube-dns") as server:
        assert server.request("POST", "/federations/f", {"nameservers": ["192.0.2.1"]}).status == 200
    assert stub_domains(faulty) == {"acme.local": ["1.2.3.4"], "corp.local": ["10.1.1.1"],
                                    "f.svc.federation": ["192.0.2.1"]}


def test_kubedns_other_spellings_of_its_domain_are_replaced(pki, real, tmp_path):
    real.put("kube-dns", {"stubDomains": '{"F.svc.Federation.": ["192.0.2.8"], "x.f.svc.federation": []}'},
             labels=ADMIN_LABELS)
    with real.endpoint(pki, tmp_path, "kube-dns") as server:
        assert server.request("GET", "/federations/f").body["nameservers"] == ["192.0.2.8"]
        assert server.request("POST", "/federations/f", {"nameservers": ["192.0.2.1"]}).status == 200
    assert stub_domains(real) == {"x.f.svc.federation": [], "f.svc.federation": ["192.0.2.1"]}


@pytest.mark.parametrize("broken", ['{"acme.local": ', '["1.2.3.4"]', '{"acme.local": "1.2.3.4"}'])
def test_kubedns_broken_stub_domains_are_never_merged_into(pki, real, tmp_path, broken):
    version = real.put("kube-dns", {"stubDomains": broken}, labels=ADMIN_LABELS)["metadata"]["resourceVersion"]
    with real.endpoint(pki, tmp_path, "kube-dns") as server:
        answer = server.request("POST", "/federations/f", {"nameservers": ["192.0.2.1"]})
        assert answer.status == 503
        assert f"ConfigMap {real.namespace}/kube-dns: stubDomains is not " in answer.body["error"]
        assert "fix it by hand; nothing was changed" in answer.body["error"]
    obj = real.configmap("kube-dns")
    assert obj["data"] == {"stubDomains": broken}
    assert obj["metadata"]["resourceVersion"] == version  # never written
