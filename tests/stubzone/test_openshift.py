"""``feddns stubzone --backend openshift`` against OpenShift's DNS API, end to end.

A real kube-apiserver serves the DNS operator's CRD as openshift/api publishes it
(tests/fixtures/platforms/dnses.operator.openshift.io.crd.yaml) and holds ``DNS/default`` as the operator
creates it (its name only) plus a customer's forwarding entry. The endpoint reaches it as a ServiceAccount
bound to a ClusterRole with ``get`` and ``update`` of ``dnses.operator.openshift.io`` ``default`` only
(docs/stubzone.md). harness/platformdns.py plays the operator: it renders the Corefile from the real
``DNS/default`` as the operator's template does and runs a real CoreDNS on it. The operator's ``forward``
adds no tag, so Federated-DNS finds cluster foo by the query's source address: CoreDNS asks from
127.0.0.1, which foo's ``cidrs`` hold.
"""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from harness.kubecluster import ApiError, KubeCluster
from harness.platformdns import DNS_PATH, OpenShiftOperator
from harness.serve import ServeProcess, write_records
from harness.stubzone import Pki, StubzoneProcess
from stubzone.backends.openshift import MAX_NAMESERVERS
from tests.stubzone.platforms import FIXTURES, FOO_FIRST, QNAME, delete_all, fixture, kubeconfig_with_rules, records

CRD = FIXTURES / "dnses.operator.openshift.io.crd.yaml"
RULES = [{"apiGroups": ["operator.openshift.io"], "resources": ["dnses"], "resourceNames": ["default"],
          "verbs": ["get", "update"]}]
"""The endpoint's ClusterRole as docs/stubzone.md ("openshift") gives it."""
CORP = {"name": "corp", "zones": ["corp.example"], "forwardPlugin": {"upstreams": ["192.0.2.53"], "policy": "Random"}}
LAB = {"name": "lab", "zones": ["lab.example"], "forwardPlugin": {"upstreams": ["192.0.2.54:5353"],
                                                                  "policy": "Sequential"}}


@pytest.fixture(scope="module")
def kube(kube_foo: KubeCluster) -> KubeCluster:
    kube_foo.install_crds(CRD)
    return kube_foo


@pytest.fixture(scope="module")
def serve() -> Iterator[ServeProcess]:
    """Federated-DNS; cluster foo's DNS queries come from loopback (its ``cidrs``)."""
    with ServeProcess(records=write_records(records(["127.0.0.0/8"]))) as server:
        yield server


