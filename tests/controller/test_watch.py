"""The list/watch loop of one resource (controller.watch.ResourceWatch), against the session's real
kube-apiserver foo and, for what a real one does not show on demand, FakeKube (``reflect_fake``): its
request log (``requests``: the pages a list took), the count of open watches (``watch_count()``: the loop
is watching), errors on demand (``fail_next()``: 503s, a 404 of an absent resource) and watches ended by
the server (``end_watches()``)."""

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from controller import watch
from controller.config import ClusterConfig
from controller.metrics import Metrics
from feddns.errors import ConfigError
from harness.kubecluster import KubeCluster
from harness.objects import service
from harness.ports import wait_until
from tests.controller.harness import FAST_WATCH
from tests.support.fakekube import FakeKube
from tests.support.membercluster import TestObjects


class Recorder:
    """A Sink that keeps what it was given (called from the watch thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, Any]] = []

    def listed(self, resource: str, objects: list[Any]) -> None:
        with self.lock:
            self.calls.append(("listed", sorted(o["metadata"]["name"] for o in objects)))

    def event(self, resource: str, event_type: str, obj: Any) -> None:
        with self.lock:
            self.calls.append((event_type, obj["metadata"]["name"]))

    def failed(self, resource: str, error: str) -> None:
        with self.lock:
            self.calls.append(("failed", error))

    def kinds(self) -> list[str]:
        with self.lock:
            return [kind for kind, _ in self.calls]


def _watches(kubeconfig: str) -> Iterator[Any]:
    """``make(resource, **Target fields)``: a started ResourceWatch of cluster "t" at ``kubeconfig``, its
    Recorder and a metric reader; every watch made is stopped at the end."""
    started: list[watch.ResourceWatch] = []
    registry = CollectorRegistry()

    def make(resource: str = "services", **kwargs: Any) -> tuple[watch.ResourceWatch, Recorder, Any]:
        sink, metrics = Recorder(), Metrics(registry)
        cluster = ClusterConfig("t", kubeconfig=kubeconfig)
        target = watch.Target("t", resource, **kwargs)
        watcher = watch.ResourceWatch(target, lambda: watch.api_client(cluster), sink, metrics, timing=FAST_WATCH)
        watcher.start()
        started.append(watcher)
        return watcher, sink, lambda name, **labels: registry.get_sample_value(name, labels) or 0

    yield make
    for watcher in started:
        watcher.stop()


@pytest.fixture
def reflect(kube_foo: KubeCluster, tmp_path: Path) -> Iterator[Any]:
    """Watches of the session's real kube-apiserver foo."""
    yield from _watches(kube_foo.write_kubeconfig(tmp_path / "t.kubeconfig"))


@pytest.fixture
def reflect_fake(fake: FakeKube, tmp_path: Path) -> Iterator[Any]:
    """Watches of FakeKube ``fake``: for its request log, watch counts and faults."""
    yield from _watches(fake.write_kubeconfig(str(tmp_path / "t.kubeconfig")))


@pytest.fixture
def objects(kube_foo: KubeCluster) -> Iterator[TestObjects]:
    """What the test makes in foo, deleted after it."""
    made = TestObjects(kube_foo)
    yield made
    made.close()


def test_a_list_of_many_pages_arrives_whole(fake, reflect_fake):
    for i in range(1203):
        fake.apply(service("ns", f"s{i:04d}"))
    _, sink, _ = reflect_fake()
    wait_until(lambda: sink.kinds()[:1] == ["listed"], what="the list")
    assert sink.calls[0][1] == [f"s{i:04d}" for i in range(1203)]
    pages = [q for path, q in fake.requests if path == "/api/v1/services" and q.get("watch") != "true"]
    assert len(pages) == 3 and all(q["limit"] == str(watch.PAGE_SIZE) for q in pages)


def test_events_follow_the_list_with_the_label_selector(objects, reflect):
    namespace, app = f"t{uuid.uuid4().hex[:10]}", uuid.uuid4().hex  # names no other test's object has
    _, sink, _ = reflect(label_selector=f"app={app}")
    wait_until(lambda: sink.kinds()[:1] == ["listed"], what="the list")  # the watch starts from its version
    for made in (service(namespace, "in", labels={"app": app}), service(namespace, "out")):
        del made["status"]  # as a user creates one (its status is a second write, a MODIFIED event)
        objects.apply(made)
    objects.delete("Service", namespace, "in")
    wait_until(lambda: sink.calls == [("listed", []), ("ADDED", "in"), ("DELETED", "in")], what="events")


def test_server_errors_back_off_and_list_again(fake, reflect_fake):
    fake.fail_next(503, times=2)
    _, sink, metric = reflect_fake()
    wait_until(lambda: "listed" in sink.kinds(), what="a list after the failures")
    assert sink.kinds()[:2] == ["failed", "failed"] and "HTTP 503" in sink.calls[0][1]
    assert metric("feddns_controller_cluster_list_failures_total", cluster="t") == 2


def test_a_watch_closed_by_the_server_resumes_without_relisting(fake, reflect_fake):
    _, sink, metric = reflect_fake()
    wait_until(lambda: fake.watch_count() == 1, what="watching")
    fake.end_watches()
    wait_until(lambda: metric("feddns_controller_watch_restarts_total", cluster="t", resource="services",
                              reason="closed") == 1,
               what="restart counted")
    wait_until(lambda: fake.watch_count() == 1, what="watching again")
    fake.apply(service("ns", "a"))
    wait_until(lambda: sink.kinds() == ["listed", "ADDED"], what="the event, with no second list")


def test_an_absent_optional_resource_counts_as_empty(fake, reflect_fake):
    fake.fail_next(404)
    _, sink, metric = reflect_fake("serviceexports", optional=True)
    wait_until(lambda: sink.calls[:1] == [("listed", [])], what="an empty list")
    assert metric("feddns_controller_cluster_list_failures_total", cluster="t") == 0


def test_stop_ends_a_blocked_watch_at_once(fake, reflect_fake):
    watcher, _, _ = reflect_fake()
    wait_until(lambda: fake.watch_count() == 1, what="watching")
    started = time.monotonic()
    watcher.stop()
    assert time.monotonic() - started < 1.0
    assert not watcher.alive


def test_api_connections_have_tcp_keepalive(kube_foo, tmp_path):
    """A peer that vanishes without a FIN (a black hole) ends the connection after
    15 s + 3 x 5 s of silence, not at the kernel's default of two hours."""
    import socket

    client = watch.api_client(ClusterConfig("foo", kubeconfig=kube_foo.write_kubeconfig(tmp_path / "foo.kubeconfig")))
    options = client.rest_client.pool_manager.connection_pool_kw["socket_options"]
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options
    assert (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 15) in options
    assert (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3) in options
    client.close()


def test_a_kubeconfig_that_does_not_load_is_named_with_its_cluster(tmp_path: Path) -> None:
    """The resource watch logs this error on each retry: it must say which cluster and which file."""
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text("not: a kubeconfig\n")
    with pytest.raises(ConfigError, match=rf"^kubeconfig of cluster foo {bad}: "):
        watch.api_client(ClusterConfig("foo", kubeconfig=str(bad)))
