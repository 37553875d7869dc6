"""The ``dnsendpoint`` provider against the fake API server: ExternalDNS's DNSEndpoint
objects (``externaldns.k8s.io/v1alpha1``), one per federated service, written only when
ours, every write conditional on the ``resourceVersion`` last read (docs/external-dns.md).

The fake is used where a real kube-apiserver cannot show the case on demand: the log of every
write it took (``FakeKube.writes``: one replace per change, nothing rewritten, nothing written
without the lease or to others' objects), a cluster without the CRD that gets it later, and an
API server that stops answering. What a real one shows (objects created, replaced, labelled
unready, deleted, made again, conflicts with ExternalDNS's status writes, the Role, the whole
controller) is in tests/controller/test_real_dnsendpoint.py."""

import asyncio
import contextlib
import ipaddress
import json
import logging
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from prometheus_client import CollectorRegistry

from controller import watch
from controller.config import ClusterConfig
from controller.external import ExternalConfig, ExternalPublisher, parse_external_config
from controller.external.dnsendpoint import DnsEndpointProvider
from harness.ports import async_wait_until
from tests.controller.harness import config_raw, unreachable_entry
from tests.controller.publishing import FAST, run, sample
from tests.controller.publishing import publishing as publishing_to
from tests.support.fakekube import FakeKube

FEDERATION = "myfederation"
NAMESPACE = "feddns"
WEB = ("myns", "web")
API = ("myns", "api")
WEB_OBJECT = f"web.myns.{FEDERATION}"
COLLECTION = f"/apis/externaldns.k8s.io/v1alpha1/namespaces/{NAMESPACE}/dnsendpoints"
ip = ipaddress.ip_address


@pytest.fixture
def cluster(fake: FakeKube) -> FakeKube:
    """The member cluster "t" that keeps the objects (conftest's empty fake cluster)."""
    return fake


def config(cluster: str = "t") -> ExternalConfig:
    return parse_external_config({"provider": "dnsendpoint", "cluster": cluster, "namespace": NAMESPACE,
                                  "zone": "example.com."})


def connect_to(fake: FakeKube, directory: Path) -> Callable[[], kubernetes.client.ApiClient]:
    kubeconfig = fake.write_kubeconfig(str(directory / f"{fake.name}.kubeconfig"))
    return lambda: watch.api_client(ClusterConfig(fake.name, kubeconfig=kubeconfig))


@contextlib.asynccontextmanager
async def publishing(fake: FakeKube, directory: Path, may_write: Callable[[], bool] = lambda: True,
                     ) -> AsyncIterator[tuple[ExternalPublisher, CollectorRegistry]]:
    """A publisher writing DNSEndpoints in ``fake``; ``may_write`` is the lease check."""
    provider = DnsEndpointProvider(config(fake.name), FEDERATION, connect_to(fake, directory), timeout=FAST.timeout)
    async with publishing_to(config(fake.name), FEDERATION, provider, may_write) as running:
        yield running


def objects(fake: FakeKube) -> dict[str, dict[str, Any]]:
    """The DNSEndpoints of the namespace, by name, as a client lists them."""
    with urllib.request.urlopen(fake.url + COLLECTION, timeout=5) as reply:
        return {item["metadata"]["name"]: item for item in json.load(reply)["items"]}


def endpoints(obj: dict[str, Any] | None) -> dict[str, tuple[list[str], int]]:
    """recordType -> (targets, recordTTL) of an object's endpoints (all for one name)."""
    if obj is None:
        return {}
    return {e["recordType"]: (e["targets"], e["recordTTL"]) for e in obj["spec"]["endpoints"]}


def writes_to(fake: FakeKube, name: str) -> list[str]:
    return [method for method, written, _ in fake.writes if written == name]


