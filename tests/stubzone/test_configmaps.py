"""coredns and kube-dns: the ConfigMap as the fake API server holds it after each request.

The fake speaks the real protocol (tests/support/fakekube.py): resourceVersion
conflicts, AlreadyExists, refusals, and a connection cut after a write.
"""

import json
from pathlib import Path

import pytest

from harness.stubzone import StubzoneProcess
from stubzone.backends.corefile import parse
from tests.support.fakekube import FakeKube

BLOCK = """\
# Written by feddns stubzone for cluster foo; each POST /federations/myfederation rewrites it.
myfederation.svc.federation.:53 {
    errors
    rewrite edns0 local set 0xfedd foo
    forward . 203.0.113.53:53 [2001:db8::53]:5353
    cache 30
}
"""


def configmap(fake: FakeKube, name: str) -> dict:
    obj = fake.get("ConfigMap", "kube-system", name)
    assert obj is not None, f"ConfigMap kube-system/{name} does not exist"
    return obj


def endpoint(pki, fake: FakeKube, tmp_path: Path, backend: str, *extra: str) -> StubzoneProcess:
    kubeconfig = fake.write_kubeconfig(str(tmp_path / "kubeconfig"))
    cluster = ["--cluster", "foo"] if backend == "coredns" else []
    return StubzoneProcess(pki, "--backend", backend, *cluster, "--kubeconfig", kubeconfig, *extra)


def writes(fake: FakeKube) -> list[str]:
    return [method for method, _, _ in fake.writes]


# -- coredns -----------------------------------------------------------------------------------


def test_coredns_creates_the_configmap_with_one_server_block(pki, fake, tmp_path):
    with endpoint(pki, fake, tmp_path, "coredns") as server:
        answer = server.request("POST", "/federations/myfederation",
                                {"nameservers": ["203.0.113.53", "[2001:db8::53]:5353"]})
        assert answer.status == 200, answer
    obj = configmap(fake, "coredns-feddns")
    assert obj["data"] == {"myfederation.server": BLOCK}
    assert writes(fake) == ["POST"]
    (block,) = parse(obj["data"]["myfederation.server"]).blocks
    assert block.keys == ("myfederation.svc.federation.:53",)


def test_coredns_replaces_with_the_resource_version_read(pki, fake, tmp_path):
    fake.apply({"kind": "ConfigMap", "metadata": {"namespace": "kube-system", "name": "coredns-feddns",
                                                  "annotations": {"note": "kept"}}, "data": {}})
    version = configmap(fake, "coredns-feddns")["metadata"]["resourceVersion"]
    with endpoint(pki, fake, tmp_path, "coredns") as server:
        assert server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]}).status == 200
    assert [(method, rv) for method, _, rv in fake.writes] == [("PUT", int(version))]
    obj = configmap(fake, "coredns-feddns")
    assert set(obj["data"]) == {"a.server"} and obj["metadata"]["annotations"] == {"note": "kept"}


def test_coredns_a_writer_between_get_and_put_keeps_its_change(pki, fake, tmp_path):
    fake.apply({"kind": "ConfigMap", "metadata": {"namespace": "kube-system", "name": "coredns-feddns"},
                "data": {"a.server": "old"}})

    def someone_else() -> None:
        obj = configmap(fake, "coredns-feddns")
        obj["data"]["b.server"] = "their block"
        fake.apply(obj)

    fake.before_next_write(someone_else)
    with endpoint(pki, fake, tmp_path, "coredns") as server:
        assert server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]}).status == 200
        server.wait_for_log(r"Conflict|modified; please apply")
    data = configmap(fake, "coredns-feddns")["data"]
    assert data["b.server"] == "their block"
    assert "forward . 192.0.2.1:53" in data["a.server"]
    assert writes(fake) == ["PUT", "PUT"]


def test_coredns_configmap_created_by_someone_else_meanwhile_is_merged_into(pki, fake, tmp_path):
    def someone_creates() -> None:
        fake.apply({"kind": "ConfigMap", "metadata": {"namespace": "kube-system", "name": "coredns-feddns"},
                    "data": {"README": "made by hand"}})

    fake.before_next_write(someone_creates)
    with endpoint(pki, fake, tmp_path, "coredns") as server:
        assert server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]}).status == 200
    assert set(configmap(fake, "coredns-feddns")["data"]) == {"README", "a.server"}
    assert writes(fake) == ["POST", "PUT"]


