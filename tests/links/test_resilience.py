"""`feddns links` under attack and outage: floods of links and pods, a silent DNS, an API server that goes away.

The API servers are real kube-apiservers (the session's foo; one of the test's own that it stops and
starts), but for the fake one (tests/support/fakekube.py) of
:func:`test_an_expired_watch_lists_again_and_misses_no_change`: it ends the open Service watch with
``410 Gone`` at the moment the test chooses and counts the watches opened, which a real one cannot
be made to do on demand.
"""

import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.etcd import EtcdServer
from harness.kubecluster import KubeCluster
from harness.objects import service
from harness.ports import wait_until
from links.shards import connector
from tests.links.support import LABEL, LinksProcess, Pki, env, pod
from tests.support.fakekube import FakeKube

LINKS = "links.feddns.io/services"


def test_a_pod_with_too_many_links_is_cut_to_64_and_answered_in_time(webhook: LinksProcess):
    annotation = ", ".join(f"L{i}=svc{i}.data.myfederation" for i in range(100))  # none exists
    started = time.monotonic()
    reply = webhook.review(pod(annotations={LINKS: annotation}))
    assert time.monotonic() - started < 4.5
    assert not reply.allowed
    assert reply.warnings == ["feddns links: the pod has 100 links; only the first 64 are used"]
    message = reply.response["status"]["message"]
    assert "link L63 (annotation)" in message and "link L64 " not in message


@pytest.fixture
def silent_webhook(pki: Pki, kubeconfig: str) -> Iterator[LinksProcess]:
    """A webhook whose cluster DNS takes every question and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        process = LinksProcess(pki, kubeconfig=kubeconfig, resolver=f"127.0.0.1:{silent.getsockname()[1]}").start()
        yield process
        assert process.stop() == 0, process.lines[-20:]


def test_a_flood_of_pods_with_many_links_each_is_answered_within_the_deadline(silent_webhook: LinksProcess):
    annotation = ", ".join(f"L{i}=svc{i}.data.myfederation" for i in range(64))

    def one(index: int) -> tuple[float, bool, list[str]]:
        started = time.monotonic()
        reply = silent_webhook.review(pod(f"p{index}", annotations={LINKS: annotation}))
        return time.monotonic() - started, reply.allowed, reply.warnings

    with ThreadPoolExecutor(max_workers=24) as pool:
        results = list(pool.map(one, range(48)))  # 3,072 questions to a DNS that never answers
    for elapsed, allowed, warnings in results:
        assert elapsed < 4.5, f"a review took {elapsed:.1f} s: the API server would have given up"
        assert allowed and len(warnings) == 15  # 64 unknowns, cut to the API server's limit
        assert warnings[0].endswith("(no answer within 2 s); admitted")
    assert silent_webhook.review(pod()).allowed  # and it still answers


def test_api_server_down_at_start_then_back(pki: Pki, kube_etcd: EtcdServer) -> None:
    """A kube-apiserver of the test's own (the session's is shared by other tests): started after the
    webhook, then killed and started again on its port, with its data."""
    late = KubeCluster("late", kube_etcd.url)
    try:
        process = LinksProcess(pki, kubeconfig=late.kubeconfig, resolver="127.0.0.1:9").start(wait_for_shards=False)
        try:
            submitted = pod(annotations={LINKS: "DB=postgres.data.myfederation?required=false"})
            reply = process.review(submitted)  # not listed yet: the host only, and a warning saying why
            assert env(reply.applied(submitted)) == [
                ("DB_SERVICE_HOST", "postgres.data.myfederation.svc.federation.")]
            assert reply.warnings == [("link DB: the local shard's ports are not known yet (Services not listed); "
                                      "only DB_SERVICE_HOST was injected")]
            process.wait_for_log("Kubernetes API: .*retrying")
            late.start()
            process.wait_for_log(r"listed 0 Services labelled", timeout=60)
            late.apply(service("data", "postgres", labels=LABEL, ports=[("sql", "TCP", 5432)]))
            wait_until(lambda: len(env(process.review(submitted).applied(submitted))) == 3, timeout=15,
                       what="the Service made once the API server was up")

            mark = len(process.lines)
            late.child.kill()  # an outage after the list (a crash: a clean stop waits on the open watch)
            process.wait_for_log("Kubernetes API: .*keeping 1 known shards", start=mark)
            assert len(env(process.review(submitted).applied(submitted))) == 3
            late.start()
            process.wait_for_log(r"listed 1 Services labelled", start=mark, timeout=60)
            failures = [line for line in process.lines[mark:] if "Kubernetes API:" in line and "retrying" in line]
            assert len(failures) == 1, failures  # the outage is logged once, not once per retry
        finally:
            assert process.stop() == 0
    finally:
        late.close()


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    """The fake API server, empty: it sends ``410 Gone`` to open watches when told (``expire_watches``)."""
    fake = FakeKube("foo", bookmark_interval=0.3)
    fake.start()
    yield fake
    fake.close()


def test_an_expired_watch_lists_again_and_misses_no_change(pki: Pki, fake: FakeKube, tmp_path: Path) -> None:
    opened = fake.watches_opened("services")
    kubeconfig = fake.write_kubeconfig(str(tmp_path / "foo.kubeconfig"))
    process = LinksProcess(pki, kubeconfig=kubeconfig, resolver="127.0.0.1:9").start()
    try:
        submitted = pod(annotations={LINKS: "K=kafka.data.myfederation?required=false"})
        # a watch opened after the expiry would start from the new version and never see a 410
        wait_until(lambda: fake.watches_opened("services") > opened, timeout=15, what="this process's Service watch")
        fake.expire_watches()  # 410 Gone: everything before now is forgotten
        fake.apply(service("data", "kafka", labels=LABEL, ports=[("broker", "TCP", 9092)]))
        wait_until(lambda: len(env(process.review(submitted).applied(submitted))) == 3, timeout=15,
                   what="the Service made after the 410")
        process.wait_for_log("expired")
    finally:
        assert process.stop() == 0


def test_the_api_connections_probe_a_silent_peer_with_tcp_keepalive(kubeconfig: str) -> None:
    """A Service watch lasts 5 minutes; an API server that vanishes without a FIN is noticed
    after 15 s + 3 x 5 s of keep-alive probes, as in the controller, not at the watch's end."""
    client = connector(kubeconfig, None)()
    options = client.rest_client.pool_manager.connection_pool_kw["socket_options"]
    client.close()
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options
    assert (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 15) in options
    assert (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5) in options
    assert (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3) in options