def dnsendpoint(name: str, dns_name: str, targets: list[str], labels: dict[str, str] | None = None,
                annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A DNSEndpoint as someone (not feddns) would apply it."""
    return {"apiVersion": "externaldns.k8s.io/v1alpha1", "kind": "DNSEndpoint",
            "metadata": {"namespace": NAMESPACE, "name": name, "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": {"endpoints": [{"dnsName": dns_name, "recordType": "A", "targets": targets, "recordTTL": 300}]}}


def externaldns_writes_status(fake: FakeKube, name: str) -> None:
    """What ExternalDNS's CRD source does after reading an object: PUT .../status with
    ``status.observedGeneration`` (it needs the resourceVersion it read)."""
    with urllib.request.urlopen(f"{fake.url}{COLLECTION}/{name}", timeout=5) as reply:
        obj = json.load(reply)
    obj["status"] = {"observedGeneration": obj["metadata"]["generation"]}
    request = urllib.request.Request(f"{fake.url}{COLLECTION}/{name}/status", data=json.dumps(obj).encode(),
                                     method="PUT", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5):
        pass


def test_a_change_is_one_replace_and_no_change_writes_nothing(cluster: FakeKube, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with publishing(cluster, tmp_path) as (publisher, registry):
            await publisher.resync({WEB: [ip("198.51.100.1")]})
            await async_wait_until(lambda: WEB_OBJECT in objects(cluster), timeout=15.0, what="created")
            await publisher.publish({WEB: [ip("198.51.100.7"), ip("2001:db8::7")]})
            await async_wait_until(lambda: endpoints(objects(cluster).get(WEB_OBJECT)).get("AAAA"),
                                   timeout=15.0, what="changed")
            assert writes_to(cluster, WEB_OBJECT) == ["POST", "PUT"]
            assert objects(cluster)[WEB_OBJECT]["metadata"]["generation"] == 2
            # The same state (in another order) writes nothing; a change elsewhere proves the pass ran.
            await publisher.publish({WEB: [ip("2001:db8::7"), ip("198.51.100.7")], API: [ip("198.51.100.9")]})
            await async_wait_until(lambda: f"api.myns.{FEDERATION}" in objects(cluster),
                                   timeout=15.0, what="api created")
            # the counter moves when the answer arrives, after the fake shows the object: wait for the pass to end
            await async_wait_until(lambda: sample(registry, "pending_names") == 0, timeout=15.0, what="nothing pending")
            assert writes_to(cluster, WEB_OBJECT) == ["POST", "PUT"]
            assert sample(registry, "updates_total") == 3
    run(scenario)


def test_without_the_lease_nothing_is_written_and_with_it_again_the_change_goes_out(
        cluster: FakeKube, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every DNSEndpoint write is guarded by the leader's lease, as RFC 2136 updates are
    (tests/controller/test_faults.py pauses a real leader past its lease for those)."""
    lease = {"held": True}

    async def scenario() -> None:
        async with publishing(cluster, tmp_path, may_write=lambda: lease["held"]) as (publisher, registry):
            await publisher.resync({WEB: [ip("198.51.100.1")]})
            await async_wait_until(lambda: WEB_OBJECT in objects(cluster), timeout=15.0, what="created")
            await async_wait_until(lambda: sample(registry, "pending_names") == 0, timeout=15.0, what="nothing pending")
            lease["held"] = False
            with caplog.at_level(logging.WARNING, logger="controller.external"):
                await publisher.publish({WEB: [ip("198.51.100.7")], API: [ip("198.51.100.9")]})
                await async_wait_until(lambda: "lease is not confirmed" in caplog.text,
                                       timeout=15.0, what="the publisher holding back")
                await asyncio.sleep(3 * FAST.maximum)  # retries would have gone out by now
            assert writes_to(cluster, WEB_OBJECT) == ["POST"]
            assert f"api.myns.{FEDERATION}" not in objects(cluster)
            assert endpoints(objects(cluster)[WEB_OBJECT]) == {"A": (["198.51.100.1"], 60)}
            lease["held"] = True
            await async_wait_until(lambda: f"api.myns.{FEDERATION}" in objects(cluster),
                                   timeout=15.0, what="api created with the lease")
            await async_wait_until(lambda: endpoints(objects(cluster)[WEB_OBJECT]) == {"A": (["198.51.100.7"], 60)},
                                   timeout=15.0, what="web changed with the lease")
    run(scenario)


def test_externaldns_status_write_conflicts_and_the_change_is_made_on_the_new_version(
        cluster: FakeKube, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with publishing(cluster, tmp_path) as (publisher, registry):
            await publisher.resync({WEB: [ip("198.51.100.1")]})
            await async_wait_until(lambda: WEB_OBJECT in objects(cluster), timeout=15.0, what="created")
            await asyncio.to_thread(externaldns_writes_status, cluster, WEB_OBJECT)
            await publisher.publish({WEB: [ip("198.51.100.2")]})
            await async_wait_until(lambda: endpoints(objects(cluster)[WEB_OBJECT])["A"][0] == ["198.51.100.2"],
                                   timeout=15.0, what="changed")
            web = objects(cluster)[WEB_OBJECT]
            assert web["status"] == {"observedGeneration": 1}  # ExternalDNS's write is kept
            assert web["metadata"]["generation"] == 2
            # the first replace carried the old resourceVersion (409), the second the new one
            assert writes_to(cluster, WEB_OBJECT) == ["POST", "PUT", "PUT", "PUT"]
            await async_wait_until(lambda: sample(registry, "pending_names") == 0,
                                   timeout=15.0, what="nothing pending")  # counted
            assert sample(registry, "failures_total", reason="prerequisite") == 0
            assert sample(registry, "updates_total") == 2
    run(scenario)


def test_objects_and_names_of_others_are_never_written(cluster: FakeKube, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    # an object with our name but not our labels; another object publishing a name we want;
    # another federation's object (our labels, its federation)
    taken = cluster.apply(dnsendpoint(f"taken.myns.{FEDERATION}", f"taken.myns.{FEDERATION}.svc.example.com",
                                      ["192.0.2.98"]))
    cluster.apply(dnsendpoint("hand-made", f"api.myns.{FEDERATION}.svc.example.com", ["192.0.2.97"]))
    other = cluster.apply(dnsendpoint(
        "web.myns.otherfed", "web.myns.otherfed.svc.example.com", ["192.0.2.96"],
        labels={"app.kubernetes.io/managed-by": "feddns-controller", "federation.feddns.io/federation": "otherfed"},
        annotations={"federation.feddns.io/service": "myns/web"}))
    before = len(cluster.writes)

    async def scenario() -> None:
        async with publishing(cluster, tmp_path) as (publisher, registry):
            with caplog.at_level(logging.WARNING, logger="controller.external"):
                await publisher.resync({WEB: [ip("198.51.100.1")], API: [ip("198.51.100.2")],
                                        ("myns", "taken"): [ip("198.51.100.3")]})
                await async_wait_until(lambda: sample(registry, "conflicting_names") == 2,
                                       timeout=15.0, what="two conflicts")
            assert WEB_OBJECT in objects(cluster)
            assert f"api.myns.{FEDERATION}" not in objects(cluster)
            # wanting them no more deletes nothing of theirs either
            await publisher.publish({WEB: [ip("198.51.100.1")]})
            await async_wait_until(lambda: sample(registry, "conflicting_names") == 0, timeout=15.0, what="no conflict")
    run(scenario)
    assert [name for _, name, _ in cluster.writes[before:]] == [WEB_OBJECT]
    now = objects(cluster)
    assert now[f"taken.myns.{FEDERATION}"]["metadata"]["resourceVersion"] == taken["metadata"]["resourceVersion"]
    assert now["web.myns.otherfed"]["metadata"]["resourceVersion"] == other["metadata"]["resourceVersion"]
    assert endpoints(now["hand-made"]) == {"A": (["192.0.2.97"], 300)}
    warned = [r.getMessage() for r in caplog.records if "leaving it alone" in r.getMessage()]
    assert len(warned) == 2, warned


def test_a_resync_deletes_objects_nobody_wants_and_rewrites_nothing_that_is_right(
        cluster: FakeKube, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with publishing(cluster, tmp_path) as (first, _):
            await first.publish({WEB: [ip("198.51.100.1")], API: [ip("198.51.100.2")]})
            await async_wait_until(lambda: len(objects(cluster)) == 2, timeout=15.0, what="both created")
        async with publishing(cluster, tmp_path) as (second, registry):  # a restart, or a new leader
            await second.resync({WEB: [ip("198.51.100.1")]})
            await async_wait_until(lambda: list(objects(cluster)) == [WEB_OBJECT], timeout=15.0, what="api deleted")
            await async_wait_until(lambda: sample(registry, "pending_names") == 0, timeout=15.0, what="settled")
            assert sample(registry, "updates_total") == 1
        assert writes_to(cluster, WEB_OBJECT) == ["POST"]
        assert writes_to(cluster, f"api.myns.{FEDERATION}") == ["POST", "DELETE"]
    run(scenario)


def test_a_cluster_without_the_crd_is_reported_once_and_caught_up_when_it_is_installed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeKube("t", without=("dnsendpoints",))
    fake.start()

    async def scenario() -> None:
        async with publishing(fake, tmp_path) as (publisher, registry):
            with caplog.at_level(logging.INFO, logger="controller.external"):
                await publisher.resync({WEB: [ip("198.51.100.1")]})
                await async_wait_until(lambda: sample(registry, "failures_total", reason="no-crd") >= 3,
                                       timeout=15.0, what="retried")
                assert sample(registry, "pending_names") == 1
                fake.without = frozenset()  # the CRD is installed
                await async_wait_until(lambda: WEB_OBJECT in objects(fake),
                                       timeout=15.0, what="created once the CRD is there")
                await async_wait_until(lambda: any("caught up" in r.getMessage() for r in caplog.records),
                                       timeout=15.0, what="caught up")
    try:
        run(scenario)
    finally:
        fake.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "install ExternalDNS's DNSEndpoint CRD" in warnings[0], warnings


def test_an_unreachable_api_server_catches_up(cluster: FakeKube, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with publishing(cluster, tmp_path) as (publisher, registry):
            await publisher.resync({WEB: [ip("198.51.100.1")]})
            await async_wait_until(lambda: WEB_OBJECT in objects(cluster), timeout=15.0, what="created")
            await asyncio.to_thread(cluster.stop)
            await publisher.publish({WEB: [ip("198.51.100.2")]})
            await async_wait_until(lambda: sample(registry, "failures_total", reason="unreachable") >= 2,
                                   timeout=15.0, what="failing")
            await asyncio.to_thread(cluster.start)
            await async_wait_until(lambda: endpoints(objects(cluster)[WEB_OBJECT])["A"][0] == ["198.51.100.2"],
                                   timeout=15.0, what="caught up")
    run(scenario)


@pytest.mark.parametrize("raw, message", [
    ({"provider": "dnsendpoint", "namespace": "feddns", "zone": "example.com."}, "external.cluster: is required"),
    ({"provider": "dnsendpoint", "cluster": "foo", "zone": "example.com."}, "external.namespace: is required"),
    ({"provider": "dnsendpoint", "cluster": "foo", "namespace": "Feddns", "zone": "example.com."},
     "external.namespace: 'Feddns' is not a lowercase DNS label"),
    ({"provider": "dnsendpoint", "cluster": "foo", "namespace": "feddns", "zone": "example.com.",
      "server": "203.0.113.53"}, "external.server: unknown key with provider dnsendpoint"),
    ({"provider": "rfc2136", "server": "203.0.113.53", "zone": "example.com.", "namespace": "feddns"},
     "external.namespace: unknown key with provider rfc2136"),
])
def test_bad_dnsendpoint_config_names_the_key(raw: dict[str, Any], message: str) -> None:
    from feddns.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        parse_external_config(raw)


def test_the_cluster_must_be_a_configured_one(tmp_path: Path) -> None:
    from controller.config import parse_config
    from feddns.errors import ConfigError

    raw = config_raw("http://127.0.0.1:2379", "", [unreachable_entry("foo", tmp_path)], external={
        "provider": "dnsendpoint", "cluster": "bar", "namespace": "feddns", "zone": "example.com."})
    with pytest.raises(ConfigError, match=r"external.cluster: 'bar' is not one of clusters\[\].name \(foo\)"):
        parse_config(raw)  # reads the kubeconfig, contacts nothing
