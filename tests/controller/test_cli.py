"""``feddns controller --config FILE --metrics HOST:PORT`` as operators run it."""

import time

from tests.controller.harness import ControllerProcess, records, write_config
from tests.controller.test_controller import SYNCED, two_clusters, wait_records
from tests.support.ports import wait_until


def test_metrics_probes_and_a_clean_stop(etcd, etcd_prefix, foo, bar, tmp_path):
    path = write_config(tmp_path / "controller.yaml", two_clusters(etcd, etcd_prefix, foo, bar, tmp_path))
    process = ControllerProcess(path, tmp_path / "controller.log").start()
    try:
        wait_records(etcd, etcd_prefix, SYNCED)
        wait_until(lambda: process.get("/ready")[0] == 200, what="ready")
        assert process.get("/health") == (200, "ok\n")
        for cluster, services in (("foo", 2), ("bar", 2)):
            assert process.metric("feddns_controller_cluster_connected", cluster=cluster) == 1
            assert process.metric("feddns_controller_cluster_services", cluster=cluster) == services
            assert process.metric("feddns_controller_cluster_last_sync_timestamp_seconds",
                                  cluster=cluster) > time.time() - 60
        wait_until(lambda: process.metric("feddns_controller_etcd_writes_total") == len(SYNCED),
                   what="one write per record")
        assert process.metric("feddns_controller_leader") == 1
        assert "shard myns/myservice in foo: created" in process.log()
    finally:
        started = time.monotonic()
        assert process.terminate() == 0, process.log()
    assert time.monotonic() - started < 5
    assert records(etcd, etcd_prefix) == SYNCED  # stopping deletes nothing
