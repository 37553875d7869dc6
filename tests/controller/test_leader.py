"""Several replicas: one leader writes; a deposed leader cannot; a new one takes over within the lease TTL."""

import asyncio
import logging
import time

import pytest

from controller import etcdlink
from controller.leader import Elector, election_key
from feddns.etcd.endpoints import EtcdEndpoints
from harness.controller import ControllerProcess
from harness.objects import service
from harness.ports import wait_until
from tests.controller.harness import LABEL, RunningController, records, write_config
from tests.controller.test_controller import SYNCED, RecordingPublisher, two_clusters, wait_records


def test_a_deposed_leader_cannot_write(etcd, etcd_prefix):
    """The guard of every write is the election key's create revision: once another
    replica holds the key, the old leader's transactions fail and change nothing."""
    key = election_key(etcd_prefix, "myfederation")
    target = f"{etcd_prefix}/myfederation/myns/myservice/foo"

    async def scenario() -> None:
        first = Elector(etcdlink.EtcdLink(EtcdEndpoints([etcd.url])), key, 5, lambda _: None, name="first")
        second = Elector(etcdlink.EtcdLink(EtcdEndpoints([etcd.url])), key, 5, lambda _: None, name="second")
        first_task = asyncio.create_task(first.run())
        try:
            await _until(lambda: first.is_leader)
            old_guard = first.guard()
            await etcdlink.commit(first.link.client, old_guard, [etcdlink.put(target, b'{"ready":1}')])
            etcd.delete(key.decode())  # first's key is gone (as when its lease expired)
            second_task = asyncio.create_task(second.run())
            await _until(lambda: second.is_leader)
            with pytest.raises(etcdlink.NotLeader):
                await etcdlink.commit(first.link.client, old_guard, [etcdlink.put(target, b'{"ready":9}')])
            await etcdlink.commit(second.link.client, second.guard(), [etcdlink.put(target, b'{"ready":2}')])
            await _until(lambda: not first.is_leader)  # it notices at its next keep-alive
            await _stop(second, second_task)
            await second.resign()
            await second.link.close()
        finally:
            await _stop(first, first_task)
            await first.link.close()

    asyncio.run(scenario())
    assert etcd.get_prefix(target) == {target: '{"ready":2}'}


async def _stop(elector: Elector, task: asyncio.Task) -> None:
    """Stop an elector as the controller's stop does: asked first (its calls in flight finish),
    cancelled only when it has not ended in time."""
    elector.stop()
    _, pending = await asyncio.wait([task], timeout=5)
    if pending:
        task.cancel()
        _, pending = await asyncio.wait([task], timeout=5)
    if pending:
        await elector.link.close()
        await asyncio.wait([task], timeout=5)
    assert task.done(), "the elector did not stop"


async def _until(condition, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


def test_two_replicas_only_the_leader_writes(etcd, etcd_prefix, foo, bar, tmp_path):
    raw = two_clusters(etcd, etcd_prefix, foo, bar, tmp_path)
    publishers = {"a": RecordingPublisher(), "b": RecordingPublisher()}
    replicas = [RunningController(raw, name=name, publisher=publishers[name]).start() for name in "ab"]
    try:
        wait_until(lambda: sum(r.is_leader for r in replicas) == 1, what="one leader")
        leader, follower = sorted(replicas, key=lambda r: not r.is_leader)
        wait_records(etcd, etcd_prefix, SYNCED)
        foo.apply(service("myns", "next", labels=LABEL, cluster_ip="10.0.3.21"))
        wait_until(lambda: "myns/next/foo" in records(etcd, etcd_prefix), what="change written")
        assert leader.metric("feddns_controller_etcd_writes_total") > 0
        assert follower.metric("feddns_controller_etcd_writes_total") == 0
        assert follower.metric("feddns_controller_leader") == 0
        assert publishers[follower.controller.elector.name].calls == []  # a follower neither resyncs nor publishes
        assert publishers[leader.controller.elector.name].calls[0][0] == "resync"

        leader.stop()  # a clean stop revokes the lease: the follower takes over at once
        wait_until(lambda: follower.is_leader, timeout=2, what="the follower leading")
        bar.apply(service("myns", "after", labels=LABEL, cluster_ip="10.0.4.21"))
        wait_until(lambda: "myns/after/bar" in records(etcd, etcd_prefix), what="the new leader writing")
    finally:
        for replica in replicas:
            replica.stop()


def test_a_crashed_leader_is_replaced_within_the_lease_ttl(etcd, etcd_prefix, foo, bar, tmp_path):
    path = write_config(tmp_path / "controller.yaml", two_clusters(etcd, etcd_prefix, foo, bar, tmp_path))
    replicas = [ControllerProcess(path, tmp_path / f"replica{i}.log").start() for i in range(2)]
    try:
        wait_until(lambda: sum(r.metric("feddns_controller_leader") for r in replicas) == 1,
                   timeout=10, what="one leader")
        leader, follower = sorted(replicas, key=lambda r: -r.metric("feddns_controller_leader"))
        wait_records(etcd, etcd_prefix, SYNCED)
        assert follower.metric("feddns_controller_etcd_writes_total") == 0

        leader.kill()  # no lease revoked: the follower must wait for it to expire
        killed = time.monotonic()
        wait_until(lambda: follower.metric("feddns_controller_leader") == 1, timeout=10, interval=0.05,
                   what="the follower leading")
        takeover = time.monotonic() - killed
        assert takeover <= 2 + 1.0, f"takeover took {takeover:.2f}s with a 2 s lease"
        foo.apply(service("myns", "after", labels=LABEL, cluster_ip="10.0.3.22"))
        wait_until(lambda: "myns/after/foo" in records(etcd, etcd_prefix), what="the new leader writing")
    finally:
        for replica in replicas:
            if replica.proc is not None and replica.proc.poll() is None:
                assert replica.terminate() == 0, replica.log()


def test_a_follower_says_once_whom_it_follows(etcd, etcd_prefix, foo, bar, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    caplog.set_level(logging.DEBUG, logger="controller.leader")
    raw = two_clusters(etcd, etcd_prefix, foo, bar, tmp_path)
    with RunningController(raw, name="first") as first:
        wait_until(lambda: first.is_leader, what="first leads")
        with RunningController(raw, name="second"):
            wait_until(lambda: "following first" in caplog.text, what="the follower says so")
            # its watch of the election key times out (a lease term) and it looks again: no second line
            wait_until(lambda: "first still leads; waiting" in caplog.text, timeout=10, what="a second look")
    following = [r.getMessage() for r in caplog.records if r.getMessage().startswith("following")]
    assert len(following) == 1 and following[0].startswith("following first (leader since revision "), following
