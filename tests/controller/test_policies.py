"""Policy annotations and headless EndpointSlices through real kube-apiservers, the
controller and etcd, into ``feddns serve`` answers (docs/reference.md sections 1, 2, 4)."""

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.rdatatype
import pytest

from harness.etcd import EtcdServer
from harness.objects import endpoint_slice, service, service_export
from harness.ports import wait_until
from harness.serve import ServeProcess
from tests.controller.harness import LABEL, RunningController, cluster_entry, config_raw, records
from tests.controller.test_serve_answers import wait_answer
from tests.support.membercluster import MemberCluster

QNAME = "myservice.myns.myfederation.svc.federation."
POLICY, ORDER, WEIGHT = (f"federation.feddns.io/{n}" for n in ("policy", "failover-order", "weight"))


def config(etcd: EtcdServer, prefix: str, foo: MemberCluster, bar: MemberCluster, tmp_path: Path, **extra: Any) -> dict:
    """foo and bar in one region, other zones; foo's pods are routable from bar, bar's are not."""
    return config_raw(etcd.url, prefix, [
        cluster_entry(foo, tmp_path, zone="us-central1-a", region="us-central1", podNetwork="routable"),
        cluster_entry(bar, tmp_path, zone="us-central1-b", region="us-central1"),
    ], **extra)


@pytest.fixture
def serve(etcd, etcd_prefix) -> Iterator[ServeProcess]:
    server = ServeProcess(etcd_url=etcd.url, prefix=etcd_prefix, extra_args=["--mcs-zone", "clusterset.local."])
    server.start()
    yield server
    server.stop()


@pytest.fixture
def controller(etcd, etcd_prefix, foo, bar, tmp_path) -> Iterator[RunningController]:
    with RunningController(config(etcd, etcd_prefix, foo, bar, tmp_path)) as running:
        yield running


def annotate(cluster: MemberCluster, name: str, annotations: dict[str, str], namespace: str = "myns") -> None:
    obj = cluster.get("Service", namespace, name)
    assert obj is not None
    obj["metadata"]["annotations"] = annotations
    cluster.apply(obj)


def shard(etcd: EtcdServer, prefix: str, key: str) -> dict | None:
    return records(etcd, prefix).get(key)


def wait_shard(etcd: EtcdServer, prefix: str, key: str, check) -> dict:
    return wait_until(lambda: (found := shard(etcd, prefix, key)) is not None and check(found) and found,
                      timeout=10, what=f"{key} in etcd")


def test_failover_annotations_reach_etcd_and_order_answers_for_everyone(etcd, etcd_prefix, controller, serve,
                                                                         foo, bar):
    wait_answer(serve, QNAME, ["10.0.3.64", "104.32.64.130"], cluster="foo")  # locality: own shard first
    for cluster in (foo, bar):
        annotate(cluster, "myservice", {POLICY: "failover", ORDER: "bar,foo"})
    for cluster in ("foo", "bar"):
        wait_shard(etcd, etcd_prefix, f"myns/myservice/{cluster}",
                   lambda r: r.get("policy") == "failover" and r.get("failoverOrder") == ["bar", "foo"])
    wait_answer(serve, QNAME, ["104.32.64.130", "10.0.3.64"], cluster="foo")  # bar first, even for foo
    wait_answer(serve, QNAME, ["104.32.64.130", "104.32.64.128"])
    wait_answer(serve, "myservice.myns.svc.clusterset.local.", ["104.32.64.130", "104.32.64.128"])
    srv = serve.query("_http._tcp." + QNAME, "SRV", cluster="foo")
    assert [f"{rd.priority} {rd.target}" for rd in srv.answer[0]] == [f"0 bar.{QNAME}", f"10 foo.{QNAME}"]
    bar.apply(endpoint_slice("myns", "myservice", ready=0, not_ready=1, name="myservice-q8r3z"))  # bar unready
    wait_answer(serve, QNAME, ["10.0.3.64"], cluster="foo")


def test_weights_reach_etcd_and_weight_0_leaves_a_shard_out(etcd, etcd_prefix, controller, serve, foo, bar):
    wait_answer(serve, QNAME, ["10.0.3.64", "104.32.64.130"], cluster="foo")
    annotate(foo, "myservice", {POLICY: "weighted", WEIGHT: "3"})
    annotate(bar, "myservice", {POLICY: "weighted", WEIGHT: "1"})
    wait_shard(etcd, etcd_prefix, "myns/myservice/bar", lambda r: r.get("weight") == 1)
    wait_shard(etcd, etcd_prefix, "myns/myservice/foo", lambda r: (r.get("policy"), r.get("weight")) == ("weighted", 3))
    # etcd holding both records does not mean serve has applied the second yet: wait for its answer
    wanted = [f"0 1 bar.{QNAME}", f"0 3 foo.{QNAME}"]
    wait_until(lambda: sorted(f"{rd.priority} {rd.weight} {rd.target}"
                              for rd in serve.query("_http._tcp." + QNAME, "SRV").answer[0]) == wanted,
               timeout=5, what=f"serve's SRV answer {wanted}")
    firsts = {serve.addresses(QNAME)[0] for _ in range(60)}
    assert firsts == {"104.32.64.128", "104.32.64.130"}  # both come first sometimes (odds of not: 0.75^60)
    annotate(bar, "myservice", {POLICY: "weighted", WEIGHT: "0"})
    wait_answer(serve, QNAME, ["104.32.64.128"])
    assert serve.addresses("bar." + QNAME) == ["104.32.64.130"]  # named explicitly: still answered


