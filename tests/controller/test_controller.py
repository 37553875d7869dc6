"""The controller end to end: real member clusters (kube-apiservers) in, a real etcd out."""

import logging
from pathlib import Path

import pytest

from harness.etcd import EtcdServer
from harness.objects import endpoint_slice, service, service_export
from harness.ports import wait_until
from tests.controller.harness import (
    LABEL,
    RunningController,
    cluster_entry,
    config_raw,
    mod_revisions,
    records,
)
from tests.support.membercluster import MemberCluster

MYSERVICE_FOO = {
    "clusterIP": "10.0.3.64", "clusterIPs": ["10.0.3.64"],
    "externalIP": "104.32.64.128", "externalIPs": ["104.32.64.128"],
    "ports": [{"name": "http", "protocol": "TCP", "port": 80}, {"name": "dns", "protocol": "UDP", "port": 53}],
    "ready": 2,
}
MYSERVICE_BAR = {
    "clusterIP": "10.0.4.20", "clusterIPs": ["10.0.4.20"],
    "externalIP": "104.32.64.130", "externalIPs": ["104.32.64.130"],
    "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
    "ready": 1,
}
CART_BAR = {
    "clusterIP": "10.0.4.33", "clusterIPs": ["10.0.4.33", "fd00:10:96::33"],
    "externalIP": "198.51.100.7", "externalIPs": ["198.51.100.7"],
    "ports": [{"name": "grpc", "protocol": "TCP", "port": 9090}],
    "ready": 2,
}
HEADLESS_FOO = {
    "endpoints": [{"ip": "10.244.1.20", "hostname": "web-0"}, {"ip": "10.244.2.21", "hostname": "web-1"}],
    "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
    "ready": 2,
}
SYNCED = {
    "myns/myservice/foo": MYSERVICE_FOO,
    "myns/headless/foo": HEADLESS_FOO,
    "myns/myservice/bar": MYSERVICE_BAR,
    "shop/cart/bar": CART_BAR,
    "_clusters/foo": {"zone": "us-central1-a", "region": "us-central1", "cidrs": ["10.0.0.0/14"],
                      "podNetwork": "isolated"},
    "_clusters/bar": {"zone": "us-central1-b", "region": "us-central1", "podNetwork": "isolated"},
}


def two_clusters(etcd: EtcdServer, prefix: str, foo: MemberCluster, bar: MemberCluster, tmp_path: Path, **extra):
    return config_raw(etcd.url, prefix, [
        cluster_entry(foo, tmp_path, zone="us-central1-a", region="us-central1", cidrs=["10.0.0.0/14"]),
        cluster_entry(bar, tmp_path, zone="us-central1-b", region="us-central1"),
    ], **extra)


def wait_records(etcd: EtcdServer, prefix: str, expected: dict, timeout: float = 10.0) -> None:
    wait_until(lambda: records(etcd, prefix) == expected, timeout=timeout,
               what=f"etcd holding {sorted(expected)}")


@pytest.fixture
def running(etcd, etcd_prefix, foo, bar, tmp_path):
    with RunningController(two_clusters(etcd, etcd_prefix, foo, bar, tmp_path)) as controller:
        yield controller


def test_initial_sync_writes_every_shard_and_cluster_record(etcd, etcd_prefix, running):
    wait_records(etcd, etcd_prefix, SYNCED)
    assert running.metric("feddns_controller_cluster_services", cluster="foo") == 2
    assert running.metric("feddns_controller_skipped_services_total", cluster="foo", reason="hostname-only") == 1


