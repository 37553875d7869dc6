"""The ``dnsendpoint`` provider against a real kube-apiserver holding ExternalDNS's own DNSEndpoint CRD.

tests/controller/test_external_dnsendpoint.py drives the provider against the fake API server, which
checks what the fake knows of the object. Here the CRD is the one ExternalDNS publishes
(``peers.crd("dnsendpoints.yaml")``), so its OpenAPI schema validates every create and replace (and
prunes a field it does not know: the objects must read back exactly as written); its ``status``
subresource makes ExternalDNS's status write a real 409 for the provider's next replace; and the
provider runs as ServiceAccount ``feddns-system/feddns-controller`` bound to nothing but
deploy/member/controller-access.yaml, so its Role (``dnsendpoints`` in ``feddns-myfederation``) is
all it may do.

Each test publishes for a federation of its own: the shared cluster's namespace may hold other
tests' objects, and a resync deletes owned objects of its federation that nobody wants.
"""

import asyncio
import ipaddress
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import dns.name
import kubernetes.client
import pytest
import yaml
from prometheus_client import CollectorRegistry

from controller import watch
from controller.config import ClusterConfig
from controller.external import ExternalConfig, ExternalPublisher, parse_external_config
from controller.external.dnsendpoint import DnsEndpointProvider
from controller.external.provider import ProviderError
from harness import peers
from harness.controller import ControllerProcess
from harness.etcd import EtcdServer
from harness.kubecluster import KubeCluster
from harness.objects import endpoint_slice, service
from harness.ports import async_wait_until, wait_until
from tests.controller.publishing import FAST, run, sample
from tests.controller.publishing import publishing as publishing_to
from tests.support.membercluster import TestObjects

REPO = Path(__file__).parents[2]
ACCESS = REPO / "deploy" / "member" / "controller-access.yaml"
NAMESPACE = "feddns-myfederation"
"""The namespace of deploy/member/'s Role: ``external.namespace`` of the shipped config."""
ZONE = "example.com."
COLLECTION = f"/apis/externaldns.k8s.io/v1alpha1/namespaces/{NAMESPACE}/dnsendpoints"
ip = ipaddress.ip_address


@pytest.fixture(scope="module")
def kube(kube_foo: KubeCluster) -> KubeCluster:
    """kube_foo with ExternalDNS's CRD and deploy/member/'s access objects."""
    kube_foo.install_crds(peers.crd("dnsendpoints.yaml"))
    kube_foo.load(ACCESS)
    return kube_foo


