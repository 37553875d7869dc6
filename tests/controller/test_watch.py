"""The list/watch loop of one resource (controller.watch.ResourceWatch) against the fake API server.

FakeKube, because each case needs what a real kube-apiserver does not show on demand: its request log
(``requests``: the pages a list took), the count of open watches (``watch_count()``: the loop is watching
before a change is made), errors on demand (``fail_next()``: 503s, a 404 of an absent resource) and watches
ended by the server (``end_watches()``). The whole controller against real servers is in test_controller.py
and test_real_cluster.py."""

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from controller import watch
from controller.config import ClusterConfig
from controller.metrics import Metrics
from feddns.errors import ConfigError
from harness.objects import service
from harness.ports import wait_until
from tests.controller.harness import FAST_WATCH
from tests.support.fakekube import FakeKube


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


@pytest.fixture
def reflect(fake: FakeKube, tmp_path: Path) -> Iterator[Any]:
    started: list[watch.ResourceWatch] = []
    kubeconfig = fake.write_kubeconfig(str(tmp_path / "t.kubeconfig"))
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


def test_a_list_of_many_pages_arrives_whole(fake, reflect):
    for i in range(1203):
        fake.apply(service("ns", f"s{i:04d}"))
    _, sink, _ = reflect()
    wait_until(lambda: sink.kinds()[:1] == ["listed"], what="the list")
    assert sink.calls[0][1] == [f"s{i:04d}" for i in range(1203)]
    pages = [q for path, q in fake.requests if path == "/api/v1/services" and q.get("watch") != "true"]
    assert len(pages) == 3 and all(q["limit"] == str(watch.PAGE_SIZE) for q in pages)


def test_events_follow_the_list_with_the_label_selector(fake, reflect):
    _, sink, _ = reflect(label_selector="app=x")
    wait_until(lambda: fake.watch_count("services") == 1, what="watching")
    fake.apply(service("ns", "in", labels={"app": "x"}))
    fake.apply(service("ns", "out"))
    fake.delete("Service", "ns", "in")
    wait_until(lambda: sink.calls == [("listed", []), ("ADDED", "in"), ("DELETED", "in")], what="events")


def test_server_errors_back_off_and_list_again(fake, reflect):
    fake.fail_next(503, times=2)
    _, sink, metric = reflect()
    wait_until(lambda: "listed" in sink.kinds(), what="a list after the failures")
    assert sink.kinds()[:2] == ["failed", "failed"] and "HTTP 503" in sink.calls[0][1]
    assert metric("feddns_controller_cluster_list_failures_total", cluster="t") == 2


def test_a_watch_closed_by_the_server_resumes_without_relisting(fake, reflect):
    _, sink, metric = reflect()
    wait_until(lambda: fake.watch_count() == 1, what="watching")
    fake.end_watches()
    wait_until(lambda: metric("feddns_controller_watch_restarts_total", cluster="t", resource="services",
                              reason="closed") == 1,
               what="restart counted")
    wait_until(lambda: fake.watch_count() == 1, what="watching again")
    fake.apply(service("ns", "a"))
    wait_until(lambda: sink.kinds() == ["listed", "ADDED"], what="the event, with no second list")


def test_an_absent_optional_resource_counts_as_empty(fake, reflect):
    fake.fail_next(404)
    _, sink, metric = reflect("serviceexports", optional=True)
    wait_until(lambda: sink.calls[:1] == [("listed", [])], what="an empty list")
    assert metric("feddns_controller_cluster_list_failures_total", cluster="t") == 0


def test_stop_ends_a_blocked_watch_at_once(fake, reflect):
    watcher, _, _ = reflect()
    wait_until(lambda: fake.watch_count() == 1, what="watching")
    started = time.monotonic()
    watcher.stop()
    assert time.monotonic() - started < 1.0
    assert not watcher.alive


def test_api_connections_have_tcp_keepalive(tmp_path):
    """A peer that vanishes without a FIN (a black hole) ends the connection after
    15 s + 3 x 5 s of silence, not at the kernel's default of two hours."""
    import socket

    fake = FakeKube("k")
    try:
        client = watch.api_client(ClusterConfig("k", kubeconfig=fake.write_kubeconfig(str(tmp_path / "k.kubeconfig"))))
    finally:
        fake.close()
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