def test_coredns_connection_cut_after_the_write_says_it_may_have_applied(pki, fake, tmp_path):
    with endpoint(pki, fake, tmp_path, "coredns") as server:
        fake.drop_after_next_write()
        answer = server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]})
        assert answer.status == 503, answer
        assert answer.body["mayHaveApplied"] is True
        assert answer.body["error"].endswith("the POST may have been applied; it is idempotent, so retry it")
        assert "a.server" in configmap(fake, "coredns-feddns")["data"]
        retry = server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]})
        assert retry.status == 200
        server.wait_for_log(r"POST /federations/a .*status=200 .*\(unchanged\)")


@pytest.mark.parametrize(("status", "applied"), [(403, False), (422, False), (500, True)])
def test_coredns_write_refused_by_the_api_server(pki, fake, tmp_path, status, applied):
    with endpoint(pki, fake, tmp_path, "coredns") as server:
        fake.fail_next_write(status)
        answer = server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]})
        assert answer.status == 503, answer
        assert f"the API server answered {status} for ConfigMap kube-system/coredns-feddns" in answer.body["error"]
        assert answer.body["mayHaveApplied"] is applied
    assert fake.get("ConfigMap", "kube-system", "coredns-feddns") is None


def test_coredns_forwards_to_at_most_15(pki, fake, tmp_path):
    with endpoint(pki, fake, tmp_path, "coredns") as server:
        answer = server.request("POST", "/federations/a", {"nameservers": [f"192.0.2.{i}" for i in range(1, 17)]})
        assert answer.status == 400
        assert answer.body["error"] == "'nameservers' has 16 entries; the coredns backend forwards to at most 15"
    assert fake.writes == []


def test_coredns_hand_edited_block_shows_what_it_forwards_to_and_is_replaced(pki, fake, tmp_path):
    fake.apply({"kind": "ConfigMap", "metadata": {"namespace": "kube-system", "name": "coredns-feddns"},
                "data": {"a.server": "a.svc.federation.:53 {\n    log\n    forward . 192.0.2.9\n}\n",
                         "b.server": "not a Corefile {"}})
    with endpoint(pki, fake, tmp_path, "coredns") as server:
        listed = server.request("GET", "/federations").body["federations"]
        assert [(z["federation"], z["nameservers"]) for z in listed] == [("a", ["192.0.2.9"]), ("b", [])]
        server.wait_for_log(r"key b\.server is not a block feddns stubzone writes: line 1: '\{' is never closed")
        assert server.request("POST", "/federations/b", {"nameservers": ["192.0.2.2"]}).status == 200
    assert "rewrite edns0 local set 0xfedd foo" in configmap(fake, "coredns-feddns")["data"]["b.server"]


# -- kube-dns ----------------------------------------------------------------------------------

KUBE_DNS = {"kind": "ConfigMap", "metadata": {"namespace": "kube-system", "name": "kube-dns",
                                              "labels": {"addonmanager.kubernetes.io/mode": "EnsureExists"}},
            "data": {"upstreamNameservers": '["8.8.8.8"]', "stubDomains": '{"acme.local": ["1.2.3.4"]}'}}


def stub_domains(fake: FakeKube) -> dict:
    return json.loads(configmap(fake, "kube-dns")["data"]["stubDomains"])


def test_kubedns_merges_its_stub_domain_and_keeps_everything_else(pki, fake, tmp_path):
    fake.apply(KUBE_DNS)
    with endpoint(pki, fake, tmp_path, "kube-dns") as server:
        answer = server.request("POST", "/federations/myfederation",
                                {"nameservers": ["203.0.113.53", "203.0.113.54:5353", "2001:db8::53"]})
        assert answer.status == 200
    obj = configmap(fake, "kube-dns")
    assert stub_domains(fake) == {"acme.local": ["1.2.3.4"], "myfederation.svc.federation": [
        "203.0.113.53", "203.0.113.54:5353", "2001:db8::53"]}
    assert obj["data"]["upstreamNameservers"] == '["8.8.8.8"]'
    assert obj["metadata"]["labels"] == KUBE_DNS["metadata"]["labels"]


