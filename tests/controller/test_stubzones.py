"""The controller's leader keeps every member's stub zone equal to Federated-DNS's addresses (the design's
"Initial Setup"; docs/controller.md, "Members' stub zones"), against real stub-zone endpoints
(``feddns stubzone --backend skydns`` over the session's etcd: the quickest real backend) and, for
``nameservers.fromService``, a real kube-apiserver holding Federated-DNS's Service."""

import asyncio
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from controller.config import ClusterConfig, StubzoneEndpoint
from controller.metrics import Metrics
from controller.settings import StubzoneSettings
from controller.stubzones import StubZones
from harness.controller import ControllerProcess
from harness.kubecluster import KubeCluster
from harness.ports import wait_until
from harness.stubzone import StubzoneProcess, make_pki, skydns_args
from tests.controller.harness import FEDERATION
from tests.controller.test_real_cluster import controller_kubeconfig, install_access


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def endpoints(pki: Any, etcd: Any) -> Iterator[dict[str, StubzoneProcess]]:
    """Two members' stub-zone endpoints, foo and bar, each with a SkyDNS store of its own."""
    running = {name: StubzoneProcess(pki, *skydns_args(etcd.url, f"/skydns{uuid.uuid4().hex[:8]}"))
               for name in ("foo", "bar")}
    for endpoint in running.values():
        endpoint.start()
    yield running
    for endpoint in running.values():
        endpoint.stop()


@pytest.fixture
def service(kube_foo: KubeCluster) -> Iterator[tuple[KubeCluster, str]]:
    """Federated-DNS's Service in foo (a namespace of the test's own), and the controller's access to foo."""
    install_access(kube_foo)
    namespace = f"t{uuid.uuid4().hex[:10]}"
    set_ingress(kube_foo, namespace, ["192.0.2.10"])
    yield kube_foo, namespace
    kube_foo.delete("Service", namespace, "feddns")


def set_ingress(kube: KubeCluster, namespace: str, ips: list[str]) -> None:
    """Federated-DNS's LoadBalancer Service with these ``status.loadBalancer.ingress[].ip``, DNS on 5353."""
    kube.apply({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "feddns", "namespace": namespace},
        "spec": {"type": "LoadBalancer", "selector": {"app": "feddns"},
                 "ports": [{"name": "dns", "protocol": "UDP", "port": 5353},
                           {"name": "dns-tcp", "protocol": "TCP", "port": 5353}]},
        "status": {"loadBalancer": {"ingress": [{"ip": ip} for ip in ips]}},
    })