def test_shards_that_disagree_get_the_default_logged_once_and_counted(etcd, etcd_prefix, controller, serve,
                                                                      foo, bar, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    annotate(foo, "myservice", {POLICY: "failover", ORDER: "bar,foo"})
    annotate(bar, "myservice", {POLICY: "weighted", WEIGHT: "2"})
    both = "bar: weighted (weight 2), foo: failover [bar, foo]"
    # the writer may see foo's annotation before bar's: a passing conflict (bar: locality) is logged first
    wait_until(lambda: any(both in r.getMessage() for r in caplog.records), timeout=10, what="the conflict logged")
    assert controller.metric("feddns_controller_policy_conflicts_total") == 1
    for cluster in ("foo", "bar"):
        wait_shard(etcd, etcd_prefix, f"myns/myservice/{cluster}", lambda r: "policy" not in r)
    wait_answer(serve, QNAME, ["10.0.3.64", "104.32.64.130"], cluster="foo")  # locality
    logged = len([r for r in caplog.records if "set different policies" in r.getMessage()])
    bar.apply(endpoint_slice("myns", "myservice", ready=2, name="myservice-q8r3z"))  # more events, same conflict
    wait_shard(etcd, etcd_prefix, "myns/myservice/bar", lambda r: r["ready"] == 2)
    conflicts = [r for r in caplog.records if "set different policies" in r.getMessage()]
    assert len(conflicts) == logged <= 2
    assert both in conflicts[-1].getMessage()
    assert controller.metric("feddns_controller_policy_conflicts_total") == 1
    annotate(bar, "myservice", {POLICY: "failover", ORDER: "bar,foo"})  # they agree again
    for cluster in ("foo", "bar"):
        wait_shard(etcd, etcd_prefix, f"myns/myservice/{cluster}", lambda r: r.get("policy") == "failover")
    wait_answer(serve, QNAME, ["104.32.64.130", "10.0.3.64"], cluster="foo")
    assert controller.metric("feddns_controller_policy_conflicts_total") == 1
    annotate(bar, "myservice", {})  # bar back to the default: foo's shard must lose its policy too
    wait_shard(etcd, etcd_prefix, "myns/myservice/foo", lambda r: "policy" not in r)
    assert controller.metric("feddns_controller_policy_conflicts_total") == 2


@pytest.mark.parametrize(("annotations", "words"), [
    ({POLICY: "round-robin"}, "federation.feddns.io/policy 'round-robin' is not one of"),
    ({POLICY: "failover", ORDER: "bar,qux"}, "federation.feddns.io/failover-order names unknown clusters: qux"),
    ({POLICY: "weighted", WEIGHT: "-2"}, "federation.feddns.io/weight '-2' is not a whole number"),
    ({POLICY: "weighted", WEIGHT: "two"}, "federation.feddns.io/weight 'two' is not a whole number"),
])
def test_bad_annotations_write_the_shard_with_the_default_logged_once_per_service(
        etcd, etcd_prefix, controller, foo, caplog, annotations, words):
    caplog.set_level(logging.INFO, logger="controller")
    wait_shard(etcd, etcd_prefix, "myns/myservice/foo", lambda r: True)
    annotate(foo, "myservice", annotations)
    wait_until(lambda: controller.metric("feddns_controller_bad_policy_annotations_total", cluster="foo") == 1,
               timeout=10, what="the bad annotation counted")
    for ready in (1, 2):  # later events of the same Service: no second line
        foo.apply(endpoint_slice("myns", "myservice", ready=ready, name="myservice-x7k2p"))
        wait_shard(etcd, etcd_prefix, "myns/myservice/foo", lambda r, n=ready: r["ready"] == n)
    record = shard(etcd, etcd_prefix, "myns/myservice/foo")
    assert record is not None and "policy" not in record and "weight" not in record
    lines = [r.getMessage() for r in caplog.records if words in r.getMessage()]
    assert lines == [f"shard myns/myservice in foo: {lines[0].split(': ', 1)[1]}"] and "default policy" in lines[0]
    assert controller.metric("feddns_controller_bad_policy_annotations_total", cluster="foo") == 1


def headless(cluster: MemberCluster, base: str, hostnames: list[str], ready: int | None = None, **labels: str) -> None:
    """Service myns/web, headless, with one EndpointSlice of ``ready`` ready endpoints."""
    cluster.apply(service("myns", "web", labels={**LABEL, **labels}, cluster_ip="None", ports=(("http", "TCP", 80),)))
    count = len(hostnames) if ready is None else ready
    cluster.apply(endpoint_slice("myns", "web", ready=count, name="web-s1", base=base, hostnames=hostnames,
                                    headless=True, ports=(("http", "TCP", 8080),)))


WEB = "web.myns.myfederation.svc.federation."


def test_headless_endpoints_reach_etcd_and_answers_where_routable(etcd, etcd_prefix, controller, serve, foo, bar):
    headless(foo, "10.244.1.0", ["web-0", "web-1"])
    headless(bar, "10.245.1.0", ["web-0"])
    wait_shard(etcd, etcd_prefix, "myns/web/foo", lambda r: r.get("endpoints") == [
        {"ip": "10.244.1.1", "hostname": "web-0"}, {"ip": "10.244.1.2", "hostname": "web-1"}])
    assert shard(etcd, etcd_prefix, "myns/web/foo")["ports"] == [{"name": "http", "protocol": "TCP", "port": 8080}]
    wait_answer(serve, WEB, ["10.245.1.1", "10.244.1.1", "10.244.1.2"], cluster="bar", ordered=False)
    assert serve.addresses(WEB, cluster="bar")[0] == "10.245.1.1"  # its own pods first, then foo's (routable)
    wait_answer(serve, WEB, ["10.244.1.1", "10.244.1.2"], cluster="foo", ordered=False)  # bar's pods: isolated
    assert serve.addresses("web-1.foo." + WEB, cluster="bar") == ["10.244.1.2"]
    assert serve.addresses("web-0.bar." + WEB, cluster="foo") == []
    srv = serve.query("_http._tcp." + WEB, "SRV", cluster="bar")
    assert sorted(f"{rd.priority} {rd.weight} {rd.port} {rd.target}" for rd in srv.answer[0]) == [
        f"0 1 8080 web-0.bar.{WEB}", f"20 1 8080 web-0.foo.{WEB}", f"20 1 8080 web-1.foo.{WEB}"]  # same region
    assert sorted(str(r.name) for r in srv.additional if r.rdtype == dns.rdatatype.A) == [
        f"web-0.bar.{WEB}", f"web-0.foo.{WEB}", f"web-1.foo.{WEB}"]
    headless(foo, "10.244.1.0", ["web-0", "web-1"], ready=1)  # web-1 not ready any more
    wait_answer(serve, WEB, ["10.244.1.1"], cluster="foo")
    wait_answer(serve, "web-0.foo.web.myns.svc.clusterset.local.", ["10.244.1.1"], cluster="bar")


def test_headless_shard_keeps_1000_endpoints_logged_once(etcd, etcd_prefix, controller, foo, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    headless(foo, "10.8.0.0", [], ready=600)
    foo.apply(endpoint_slice("myns", "web", ready=600, name="web-s2", base="10.9.0.0", headless=True))
    wait_shard(etcd, etcd_prefix, "myns/web/foo", lambda r: r["ready"] == 1200 and len(r["endpoints"]) == 1000)
    foo.apply(endpoint_slice("myns", "web", ready=601, name="web-s2", base="10.9.0.0", headless=True))
    wait_shard(etcd, etcd_prefix, "myns/web/foo", lambda r: r["ready"] == 1201)
    assert shard(etcd, etcd_prefix, "myns/web/foo")["endpoints"][-1] == {"ip": "10.9.1.144"}  # by address
    trims = [r.getMessage() for r in caplog.records if "keeping the first 1000" in r.getMessage()]
    assert trims == ["shard myns/web in foo: 1200 ready endpoints; keeping the first 1000 (by address)"]
    assert controller.metric("feddns_controller_trimmed_endpoints_total", cluster="foo") == 1


def test_exported_headless_service_answers_under_the_mcs_zone(etcd, etcd_prefix, serve, foo, bar, tmp_path):
    """``serviceExports: true``: a Service with a ServiceExport of the same name is a shard without the label."""
    foo.apply(service("shop", "db", cluster_ip="None", ports=(("pg", "TCP", 5432),)))
    foo.apply(endpoint_slice("shop", "db", ready=1, name="db-s1", base="10.244.9.0", hostnames=["db-0"],
                             headless=True, ports=(("pg", "TCP", 5432),)))
    foo.apply(service_export("shop", "db"))
    raw = config(etcd, etcd_prefix, foo, bar, tmp_path, selector={"serviceExports": True})
    with RunningController(raw):
        wait_answer(serve, "db.shop.svc.clusterset.local.", ["10.244.9.1"], cluster="bar")
        wait_answer(serve, "db-0.foo.db.shop.svc.clusterset.local.", ["10.244.9.1"])
        srv = serve.query("_pg._tcp.db.shop.svc.clusterset.local.", "SRV", cluster="bar")
        assert [f"{rd.port} {rd.target}" for rd in srv.answer[0]] == ["5432 db-0.foo.db.shop.svc.clusterset.local."]
        foo.delete("ServiceExport", "shop", "db")
        wait_answer(serve, "db.shop.svc.clusterset.local.", [], cluster="bar")