def test_create_update_delete_in_two_clusters(etcd, etcd_prefix, running, foo, bar, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    wait_records(etcd, etcd_prefix, SYNCED)

    moved = foo.get("Service", "myns", "myservice")
    moved["status"]["loadBalancer"]["ingress"] = [{"ip": "104.32.64.140"}]
    foo.apply(moved)
    bar.apply(service("shop", "pay", labels=LABEL, cluster_ip="10.0.4.50"))
    bar.apply(endpoint_slice("shop", "pay", ready=3))
    foo.delete("Service", "myns", "myservice")  # gone from foo only
    foo.apply(moved)  # ... and back again, with its slice still there
    bar.delete("Service", "shop", "cart")

    expected = dict(SYNCED)
    expected["myns/myservice/foo"] = {**MYSERVICE_FOO, "externalIP": "104.32.64.140",
                                      "externalIPs": ["104.32.64.140"]}
    expected["shop/pay/bar"] = {"clusterIP": "10.0.4.50", "clusterIPs": ["10.0.4.50"],
                                "ports": [{"name": "http", "protocol": "TCP", "port": 80}], "ready": 3}
    del expected["shop/cart/bar"]
    wait_records(etcd, etcd_prefix, expected)
    # The Service and its slice may reach the controller in one sync or two ("ready 0", then "ready 0 -> 3"):
    # both say the creation once; the records above hold the ready count.
    for line in ("shard shop/cart in bar: deleted",
                 "shard shop/pay in bar: created (clusterIP 10.0.4.50, externalIP none, ports http/TCP/80, ready "):
        wait_until(lambda line=line: caplog.text.count(line) == 1, what=f"log line {line!r} once")


def test_log_says_what_changed(etcd, etcd_prefix, running, foo, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    wait_records(etcd, etcd_prefix, SYNCED)
    moved = foo.get("Service", "myns", "myservice")
    moved["status"]["loadBalancer"]["ingress"] = [{"ip": "104.32.64.140"}]
    foo.apply(moved)
    wait_until(lambda: "shard myns/myservice in foo: externalIP 104.32.64.128 -> 104.32.64.140" in caplog.text,
               what="the change logged")


def test_removing_the_label_removes_the_shard(etcd, etcd_prefix, running, foo):
    wait_records(etcd, etcd_prefix, SYNCED)
    unlabelled = foo.get("Service", "myns", "myservice")
    del unlabelled["metadata"]["labels"]["federation.feddns.io/name"]
    foo.apply(unlabelled)
    wait_records(etcd, etcd_prefix, {k: v for k, v in SYNCED.items() if k != "myns/myservice/foo"})


def test_readiness_going_to_zero_is_written(etcd, etcd_prefix, running, foo):
    wait_records(etcd, etcd_prefix, SYNCED)
    foo.apply(endpoint_slice("myns", "myservice", ready=0, not_ready=3, name="myservice-x7k2p"))
    wait_records(etcd, etcd_prefix, {**SYNCED, "myns/myservice/foo": {**MYSERVICE_FOO, "ready": 0}})


def test_compare_before_put_writes_nothing_for_no_change(etcd, etcd_prefix, running, foo):
    wait_records(etcd, etcd_prefix, SYNCED)
    # etcd holds a record a moment before the writer counts it: wait for the count too
    wait_until(lambda: running.metric("feddns_controller_etcd_writes_total") == len(SYNCED), what="writes counted")
    writes = running.metric("feddns_controller_etcd_writes_total")
    before = mod_revisions(etcd, etcd_prefix)
    same = foo.get("Service", "myns", "myservice")
    same["metadata"]["annotations"] = {"touched": "yes"}  # a change that is not in the record
    foo.apply(same)
    marker = foo.apply(service("myns", "marker", labels=LABEL, cluster_ip="10.0.3.99"))
    wait_until(lambda: "myns/marker/foo" in records(etcd, etcd_prefix), what="marker shard")
    wait_until(lambda: running.metric("feddns_controller_etcd_writes_total") >= writes + 1, what="write counted")
    assert running.metric("feddns_controller_etcd_writes_total") == writes + 1
    after = mod_revisions(etcd, etcd_prefix)
    del after[f"{etcd_prefix}/myfederation/myns/marker/foo"]
    assert after == before
    assert marker["spec"]["clusterIP"] == "10.0.3.99"


def test_service_exports_select_services_without_the_label(etcd, etcd_prefix, foo, bar, tmp_path):
    foo.apply(service("shop", "exported", cluster_ip="10.0.3.31"))
    foo.apply(service_export("shop", "exported"))
    raw = two_clusters(etcd, etcd_prefix, foo, bar, tmp_path, selector={"serviceExports": True})
    with RunningController(raw):
        exported = {"clusterIP": "10.0.3.31", "clusterIPs": ["10.0.3.31"],
                    "ports": [{"name": "http", "protocol": "TCP", "port": 80}], "ready": 0}
        wait_records(etcd, etcd_prefix, {**SYNCED, "shop/exported/foo": exported})
        foo.delete("ServiceExport", "shop", "exported")
        wait_records(etcd, etcd_prefix, SYNCED)


class RecordingPublisher:
    """A Publisher (a controller.sync.ExternalSink) that remembers the desired states it was handed."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict, list]] = []

    async def publish(self, desired, unready=frozenset()):
        self.calls.append(("publish", {k: sorted(map(str, v)) for k, v in desired.items()}, sorted(unready)))

    async def resync(self, desired, unready=frozenset()):
        self.calls.append(("resync", {k: sorted(map(str, v)) for k, v in desired.items()}, sorted(unready)))

    def stop(self):
        self.calls.append(("stop", {}, []))

    async def close(self):
        self.calls.append(("close", {}, []))


def test_the_publisher_gets_the_ready_load_balancer_ips(etcd, etcd_prefix, foo, bar, tmp_path):
    publisher = RecordingPublisher()
    key = ("myns", "myservice")
    with RunningController(two_clusters(etcd, etcd_prefix, foo, bar, tmp_path), publisher=publisher):
        both = {key: ["104.32.64.128", "104.32.64.130"]}  # not shop/cart: a ClusterIP
        wait_until(lambda: publisher.calls and publisher.calls[-1][1:] == (both, []), what="both LB IPs published")
        assert publisher.calls[0][0] == "resync"
        bar.apply(endpoint_slice("myns", "myservice", ready=0, name="myservice-q8r3z"))
        wait_until(lambda: publisher.calls[-1] == ("publish", {key: ["104.32.64.128"]}, []),
                   what="bar's shard unpublished when not ready")
        # No shard ready: the load balancers' IPs are kept, marked unready (Federated-DNS says NODATA).
        foo.apply(endpoint_slice("myns", "myservice", ready=0, name="myservice-x7k2p"))
        wait_until(lambda: publisher.calls[-1] == ("publish", both, [key]), what="both kept, unready")
        # A LoadBalancer with spec.externalIPs but no ingress yet publishes nothing.
        foo.apply(service("myns", "pending", labels=LABEL, type="LoadBalancer", cluster_ip="10.0.3.77",
                          external_ips=["198.51.100.7"]))
        foo.apply(endpoint_slice("myns", "pending", ready=1))
        wait_until(lambda: records(etcd, etcd_prefix).get("myns/pending/foo", {}).get("ready") == 1,
                   what="the pending Service written to etcd")
        foo.apply(service("myns", "myservice", labels=LABEL, type="LoadBalancer", cluster_ip="10.0.3.64",
                          load_balancer_ips=["104.32.64.140"]))
        wait_until(lambda: publisher.calls[-1][1].get(key) == ["104.32.64.130", "104.32.64.140"],
                   what="the new ingress IP published")
        assert ("myns", "pending") not in publisher.calls[-1][1]
    assert publisher.calls[-1][0] == "close"
