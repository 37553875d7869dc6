"""A cluster joins and leaves the federation by a change of the controller's config file, without a restart
(docs/operations.md, "Add a member cluster"): the controller reloads the file, watches the new cluster, and
its leader programs the new member's stub zone, as the design's cluster controller does ("Initial Setup");
removing the cluster deletes its stub zone and its shards. Real kube-apiservers, CoreDNS and stub-zone
endpoints (harness/chain.py)."""

import time
import uuid
from pathlib import Path

import pytest

from harness.chain import FEDERATION, QNAME, Chain
from harness.ports import wait_until
from tests.controller.harness import mod_revisions, records

JOIN_WITHIN = 10.0
"""Seconds from the config change to the new member answering its own shard first (docs/operations.md)."""


@pytest.fixture(scope="module")
def chain(etcd, kube_foo, kube_bar):
    running = Chain(etcd, {"foo": kube_foo, "bar": kube_bar}, f"/t{uuid.uuid4().hex[:12]}", ttl=1,
                    members=("foo",)).start()
    yield running
    running.stop()


def stub_zone(chain: Chain, cluster: str) -> list[str] | None:
    """The nameservers ``cluster``'s stub-zone endpoint holds for the federation (None: none)."""
    answer = chain.stubzones[cluster].request("GET", f"/federations/{FEDERATION}")
    return answer.body["nameservers"] if answer.status == 200 else None


def test_a_cluster_joins_and_leaves_by_a_config_change_without_a_restart(chain, etcd):
    pid = chain.controller.child.pid
    nameserver = f"127.0.0.1:{chain.serve.port}"
    assert stub_zone(chain, "foo") == [nameserver]
    assert stub_zone(chain, "bar") is None, "bar is not a member yet"
    foo_shard = f"{chain.prefix}/{FEDERATION}/myns/myservice/foo"
    revision = mod_revisions(etcd, chain.prefix)[foo_shard]

    began = time.monotonic()
    chain.set_members(("foo", "bar"))
    wait_until(lambda: "myns/myservice/bar" in records(etcd, chain.prefix), timeout=JOIN_WITHIN,
               what="bar's shard in etcd")
    wait_until(lambda: stub_zone(chain, "bar") == [nameserver], timeout=JOIN_WITHIN, what="bar's stub zone")
    chain.wait_for("bar", chain.expected("bar"), timeout=max(0.5, JOIN_WITHIN - (time.monotonic() - began)))
    joined_in = time.monotonic() - began
    chain.wait_for("foo", chain.expected("foo"))  # foo's pods now get bar's externalIP second
    assert chain.controller.child.pid == pid and chain.controller.child.running
    assert chain.controller.metric("feddns_controller_leader") == 1
    assert "stepping down" not in chain.controller.log()
    assert "config reloaded: 2 clusters (joined: bar; left: none" in chain.controller.log()
    print(f"bar joined in {joined_in:.1f} s")

    began = time.monotonic()
    chain.set_members(("foo",))
    wait_until(lambda: stub_zone(chain, "bar") is None, timeout=JOIN_WITHIN, what="bar's stub zone deleted")
    wait_until(lambda: not any(key.endswith("/bar") for key in records(etcd, chain.prefix)), timeout=JOIN_WITHIN,
               what="bar's shards and cluster record gone")
    chain.wait_for("foo", chain.expected("foo", members=("foo",)), timeout=JOIN_WITHIN)
    print(f"bar left in {time.monotonic() - began:.1f} s")
    assert mod_revisions(etcd, chain.prefix)[foo_shard] == revision, "foo's shard was rewritten"
    assert stub_zone(chain, "foo") == [nameserver]
    assert chain.coredns["foo"].addresses(QNAME) == chain.expected("foo", members=("foo",))
    assert chain.controller.child.pid == pid and "stepping down" not in chain.controller.log()


def test_a_config_that_does_not_load_is_refused_and_the_old_one_kept(chain):
    path = chain.directory / "controller.yaml"
    good = path.read_text()
    try:
        path.write_bytes(good.encode() + b"# caf\xe9\n")  # not UTF-8: refused, not fatal
        wait_until(lambda: chain.controller.metric("feddns_controller_config_file_stale") == 1, timeout=10,
                   what="the file that is not UTF-8 refused")
        assert chain.controller.child.running
        path.write_text(good + "clusters: []\n")  # a key given twice
        wait_until(lambda: "duplicate key 'clusters'" in chain.controller.log(), timeout=10,
                   what="the file with a key given twice refused")
        assert chain.controller.metric("feddns_controller_config_file_stale") == 1
        assert chain.answers("foo")["coredns"] == chain.expected("foo", members=chain.members)
    finally:
        path.write_text(good)
    wait_until(lambda: chain.controller.metric("feddns_controller_config_file_stale") == 0, timeout=10,
               what="the good file back in use")


def test_a_refused_config_is_tried_again_until_what_it_names_arrives(chain):
    """A kubelet may deliver the config naming a new cluster before that cluster's kubeconfig."""
    path = chain.directory / "controller.yaml"
    good = path.read_text()
    late = chain.directory / "late.kubeconfig"
    try:
        path.write_text(good.replace(chain._kubeconfigs["foo"], str(late)))
        wait_until(lambda: chain.controller.metric("feddns_controller_config_file_stale") == 1, timeout=10,
                   what="the config naming a missing kubeconfig refused")
        late.write_text(Path(chain._kubeconfigs["foo"]).read_text())
        wait_until(lambda: chain.controller.metric("feddns_controller_config_file_stale") == 0, timeout=10,
                   what="the same file applied once the kubeconfig is there")
        assert "watched anew: foo" in chain.controller.log()
        assert chain.controller.log().count(f"cannot read {late}") == 1, "refused once, not once a second"
        chain.wait_for("foo", chain.expected("foo", members=chain.members), timeout=20)
    finally:
        path.write_text(good)