def write_config(path: Path, etcd: Any, prefix: str, kube: KubeCluster, namespace: str,
                 endpoints: dict[str, StubzoneProcess], pki: Any, certs: dict[str, str] | None = None) -> Path:
    """The controller's config; ``certs`` names the client certificate per cluster (default ``client``)."""
    kubeconfig = controller_kubeconfig(kube, path.parent)
    config = {
        "federation": FEDERATION, "etcd": {"endpoints": [etcd.url], "prefix": prefix}, "leaseSeconds": 2,
        "nameservers": {"fromService": {"cluster": "foo", "namespace": namespace, "name": "feddns"}},
        "clusters": [{"name": name, "kubeconfig": kubeconfig,
                      "stubzone": {"url": f"https://127.0.0.1:{endpoint.port}",
                                   "cert": pki.cert((certs or {}).get(name, "client"))[0],
                                   "key": pki.cert((certs or {}).get(name, "client"))[1], "ca": pki.ca}}
                     for name, endpoint in endpoints.items()],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def held(endpoint: StubzoneProcess) -> list[str] | None:
    answer = endpoint.request("GET", f"/federations/{FEDERATION}")
    return answer.body["nameservers"] if answer.status == 200 else None


def requests_sent(process: ControllerProcess) -> float:
    """``feddns_controller_stubzone_requests_total`` of one replica, all members and methods."""
    return sum(sample.value for family in text_string_to_metric_families(process.get("/metrics")[1])
               for sample in family.samples if sample.name == "feddns_controller_stubzone_requests_total")


def test_every_member_follows_the_federated_dns_service(etcd, etcd_prefix, service, endpoints, pki, tmp_path):
    kube, namespace = service
    path = write_config(tmp_path / "controller.yaml", etcd, etcd_prefix, kube, namespace, endpoints, pki)
    process = ControllerProcess(path, tmp_path / "controller.log").start()
    try:
        for endpoint in endpoints.values():
            wait_until(lambda e=endpoint: held(e) == ["192.0.2.10:5353"], timeout=15, what="the first address")
        set_ingress(kube, namespace, ["192.0.2.20", "192.0.2.21"])
        for endpoint in endpoints.values():
            wait_until(lambda e=endpoint: held(e) == ["192.0.2.20:5353", "192.0.2.21:5353"], timeout=10,
                       what="the new addresses")
        assert process.metric("feddns_controller_stubzone_synced", cluster="bar") == 1
        assert process.metric("feddns_controller_stubzone_last_success_timestamp_seconds", cluster="foo") > 0
        assert "nameservers from Service" in process.log()
    finally:
        assert process.terminate() == 0, process.log()


def test_a_member_that_fails_is_retried_and_holds_up_no_other(etcd, etcd_prefix, service, endpoints, pki, tmp_path):
    kube, namespace = service
    endpoints["bar"].stop()  # bar's endpoint is down: connections refused
    path = write_config(tmp_path / "controller.yaml", etcd, etcd_prefix, kube, namespace, endpoints, pki)
    process = ControllerProcess(path, tmp_path / "controller.log").start()
    try:
        wait_until(lambda: held(endpoints["foo"]) == ["192.0.2.10:5353"], timeout=15, what="foo programmed")
        wait_until(lambda: process.metric("feddns_controller_stubzone_errors_total", cluster="bar",
                                          kind="unreachable") >= 2, timeout=15, what="bar retried")
        assert process.metric("feddns_controller_stubzone_synced", cluster="bar") == 0
        assert process.log().count("cluster bar: stub zone not synced") == 1, "a failure is logged once"
    finally:
        assert process.terminate() == 0, process.log()


def test_a_refusal_is_logged_once_with_its_body_and_the_others_go_on(etcd, etcd_prefix, service, endpoints, pki,
                                                                     tmp_path):
    """bar's endpoint does not allow the certificate the controller presents there: 403."""
    kube, namespace = service
    path = write_config(tmp_path / "controller.yaml", etcd, etcd_prefix, kube, namespace, endpoints, pki,
                        certs={"bar": "stranger"})
    process = ControllerProcess(path, tmp_path / "controller.log").start()
    try:
        wait_until(lambda: held(endpoints["foo"]) == ["192.0.2.10:5353"], timeout=15, what="foo programmed")
        wait_until(lambda: process.metric("feddns_controller_stubzone_errors_total", cluster="bar",
                                          kind="http-4xx") >= 2, timeout=15, what="bar refused twice")
        refusals = [line for line in process.log().splitlines() if "cluster bar: stub zone not synced" in line]
        assert len(refusals) == 1, refusals
        assert ": 403 {" in refusals[0] and "someone-else" in refusals[0], refusals[0]
        assert held(endpoints["bar"]) is None
    finally:
        assert process.terminate() == 0, process.log()


def test_a_deposed_leader_never_writes_a_stub_zone(etcd, etcd_prefix, service, endpoints, pki, tmp_path):
    """The leader, paused past its lease (SIGSTOP), wakes to find another replica leading: it sends no
    request, although the addresses changed while it slept."""
    kube, namespace = service
    path = write_config(tmp_path / "controller.yaml", etcd, etcd_prefix, kube, namespace, endpoints, pki)
    replicas = [ControllerProcess(path, tmp_path / f"controller-{i}.log").start() for i in range(2)]
    try:
        wait_until(lambda: sum(p.metric("feddns_controller_leader") for p in replicas) == 1, timeout=15,
                   what="one leader")
        leader, other = sorted(replicas, key=lambda p: -p.metric("feddns_controller_leader"))
        wait_until(lambda: held(endpoints["bar"]) == ["192.0.2.10:5353"], timeout=15, what="programmed")
        leader.child.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: other.metric("feddns_controller_leader") == 1, timeout=15, what="the other leads")
            set_ingress(kube, namespace, ["192.0.2.30"])
            for endpoint in endpoints.values():
                wait_until(lambda e=endpoint: held(e) == ["192.0.2.30:5353"], timeout=10, what="the new leader's")
        finally:
            leader.child.send_signal(signal.SIGCONT)
        sent = requests_sent(leader)
        set_ingress(kube, namespace, ["192.0.2.40"])  # the woken replica reads it too
        for endpoint in endpoints.values():
            wait_until(lambda e=endpoint: held(e) == ["192.0.2.40:5353"], timeout=10, what="programmed again")
        time.sleep(3 * 0.5)  # a few of its hold-back periods
        assert requests_sent(leader) == sent, leader.log()[-3000:]
        assert leader.metric("feddns_controller_leader") == 0
    finally:
        for process in replicas:
            assert process.terminate() == 0, process.log()