@pytest.fixture(scope="module")
def kubeconfig(kube: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The controller ServiceAccount's kubeconfig: inline CA data and its token."""
    token = kube.service_account_token("feddns-system", "feddns-controller")
    return kube.write_kubeconfig(tmp_path_factory.mktemp("dnsendpoint") / "foo.kubeconfig", token=token)


@pytest.fixture
def federation() -> str:
    return f"f{uuid.uuid4().hex[:10]}"


@pytest.fixture
def cleanup(kube: KubeCluster, federation: str) -> Iterator[None]:
    """Deletes what is left of the test's federation in the namespace (by the admin)."""
    yield
    for name in objects(kube, federation):
        kube.request("DELETE", f"{COLLECTION}/{name}")


def config(namespace: str = NAMESPACE) -> ExternalConfig:
    return parse_external_config({"provider": "dnsendpoint", "cluster": "foo", "namespace": namespace, "zone": ZONE})


def provider(kubeconfig: str, federation: str, namespace: str = NAMESPACE) -> DnsEndpointProvider:
    def connect() -> kubernetes.client.ApiClient:
        return watch.api_client(ClusterConfig("foo", kubeconfig=kubeconfig))
    return DnsEndpointProvider(config(namespace), federation, connect, timeout=FAST.timeout)


@asynccontextmanager
async def publishing(kubeconfig: str, federation: str) -> AsyncIterator[tuple[ExternalPublisher, CollectorRegistry]]:
    async with publishing_to(config(), federation, provider(kubeconfig, federation)) as running:
        yield running


def objects(kube: KubeCluster, federation: str) -> dict[str, dict[str, Any]]:
    """The DNSEndpoints of ``federation`` in the namespace, by name, as the admin lists them."""
    listed = kube.request("GET", f"{COLLECTION}?labelSelector=federation.feddns.io/federation={federation}")
    return {item["metadata"]["name"]: item for item in listed["items"]}


def endpoints(dns_name: str, ttl: int, a: Sequence[str] = (), aaaa: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``spec.endpoints`` as the provider writes them: A then AAAA, each only with targets."""
    return [{"dnsName": dns_name, "recordType": kind, "targets": list(targets), "recordTTL": ttl}
            for kind, targets in (("A", a), ("AAAA", aaaa)) if targets]


def test_created_replaced_and_deleted_objects_pass_validation_and_read_back_as_written(
        kube: KubeCluster, kubeconfig: str, federation: str, cleanup: None) -> None:
    web, web_name = f"web.myns.{federation}", f"web.myns.{federation}.svc.example.com"
    api = f"api.myns.{federation}"

    async def scenario() -> None:
        async with publishing(kubeconfig, federation) as (publisher, registry):
            await publisher.resync({("myns", "web"): [ip("198.51.100.2"), ip("198.51.100.1"), ip("2001:db8::1")],
                                    ("myns", "api"): [ip("198.51.100.9")]})
            await async_wait_until(lambda: sample(registry, "owned_names") == 2 and sample(registry, "pending_names")
                                   == 0, timeout=15.0, what="two objects created")
            found = objects(kube, federation)
            assert set(found) == {web, api}
            created = found[web]
            assert created["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "feddns-controller",
                                                     "federation.feddns.io/federation": federation}
            assert created["metadata"]["annotations"] == {"federation.feddns.io/service": "myns/web"}
            assert created["spec"] == {"endpoints": endpoints(web_name, 60, ["198.51.100.1", "198.51.100.2"],
                                                              ["2001:db8::1"])}
            assert created["metadata"]["generation"] == 1

            await publisher.publish({("myns", "web"): [ip("198.51.100.7")]}, unready={("myns", "web")})
            await async_wait_until(lambda: set(objects(kube, federation)) == {web}
                                   and sample(registry, "pending_names") == 0, timeout=15.0, what="api deleted")
            replaced = objects(kube, federation)[web]
            assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
            assert replaced["metadata"]["generation"] == 2
            assert replaced["metadata"]["labels"]["federation.feddns.io/stale"] == "true"
            assert replaced["spec"] == {"endpoints": endpoints(web_name, 60, ["198.51.100.7"])}

            await publisher.publish({})
            await async_wait_until(lambda: objects(kube, federation) == {}, timeout=15.0, what="web deleted")
            await async_wait_until(lambda: sample(registry, "pending_names") == 0, timeout=15.0, what="settled")
            assert sample(registry, "failures_total", reason="invalid") == 0
    run(scenario)


def test_one_dnsendpoint_per_service_with_its_addresses_ttl_and_ownership(
        kube: KubeCluster, kubeconfig: str, federation: str, cleanup: None) -> None:
    web_object, web_name = f"web.myns.{federation}", f"web.myns.{federation}.svc.example.com"

    async def scenario() -> None:
        async with publishing(kubeconfig, federation) as (publisher, registry):
            await publisher.resync({("myns", "web"): [ip("198.51.100.2"), ip("198.51.100.1"), ip("2001:db8::1")],
                                    ("myns", "api"): [ip("198.51.100.9")]})
            await async_wait_until(lambda: len(objects(kube, federation)) == 2, timeout=15.0, what="two objects")
            web = objects(kube, federation)[web_object]
            assert [e["dnsName"] for e in web["spec"]["endpoints"]] == [web_name, web_name]
            assert kinds(web) == {"A": (["198.51.100.1", "198.51.100.2"], 60), "AAAA": (["2001:db8::1"], 60)}
            assert kinds(objects(kube, federation)[f"api.myns.{federation}"]) == {"A": (["198.51.100.9"], 60)}
            await async_wait_until(lambda: sample(registry, "pending_names") == 0, timeout=15.0, what="nothing pending")
            assert sample(registry, "updates_total") == 2 and sample(registry, "owned_names") == 2
    run(scenario)


def test_no_ready_shard_keeps_the_addresses_labelled_unready_and_a_gone_service_is_deleted(
        kube: KubeCluster, kubeconfig: str, federation: str, cleanup: None) -> None:
    web, web_object = ("myns", "web"), f"web.myns.{federation}"

    async def scenario() -> None:
        async with publishing(kubeconfig, federation) as (publisher, registry):
            await publisher.resync({web: [ip("198.51.100.1")]})
            await async_wait_until(lambda: web_object in objects(kube, federation), timeout=15.0, what="created")
            await publisher.publish({web: [ip("198.51.100.1")]}, unready={web})
            await async_wait_until(lambda: objects(kube, federation)[web_object]["metadata"]["labels"].get(
                "federation.feddns.io/stale") == "true", timeout=15.0, what="labelled unready")
            assert kinds(objects(kube, federation)[web_object]) == {"A": (["198.51.100.1"], 60)}
            await async_wait_until(lambda: sample(registry, "stale_names") == 1, timeout=15.0, what="counted unready")
            await publisher.publish({web: [ip("198.51.100.1")]})
            await async_wait_until(lambda: "federation.feddns.io/stale" not in objects(kube, federation)[web_object][
                "metadata"]["labels"], timeout=15.0, what="ready again")
            await publisher.publish({})
            await async_wait_until(lambda: objects(kube, federation) == {}, timeout=15.0, what="deleted")
    run(scenario)


def test_an_object_deleted_by_hand_is_made_again(
        kube: KubeCluster, kubeconfig: str, federation: str, cleanup: None) -> None:
    web, web_object = ("myns", "web"), f"web.myns.{federation}"

    async def scenario() -> None:
        async with publishing(kubeconfig, federation) as (publisher, _):
            await publisher.resync({web: [ip("198.51.100.1")]})
            await async_wait_until(lambda: web_object in objects(kube, federation), timeout=15.0, what="created")
            kube.request("DELETE", f"{COLLECTION}/{web_object}")
            await publisher.publish({web: [ip("198.51.100.2")]})
            await async_wait_until(
                lambda: kinds(objects(kube, federation).get(web_object)).get("A", ([],))[0] == ["198.51.100.2"],
                timeout=15.0, what="made again")
    run(scenario)


def kinds(obj: dict[str, Any] | None) -> dict[str, tuple[list[str], int]]:
    """recordType -> (targets, recordTTL) of an object's endpoints (all for one name)."""
    if obj is None:
        return {}
    return {e["recordType"]: (e["targets"], e["recordTTL"]) for e in obj["spec"]["endpoints"]}


def externaldns_writes_status(kube: KubeCluster, name: str) -> dict[str, Any]:
    """What ExternalDNS's CRD source does after reading an object: PUT .../status with
    ``status.observedGeneration``, with the resourceVersion it read."""
    obj = kube.request("GET", f"{COLLECTION}/{name}")
    obj["status"] = {"observedGeneration": obj["metadata"]["generation"]}
    return dict(kube.request("PUT", f"{COLLECTION}/{name}/status", obj))


def test_externaldns_status_write_is_a_real_conflict_and_the_change_lands_on_the_new_version(
        kube: KubeCluster, kubeconfig: str, federation: str, cleanup: None) -> None:
    web = f"web.myns.{federation}"

    async def scenario() -> None:
        async with publishing(kubeconfig, federation) as (publisher, registry):
            await publisher.resync({("myns", "web"): [ip("198.51.100.1")]})
            await async_wait_until(lambda: web in objects(kube, federation), timeout=15.0, what="created")
            await async_wait_until(lambda: sample(registry, "pending_names") == 0, timeout=15.0, what="settled")
            written = await asyncio.to_thread(externaldns_writes_status, kube, web)
            assert written["metadata"]["generation"] == 1  # the status subresource leaves the spec's generation
            await publisher.publish({("myns", "web"): [ip("198.51.100.2")]})
            await async_wait_until(
                lambda: objects(kube, federation)[web]["spec"]["endpoints"][0]["targets"] == ["198.51.100.2"],
                timeout=15.0, what="changed")
            now = objects(kube, federation)[web]
            assert now["status"] == {"observedGeneration": 1}  # ExternalDNS's write is kept
            assert now["metadata"]["generation"] == 2
            await async_wait_until(lambda: sample(registry, "pending_names") == 0, timeout=15.0, what="settled")
            assert sample(registry, "failures_total", reason="prerequisite") == 0
            assert sample(registry, "updates_total") == 2
    run(scenario)


def test_the_role_grants_dnsendpoints_in_its_namespace_only(kube: KubeCluster, kubeconfig: str,
                                                            federation: str) -> None:
    suffix = dns.name.from_text(f"{federation}.svc.{ZONE}")

    async def scenario() -> None:
        assert await provider(kubeconfig, federation).read_names(suffix) == {}
        with pytest.raises(ProviderError) as refused:
            await provider(kubeconfig, federation, namespace="default").read_names(suffix)
        assert refused.value.reason == "forbidden", refused.value
    run(scenario)


def test_the_controller_publishes_a_load_balancer_through_its_role_on_a_read_only_root(
        etcd: EtcdServer, kube: KubeCluster, kubeconfig: str, federation: str, cleanup: None,
        tmp_path: Path) -> None:
    """The whole controller as deploy/ runs it: Services watched through the ClusterRole, DNSEndpoints
    written through the Role, with one kubeconfig and no writable /tmp. A load balancer's ingress IPs
    are published, kept and labelled stale while no shard is ready, and deleted with the Service; a
    LoadBalancer with spec.externalIPs and no ingress yet publishes nothing."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    web = f"web.{namespace}.{federation}"
    raw = {"federation": federation, "etcd": {"endpoints": [etcd.url], "prefix": f"/t{uuid.uuid4().hex[:12]}"},
           "leaseSeconds": 2, "clusters": [{"name": "foo", "kubeconfig": kubeconfig}],
           "external": {"provider": "dnsendpoint", "cluster": "foo", "namespace": NAMESPACE, "zone": ZONE}}
    (tmp_path / "controller.yaml").write_text(yaml.safe_dump(raw))
    label = {"federation.feddns.io/name": federation}
    made = TestObjects(kube)
    made.apply(service(namespace, "web", labels=label, type="LoadBalancer", cluster_ip="10.0.32.10",
                       load_balancer_ips=["104.32.64.10"]))
    made.apply(endpoint_slice(namespace, "web", ready=2))
    made.apply(service(namespace, "pending", labels=label, type="LoadBalancer", cluster_ip="10.0.32.11",
                       external_ips=["198.51.100.11"]))
    made.apply(endpoint_slice(namespace, "pending", ready=1))
    process = ControllerProcess(tmp_path / "controller.yaml", tmp_path / "controller.log", read_only=True).start()
    try:
        def published(check: Callable[[dict[str, Any]], bool], what: str) -> None:
            try:
                wait_until(lambda: check(objects(kube, federation)), timeout=20, interval=0.2, what=what)
            except TimeoutError as exc:
                raise TimeoutError(f"{exc}\n--- controller\n{process.log()[-4000:]}") from exc

        published(lambda found: web in found, "web's DNSEndpoint")
        spec = {"endpoints": endpoints(f"{web}.svc.example.com", 60, ["104.32.64.10"])}
        assert objects(kube, federation)[web]["spec"] == spec
        wait_until(lambda: process.metric("feddns_external_pending_names") == 0, what="settled")
        assert set(objects(kube, federation)) == {web}  # not pending: no ingress yet
        made.apply(endpoint_slice(namespace, "web", ready=0))  # every shard unready: Federated-DNS says NODATA
        published(lambda found: found[web]["metadata"]["labels"].get("federation.feddns.io/stale") == "true",
                  "kept, labelled stale")
        assert objects(kube, federation)[web]["spec"] == spec
        made.delete("Service", namespace, "web")
        published(lambda found: found == {}, "deleted with its Service")
    finally:
        made.close()
        assert process.terminate() == 0, process.log()[-3000:]