@pytest.fixture(scope="module")
def kubeconfig(kube: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path, made = kubeconfig_with_rules(kube, tmp_path_factory.mktemp("openshift"), None, RULES)
    yield path
    delete_all(kube, made)


@pytest.fixture
def default_dns(kube: KubeCluster) -> Iterator[dict[str, Any]]:
    """``DNS/default`` as the operator creates it (ensureDefaultDNS: its name and an empty spec, which the
    API server fills with the CRD's defaults), then a customer's entry."""
    kube.request("POST", "/apis/operator.openshift.io/v1/dnses",
                 {"apiVersion": "operator.openshift.io/v1", "kind": "DNS", "metadata": {"name": "default"},
                  "spec": {}})
    yield put_servers(kube, [CORP])
    remove_default(kube)


def remove_default(kube: KubeCluster) -> None:
    try:
        kube.request("DELETE", DNS_PATH)
    except ApiError as exc:
        if exc.status != 404:
            raise


def put_servers(kube: KubeCluster, servers: list[dict[str, Any]]) -> dict[str, Any]:
    """A customer's edit of ``spec.servers`` (``oc edit dns.operator/default``); returns the object stored."""
    obj = kube.request("GET", DNS_PATH)
    obj.setdefault("spec", {})["servers"] = servers
    stored: dict[str, Any] = kube.request("PUT", DNS_PATH, obj)
    return stored


def servers(kube: KubeCluster) -> list[dict[str, Any]]:
    return list(kube.request("GET", DNS_PATH).get("spec", {}).get("servers") or [])


@pytest.fixture
def operator(kube: KubeCluster) -> Iterator[OpenShiftOperator]:
    running = OpenShiftOperator(kube)
    yield running
    running.close()


@pytest.fixture
def endpoint(pki: Pki, kubeconfig: str) -> Iterator[StubzoneProcess]:
    with StubzoneProcess(pki, "--backend", "openshift", "--kubeconfig", kubeconfig,
                         "--allow-loopback-nameservers") as server:  # Federated-DNS is on 127.0.0.1
        yield server


def test_post_adds_its_entry_the_operator_forwards_and_serve_orders_by_cidrs(
        kube: KubeCluster, default_dns: dict[str, Any], endpoint: StubzoneProcess, operator: OpenShiftOperator,
        serve: ServeProcess) -> None:
    nameservers = [f"127.0.0.1:{serve.port}"]
    answer = endpoint.request("POST", "/federations/myfederation", {"nameservers": nameservers})
    assert answer.status == 200, answer
    entry = {"name": "feddns-myfederation", "zones": ["myfederation.svc.federation"],
             "forwardPlugin": {"upstreams": nameservers, "policy": "Random"}}
    assert servers(kube) == [CORP, entry]
    listed = endpoint.request("GET", "/federations").body["federations"]
    assert [(zone["federation"], zone["nameservers"]) for zone in listed] == [("myfederation", nameservers)]

    operator.start()
    operator.wait_for(QNAME, FOO_FIRST)

    version = kube.request("GET", DNS_PATH)["metadata"]["resourceVersion"]
    assert endpoint.request("POST", "/federations/myfederation", {"nameservers": nameservers}).status == 200
    assert kube.request("GET", DNS_PATH)["metadata"]["resourceVersion"] == version  # the same POST: no write


def test_customer_entries_keep_their_place_and_bytes(kube: KubeCluster, default_dns: dict[str, Any],
                                                     endpoint: StubzoneProcess) -> None:
    assert endpoint.request("POST", "/federations/a", {"nameservers": ["192.0.2.1"]}).status == 200
    put_servers(kube, [*servers(kube), LAB])  # the customer adds an entry after ours
    answer = endpoint.request("POST", "/federations/a", {"nameservers": ["192.0.2.1", "[2001:db8::1]:5353"]})
    assert answer.status == 200, answer
    assert [server["name"] for server in servers(kube)] == ["corp", "feddns-a", "lab"]
    assert servers(kube)[1]["forwardPlugin"]["upstreams"] == ["192.0.2.1:53", "[2001:db8::1]:5353"]
    assert endpoint.request("GET", "/federations/a").body["nameservers"] == ["192.0.2.1", "[2001:db8::1]:5353"]
    deleted = endpoint.request("DELETE", "/federations/a")
    assert deleted.status == 200 and deleted.body["nameservers"] == ["192.0.2.1", "[2001:db8::1]:5353"]
    assert servers(kube) == [CORP, LAB]
    assert endpoint.request("DELETE", "/federations/a").status == 404
    assert endpoint.request("GET", "/federations/corp").status == 404  # a customer's entry is no federation


def test_a_customer_entry_for_the_stub_domain_is_left_alone(kube: KubeCluster, default_dns: dict[str, Any],
                                                            endpoint: StubzoneProcess) -> None:
    theirs = {"name": "hand-made", "zones": ["myfederation.svc.federation"],
              "forwardPlugin": {"upstreams": ["192.0.2.9"], "policy": "Random"}}
    put_servers(kube, [CORP, theirs])
    answer = endpoint.request("POST", "/federations/myfederation", {"nameservers": ["192.0.2.1"]})
    assert answer.status == 409, answer
    assert "'hand-made'" in answer.body["error"]
    assert servers(kube) == [CORP, theirs]


def test_a_customer_entry_named_like_ours_is_not_a_federation(kube: KubeCluster, default_dns: dict[str, Any],
                                                              endpoint: StubzoneProcess) -> None:
    """Ownership is by content: ``feddns-corp`` forwarding corp.example is a customer's entry with our prefix,
    not federation corp's stub domain; it is never listed, changed or deleted (409)."""
    theirs = {"name": "feddns-corp", "zones": ["corp.example"],
              "forwardPlugin": {"upstreams": ["192.0.2.9"], "policy": "Random"}}
    put_servers(kube, [CORP, theirs])
    assert endpoint.request("GET", "/federations").body["federations"] == []
    assert endpoint.request("GET", "/federations/corp").status == 404
    for method, body in (("POST", {"nameservers": ["192.0.2.1"]}), ("DELETE", None)):
        answer = endpoint.request(method, "/federations/corp", body)
        assert answer.status == 409, (method, answer)
    assert servers(kube) == [CORP, theirs]


def test_it_forwards_to_as_many_upstreams_as_the_crd_allows(kube: KubeCluster, default_dns: dict[str, Any],
                                                            endpoint: StubzoneProcess) -> None:
    (crd,) = fixture(CRD.name)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    upstreams = schema["servers"]["items"]["properties"]["forwardPlugin"]["properties"]["upstreams"]
    assert MAX_NAMESERVERS == upstreams["maxItems"] == 15
    many = [f"192.0.2.{i}" for i in range(1, 17)]
    refused = endpoint.request("POST", "/federations/f", {"nameservers": many})
    assert refused.status == 400 and "at most 15" in refused.body["error"], refused
    assert endpoint.request("POST", "/federations/f", {"nameservers": many[:15]}).status == 200
    assert len(servers(kube)[1]["forwardPlugin"]["upstreams"]) == 15  # the API server took them


def test_without_dns_default_nothing_is_created(kube: KubeCluster, endpoint: StubzoneProcess) -> None:
    remove_default(kube)
    answer = endpoint.request("POST", "/federations/myfederation", {"nameservers": ["192.0.2.1"]})
    assert answer.status == 503, answer
    assert "DNS default (dnses.operator.openshift.io) does not exist" in answer.body["error"]
    assert endpoint.request("GET", "/federations").body["federations"] == []
    with pytest.raises(ApiError) as missing:
        kube.request("GET", DNS_PATH)
    assert missing.value.status == 404


def test_two_replicas_writing_at_once_lose_nothing(pki: Pki, kube: KubeCluster, default_dns: dict[str, Any],
                                                   kubeconfig: str, endpoint: StubzoneProcess) -> None:
    """Each write replaces the whole object with the resourceVersion it read: the API server answers the
    slower replica 409, which reads again and writes on top, so every replica's entry is kept."""
    federations = [f"f{i}" for i in range(8)]
    with StubzoneProcess(pki, "--backend", "openshift", "--kubeconfig", kubeconfig) as other, \
            ThreadPoolExecutor(len(federations)) as pool:
        answers = list(pool.map(lambda i: (endpoint, other)[i % 2].request(
            "POST", f"/federations/{federations[i]}", {"nameservers": [f"192.0.2.{i + 1}"]}), range(len(federations))))
        conflicts = sum("reading it again" in line for server in (endpoint, other) for line in server.lines)
    assert [answer.status for answer in answers] == [200] * len(federations), answers
    assert servers(kube)[0] == CORP
    assert sorted(server["name"] for server in servers(kube)[1:]) == [f"feddns-{f}" for f in federations]
    assert conflicts > 0, "no write was answered 409: the replicas did not overlap"
