"""``/ready`` of ``feddns controller``: not ready until every cluster has been listed once or has
failed, and its body names the clusters that are not synced (docs/controller.md, "Metrics and
probes").

"bar answers nothing" is FakeKube ``fake_bar`` black-holed (``black_hole()``, then ``restore()``): a real
kube-apiserver does not do that on demand. foo is the session's real one; baz a port nothing listens on."""

import re
from pathlib import Path

from harness.controller import ControllerProcess
from harness.etcd import EtcdServer
from harness.kubecluster import KubeCluster
from harness.ports import wait_until
from tests.controller.harness import cluster_entry, config_raw, unreachable_entry, write_config
from tests.controller.test_real_cluster import controller_kubeconfig, install_access
from tests.support.fakekube import FakeKube
from tests.support.membercluster import MemberCluster


def test_not_ready_until_every_cluster_is_listed_or_failed(etcd: EtcdServer, etcd_prefix: str, foo: MemberCluster,
                                                            fake_bar: FakeKube, tmp_path: Path) -> None:
    """foo answers, bar's API server answers nothing (its list hangs), baz's refuses connections."""
    fake_bar.black_hole()
    raw = config_raw(etcd.url, etcd_prefix, [cluster_entry(foo, tmp_path), cluster_entry(fake_bar, tmp_path),
                                             unreachable_entry("baz", tmp_path)])
    process = ControllerProcess(write_config(tmp_path / "controller.yaml", raw), tmp_path / "controller.log").start()
    try:
        wait_until(lambda: process.metric("feddns_controller_cluster_connected", cluster="foo") == 1
                   and "baz unreachable" in process.log(), timeout=10, what="foo listed and baz failed")
        wait_until(lambda: process.metric("feddns_controller_leader") == 1, what="leading")
        wait_until(lambda: process.metric("feddns_controller_last_resync_timestamp_seconds") > 0, what="resynced")
        status, body = process.get("/ready")
        assert status == 503, body
        first, detail = body.splitlines()
        assert first == "not ready"
        assert re.match(r"clusters not synced: bar \(not listed yet\), baz \((services|endpointslices): .*refused",
                        detail), detail
        assert "foo" not in detail
        fake_bar.restore()
        wait_until(lambda: process.get("/ready")[0] == 200, timeout=10, what="ready once bar is listed")
        status, body = process.get("/ready")
        first, detail = body.splitlines()
        assert first == "ok"
        assert re.match(r"clusters not synced: baz \((services|endpointslices): ", detail), detail  # named, not awaited
    finally:
        fake_bar.restore()
        assert process.terminate() == 0, process.log()


def test_not_ready_while_etcd_cannot_be_reached(private_etcd: EtcdServer, etcd_prefix: str, kube_foo: KubeCluster,
                                                 tmp_path: Path) -> None:
    """etcd frozen (SIGSTOP) for longer than the lease: the leader and the follower both say not ready,
    naming etcd, and both are ready again once it answers (docs/controller.md, "Metrics and probes").
    The member cluster is a real kube-apiserver: nothing here needs a fault of the API server."""
    install_access(kube_foo)
    foo = {"name": "foo", "kubeconfig": controller_kubeconfig(kube_foo, tmp_path)}
    raw = config_raw(private_etcd.url, etcd_prefix, [foo])
    path = write_config(tmp_path / "controller.yaml", raw)
    replicas = [ControllerProcess(path, tmp_path / f"controller-{i}.log").start() for i in range(2)]
    try:
        for process in replicas:
            wait_until(lambda p=process: p.get("/ready")[0] == 200, timeout=15, what="ready")
        private_etcd.pause()
        for process in replicas:
            wait_until(lambda p=process: p.get("/ready")[0] == 503, timeout=15, what="not ready with etcd frozen")
            body = process.get("/ready")[1]
            assert "etcd cannot be reached" in body, body
        private_etcd.resume()
        for process in replicas:
            wait_until(lambda p=process: p.get("/ready")[0] == 200, timeout=20, what="ready once etcd answers")
    finally:
        if private_etcd.paused:
            private_etcd.resume()
        for process in replicas:
            assert process.terminate() == 0, process.log()