def test_no_address_known_means_no_request_and_no_busy_loop(tmp_path):
    """A member failed, then the Service lost its addresses: nothing is sent, and the loop sleeps."""
    files = tmp_path / "x.pem"
    files.write_text("not a certificate")
    endpoint = StubzoneEndpoint("https://127.0.0.1:9", files, files, files)
    zones = StubZones(FEDERATION, [ClusterConfig("foo", stubzone=endpoint)], lambda: 10.0,
                      Metrics(CollectorRegistry()), StubzoneSettings(first=0.05), verify_every=300)
    sleeps = 0

    async def scenario() -> None:
        nonlocal sleeps
        original = zones._sleep

        async def counted() -> None:
            nonlocal sleeps
            sleeps += 1
            await original()
        zones._sleep = counted  # type: ignore[method-assign]
        zones.set_nameservers(["192.0.2.1"])
        task = asyncio.create_task(zones.run())
        await asyncio.sleep(0.3)  # the certificate files do not load: the member fails, with backoff
        assert zones.members["foo"].error is not None
        zones.set_nameservers(None)
        before = sleeps
        await asyncio.sleep(1.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert sleeps - before <= 3, f"{sleeps - before} wake-ups in 1 s with nothing to do"
    asyncio.run(scenario())


def test_a_stop_that_comes_as_the_loop_is_woken_stops_it(tmp_path):
    """A step-down wakes the loop (leadership_changed) as the controller's stop cancels it: the
    cancel must not be lost with the wake-up (Python 3.11's asyncio.wait_for loses it), or the
    loop runs on after the stop ("stubzones still running 5 s after cancellation")."""
    files = tmp_path / "x.pem"
    files.write_text("not a certificate")
    endpoint = StubzoneEndpoint("https://127.0.0.1:9", files, files, files)
    zones = StubZones(FEDERATION, [ClusterConfig("foo", stubzone=endpoint)], lambda: 10.0,
                      Metrics(CollectorRegistry()), StubzoneSettings(first=0.05), verify_every=300)

    async def scenario() -> list[bool]:
        stopped = []
        for _ in range(20):
            task = asyncio.create_task(zones.run())
            await asyncio.sleep(0.02)  # asleep in _sleep, nothing due
            zones.leadership_changed(False)  # the wake-up ...
            task.cancel()  # ... and the stop, in one turn of the loop
            done, _ = await asyncio.wait([task], timeout=1.0)
            stopped.append(bool(done))
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return stopped

    assert all(asyncio.run(scenario()))
