"""``feddns controller --config FILE --metrics HOST:PORT`` as operators run it, against real member clusters."""

import logging
import re
import time

from harness.controller import ControllerProcess
from harness.ports import wait_until
from tests.controller.harness import (
    RunningController,
    cluster_entry,
    config_raw,
    records,
    unreachable_entry,
    write_config,
)
from tests.controller.test_controller import SYNCED, two_clusters, wait_records


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
        log = process.log()
        # progress per cluster, a count of what was written, one summary line; each key at debug only
        for cluster, services in (("foo", 3), ("bar", 2)):
            assert re.search(rf"cluster {cluster}: listed {services} services in \d+\.\d s", log), log
        # each write's count (a cluster's first listing is written at once, the next within the writer's
        # window), adding up to every record
        written = [int(n) for n in re.findall(r"etcd: (\d+) keys written \(\d+ created\)", log)]
        assert sum(written) == len(SYNCED), log
        wait_until(lambda: "first sync done in" in process.log(), what="the summary")
        summary = (r"first sync done in \d+\.\d s: 2 of 2 clusters listed; etcd holds 4 shards and 2 cluster "
                   r"records: 6 keys created, 0 changed, 0 deleted, 0 already right")
        assert re.search(summary, process.log()), process.log()
        assert process.log().count("first sync done") == 1
        # a write of a few keys names each; a bigger one leaves them to debug level
        for count, detail in re.findall(r"etcd: (\d+) keys? written \([^)]*\): (.*)", process.log()):
            described = detail.count("shard ") + detail.count("cluster record ")
            assert (described == int(count)) if int(count) <= 3 else (detail == "each key at debug level"), detail
    finally:
        started = time.monotonic()
        assert process.terminate() == 0, process.log()
    assert time.monotonic() - started < 5
    assert "stepping down: stopping (lease revoked, so another replica takes over at once)" in process.log()
    assert "follower" not in process.log()
    assert records(etcd, etcd_prefix) == SYNCED  # stopping deletes nothing


def test_the_first_sync_summary_names_an_unreachable_cluster(etcd, etcd_prefix, foo, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    raw = config_raw(etcd.url, etcd_prefix, [cluster_entry(foo, tmp_path), unreachable_entry("bar", tmp_path)])
    with RunningController(raw):
        wait_until(lambda: "first sync done" in caplog.text, timeout=20, what="the summary")
    (line,) = [r.getMessage() for r in caplog.records if "first sync done" in r.getMessage()]
    assert re.search(r"1 of 2 clusters listed \(bar unreachable: their shards kept\); etcd holds 2 shards", line), line
