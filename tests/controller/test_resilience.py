"""Unreachable clusters, 410 Gone, restarts and etcd outages lose nothing and delete nothing alive.

foo is the session's real kube-apiserver. The cluster that fails is FakeKube, for what a shared real one
cannot do on demand: ``fake_bar`` taken off the network and back (``stop()``/``start()``), its watches held
back and expired with 410 (``hold()``, ``expire_watches()``, ``release()``, counted with ``watch_count()``),
and ``baz`` whose history is compacted under an open watch (``compact()``, ``end_watches()``, 410 as an HTTP
status). Restarts of the controller and etcd outages need no fake."""

import asyncio
import contextlib
import logging
import re
import time

from harness.objects import endpoint_slice, service
from harness.ports import wait_until
from tests.controller.harness import LABEL, RunningController, mod_revisions, records
from tests.controller.test_controller import SYNCED, two_clusters, wait_records
from tests.support.fakekube import FakeKube


def test_unreachable_cluster_keeps_its_shards_and_catches_up(etcd, etcd_prefix, foo, fake_bar, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    raw = two_clusters(etcd, etcd_prefix, foo, fake_bar, tmp_path, resyncSeconds=0.3)
    with RunningController(raw) as running:
        wait_records(etcd, etcd_prefix, SYNCED)
        fake_bar.stop()
        wait_until(lambda: running.metric("feddns_controller_cluster_connected", cluster="bar") == 0,
                   what="bar seen as unreachable")
        resyncs = running.metric("feddns_controller_resyncs_total")
        wait_until(lambda: running.metric("feddns_controller_resyncs_total") >= resyncs + 2, what="two resyncs")
        assert records(etcd, etcd_prefix) == SYNCED
        wait_until(lambda: "cluster bar unreachable" in caplog.text, what="the outage logged")
        assert running.metric("feddns_controller_cluster_list_failures_total", cluster="bar") >= 1

        fake_bar.delete("Service", "shop", "cart")  # happens while the controller cannot see bar
        fake_bar.start()
        wait_records(etcd, etcd_prefix, {k: v for k, v in SYNCED.items() if k != "shop/cart/bar"})
        wait_until(lambda: running.metric("feddns_controller_cluster_connected", cluster="bar") == 1,
                   what="bar connected again")


def test_cluster_unreachable_at_start_keeps_its_shards(etcd, etcd_prefix, foo, fake_bar, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    raw = two_clusters(etcd, etcd_prefix, foo, fake_bar, tmp_path)
    first = RunningController(raw).start()
    wait_records(etcd, etcd_prefix, SYNCED)
    first.stop()

    fake_bar.stop()
    with RunningController(raw) as second:
        wait_until(lambda: second.metric("feddns_controller_cluster_kept_shards", cluster="bar") == 2,
                   what="bar's two shards counted as kept")
        wait_until(lambda: "cluster bar has not been listed (unreachable?): keeping its 2 shards" in caplog.text,
                   what="the kept shards logged")
        foo.apply(service("myns", "later", labels=LABEL, cluster_ip="10.0.3.77"))
        wait_until(lambda: "myns/later/foo" in records(etcd, etcd_prefix), what="a write while bar is down")
        assert {k: v for k, v in records(etcd, etcd_prefix).items() if k.endswith("/bar")} == {
            k: v for k, v in SYNCED.items() if k.endswith("/bar")}
        fake_bar.start()
        wait_until(lambda: second.metric("feddns_controller_cluster_connected", cluster="bar") == 1,
                   what="bar connected")


def test_410_gone_relists_and_loses_nothing(etcd, etcd_prefix, foo, fake_bar, tmp_path):
    with RunningController(two_clusters(etcd, etcd_prefix, foo, fake_bar, tmp_path)) as running:
        wait_records(etcd, etcd_prefix, SYNCED)
        wait_until(lambda: fake_bar.watch_count() == 2, what="bar watched")
        fake_bar.hold()  # the watch falls behind: these events are never sent on it
        fake_bar.apply(endpoint_slice("myns", "myservice", ready=4, name="myservice-q8r3z"))
        fake_bar.delete("Service", "shop", "cart")
        fake_bar.expire_watches()  # ERROR 410 Expired on the open watches
        fake_bar.release()
        expected = {k: v for k, v in SYNCED.items() if k != "shop/cart/bar"}
        expected["myns/myservice/bar"] = {**SYNCED["myns/myservice/bar"], "ready": 4}
        wait_records(etcd, etcd_prefix, expected)
        assert running.metric("feddns_controller_watch_restarts_total",
                              cluster="bar", resource="services", reason="expired") >= 1


def test_410_status_on_a_new_watch_relists(etcd, etcd_prefix, foo, tmp_path):
    gone = FakeKube("baz", bookmark_interval=0.3, gone_as_status=True)
    gone.start()
    gone.apply(service("myns", "myservice", labels=LABEL, cluster_ip="10.56.62.6"))
    try:
        with RunningController(two_clusters(etcd, etcd_prefix, foo, gone, tmp_path)) as running:
            wait_until(lambda: "myns/myservice/baz" in records(etcd, etcd_prefix), what="baz synced")
            wait_until(lambda: gone.watch_count() == 2, what="baz watched")
            gone.hold()
            gone.apply(endpoint_slice("myns", "myservice", ready=2))
            gone.compact()
            gone.end_watches()  # the watch resumes from a compacted version: HTTP 410
            gone.release()
            wait_until(lambda: records(etcd, etcd_prefix).get("myns/myservice/baz", {}).get("ready") == 2,
                       what="the slice written after the relist")
            assert running.metric("feddns_controller_watch_restarts_total",
                                  cluster="baz", resource="endpointslices", reason="expired") >= 1
    finally:
        gone.close()


def test_restart_deletes_nothing_that_still_exists(etcd, etcd_prefix, foo, bar, tmp_path):
    raw = two_clusters(etcd, etcd_prefix, foo, bar, tmp_path)
    first = RunningController(raw).start()
    wait_records(etcd, etcd_prefix, SYNCED)
    first.stop()
    before = mod_revisions(etcd, etcd_prefix)
    foo.delete("Service", "myns", "myservice")  # while no controller runs

    with RunningController(raw) as second:
        wait_records(etcd, etcd_prefix, {k: v for k, v in SYNCED.items() if k != "myns/myservice/foo"})
        wait_until(lambda: second.controller.syncer.resynced, what="resync done")
        wait_until(lambda: second.metric("feddns_controller_etcd_deletes_total") == 1, what="one delete")
        after = mod_revisions(etcd, etcd_prefix)
        del before[f"{etcd_prefix}/myfederation/myns/myservice/foo"]
        assert after == before  # nothing else rewritten
        assert second.metric("feddns_controller_etcd_writes_total") == 0


def test_stale_records_of_removed_clusters_are_deleted(etcd, etcd_prefix, foo, bar, tmp_path):
    root = f"{etcd_prefix}/myfederation"
    etcd.put(f"{root}/myns/myservice/gone", {"clusterIP": "10.9.9.9"})
    etcd.put(f"{root}/_clusters/gone", {"zone": "z"})
    etcd.put(f"{root}/not/a/valid/key/at/all", "kept: not ours")
    with RunningController(two_clusters(etcd, etcd_prefix, foo, bar, tmp_path)):
        wait_until(lambda: set(etcd.get_prefix(root + "/")) == {f"{root}/{k}" for k in SYNCED}
                   | {f"{root}/not/a/valid/key/at/all"}, what="stale keys deleted, foreign key kept")


def test_etcd_outage_delays_writes_and_loses_nothing(private_etcd, etcd_prefix, foo, bar, tmp_path):
    with RunningController(two_clusters(private_etcd, etcd_prefix, foo, bar, tmp_path)) as running:
        wait_records(private_etcd, etcd_prefix, SYNCED)
        private_etcd.stop()
        foo.apply(service("myns", "during", labels=LABEL, cluster_ip="10.0.3.88"))
        bar.apply(endpoint_slice("myns", "myservice", ready=0, name="myservice-q8r3z"))
        wait_until(lambda: running.metric("feddns_controller_etcd_errors_total") >= 1
                   or not running.is_leader, what="the outage noticed")
        private_etcd.start()
        expected = dict(SYNCED)
        expected["myns/during/foo"] = {"clusterIP": "10.0.3.88", "clusterIPs": ["10.0.3.88"],
                                       "ports": [{"name": "http", "protocol": "TCP", "port": 80}], "ready": 0}
        expected["myns/myservice/bar"] = {**SYNCED["myns/myservice/bar"], "ready": 0}
        wait_records(private_etcd, etcd_prefix, expected, timeout=30)


def test_a_cluster_unreachable_past_stale_after_is_marked_stale_until_it_answers(etcd, etcd_prefix, foo, fake_bar,
                                                                                  tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    raw = two_clusters(etcd, etcd_prefix, foo, fake_bar, tmp_path)
    raw["clusters"][1].update(staleAfterSeconds=1, staleAction="drop")
    expected = {**SYNCED, "_clusters/bar": {**SYNCED["_clusters/bar"], "staleAction": "drop"}}
    with RunningController(raw) as running:
        wait_records(etcd, etcd_prefix, expected)
        fake_bar.stop()
        stopped = time.monotonic()
        wait_until(lambda: records(etcd, etcd_prefix)["_clusters/bar"].get("stale") is True, timeout=10,
                   what="bar's record marked stale")
        assert time.monotonic() - stopped >= 1
        assert running.metric("feddns_controller_cluster_stale", cluster="bar") == 1
        assert running.metric("feddns_controller_cluster_stale", cluster="foo") == 0
        assert {k: v for k, v in records(etcd, etcd_prefix).items() if k != "_clusters/bar"} == {
            k: v for k, v in expected.items() if k != "_clusters/bar"}  # its shards are kept, marked by the record
        assert re.search(r"cluster bar unreachable for \d+s \(staleAfterSeconds 1\): its shards are marked stale "
                         r"\(staleAction drop\)", caplog.text)

        fake_bar.start()
        wait_records(etcd, etcd_prefix, expected)
        assert running.metric("feddns_controller_cluster_stale", cluster="bar") == 0
        wait_until(lambda: "cluster bar: reachable again; its shards are no longer stale" in caplog.text,
                   what="the recovery logged")
    assert caplog.text.count("its shards are marked stale") == 1


def test_a_task_that_ignores_its_cancellation_does_not_hang_the_stop(caplog):
    """A gRPC call can swallow its task's cancellation; the controller's stop waits a bounded
    time for it, says which task is still running, and goes on."""
    from controller import app

    async def scenario() -> tuple[bool, float]:
        release = asyncio.Event()

        async def stubborn() -> None:
            while not release.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await release.wait()

        task = asyncio.create_task(stubborn(), name="stubborn")
        await asyncio.sleep(0)
        task.cancel()
        started = time.monotonic()
        stopped = await app._stopped_within([task], 0.3)
        waited = time.monotonic() - started
        release.set()
        await task
        return stopped, waited

    with caplog.at_level(logging.WARNING, logger="controller.app"):
        stopped, waited = asyncio.run(scenario())
    assert not stopped
    assert 0.3 <= waited < 2
    assert [r.getMessage() for r in caplog.records] == ["stopping: stubborn still running 0.3 s after cancellation"]