@pytest.mark.parametrize("nameserver", ["[2001:db8::53]:5353", "[2001:db8::53]:1"])
def test_kubedns_refuses_an_ipv6_nameserver_on_a_port_other_than_53(pki, fake, tmp_path, nameserver):
    """kube-dns's nanny would hand dnsmasq ``--server=/D/[2001:db8::53]#5353``, which dnsmasq refuses at start."""
    fake.apply(KUBE_DNS)
    with endpoint(pki, fake, tmp_path, "kube-dns") as server:
        answer = server.request("POST", "/federations/a", {"nameservers": ["203.0.113.53", nameserver]})
        assert answer.status == 400, answer
        assert answer.body["error"] == (
            f"{nameserver!r}: the kube-dns backend takes no port on an IPv6 nameserver (its cluster DNS cannot "
            "forward to one); give that address on port 53, or an IPv4 address")
        assert server.request("POST", "/federations/a", {"nameservers": ["[2001:db8::53]:53"]}).status == 200
    assert stub_domains(fake) == {"acme.local": ["1.2.3.4"], "a.svc.federation": ["2001:db8::53"]}


def test_kubedns_delete_removes_only_its_domain_and_an_empty_map(pki, fake, tmp_path):
    fake.apply({**KUBE_DNS, "data": {"upstreamNameservers": '["8.8.8.8"]'}})
    with endpoint(pki, fake, tmp_path, "kube-dns") as server:
        server.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]})
        server.request("POST", "/federations/b", {"nameservers": ["192.0.2.2"]})
        assert server.request("DELETE", "/federations/a").body["nameservers"] == ["192.0.2.1"]
        assert stub_domains(fake) == {"b.svc.federation": ["192.0.2.2"]}
        assert server.request("DELETE", "/federations/b").status == 200
    assert configmap(fake, "kube-dns")["data"] == {"upstreamNameservers": '["8.8.8.8"]'}


def test_kubedns_a_writer_between_get_and_put_keeps_its_stub_domain(pki, fake, tmp_path):
    fake.apply(KUBE_DNS)

    def someone_else() -> None:
        obj = configmap(fake, "kube-dns")
        obj["data"]["stubDomains"] = json.dumps({**stub_domains(fake), "corp.local": ["10.1.1.1"]})
        fake.apply(obj)

    fake.before_next_write(someone_else)
    with endpoint(pki, fake, tmp_path, "kube-dns") as server:
        assert server.request("POST", "/federations/f", {"nameservers": ["192.0.2.1"]}).status == 200
    assert stub_domains(fake) == {"acme.local": ["1.2.3.4"], "corp.local": ["10.1.1.1"],
                                  "f.svc.federation": ["192.0.2.1"]}


def test_kubedns_other_spellings_of_its_domain_are_replaced(pki, fake, tmp_path):
    fake.apply({**KUBE_DNS, "data": {"stubDomains": '{"F.svc.Federation.": ["192.0.2.8"], "x.f.svc.federation": []}'}})
    with endpoint(pki, fake, tmp_path, "kube-dns") as server:
        assert server.request("GET", "/federations/f").body["nameservers"] == ["192.0.2.8"]
        assert server.request("POST", "/federations/f", {"nameservers": ["192.0.2.1"]}).status == 200
    assert stub_domains(fake) == {"x.f.svc.federation": [], "f.svc.federation": ["192.0.2.1"]}


@pytest.mark.parametrize("broken", ['{"acme.local": ', '["1.2.3.4"]', '{"acme.local": "1.2.3.4"}'])
def test_kubedns_broken_stub_domains_are_never_merged_into(pki, fake, tmp_path, broken):
    fake.apply({**KUBE_DNS, "data": {"stubDomains": broken}})
    with endpoint(pki, fake, tmp_path, "kube-dns") as server:
        answer = server.request("POST", "/federations/f", {"nameservers": ["192.0.2.1"]})
        assert answer.status == 503
        assert "ConfigMap kube-system/kube-dns: stubDomains is not " in answer.body["error"]
        assert "fix it by hand; nothing was changed" in answer.body["error"]
    assert configmap(fake, "kube-dns")["data"] == {"stubDomains": broken}
    assert fake.writes == []
