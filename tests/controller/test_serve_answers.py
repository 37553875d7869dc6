"""What the controller writes is what ``feddns serve`` answers (docs/reference.md sections 1 and 2)."""

import pytest

from harness.objects import endpoint_slice, service
from harness.ports import wait_until
from harness.serve import ServeProcess
from tests.controller.harness import LABEL, RunningController
from tests.controller.test_controller import two_clusters

QNAME = "myservice.myns.myfederation.svc.federation."


@pytest.fixture
def serve(etcd, etcd_prefix, foo, bar, tmp_path):
    server = ServeProcess(etcd_url=etcd.url, prefix=etcd_prefix)
    server.start()
    try:
        with RunningController(two_clusters(etcd, etcd_prefix, foo, bar, tmp_path)):
            yield server
    finally:
        server.stop()


def wait_answer(serve: ServeProcess, qname: str, wanted: list[str], cluster: str | None = None,
                ordered: bool = True) -> None:
    """Wait until ``qname`` asked from ``cluster`` answers ``wanted`` (in order, or as a set)."""
    def check() -> bool:
        got = serve.addresses(qname, cluster=cluster)
        return got == wanted if ordered else sorted(got) == sorted(wanted)
    wait_until(check, timeout=10, interval=0.05, what=f"{qname} from {cluster} answering {wanted}")


def test_create_update_delete_show_in_answers(serve, foo, bar):
    # foo and bar share region us-central1: from foo, foo's clusterIP, then bar's externalIP.
    wait_answer(serve, QNAME, ["10.0.3.64", "104.32.64.130"], cluster="foo")
    wait_answer(serve, QNAME, ["10.0.4.20", "104.32.64.128"], cluster="bar")
    wait_answer(serve, QNAME, ["104.32.64.128", "104.32.64.130"], ordered=False)

    moved = bar.get("Service", "myns", "myservice")
    moved["status"]["loadBalancer"]["ingress"] = [{"ip": "104.32.64.150"}]
    bar.apply(moved)
    wait_answer(serve, QNAME, ["10.0.3.64", "104.32.64.150"], cluster="foo")

    foo.apply(service("myns", "newservice", labels=LABEL, cluster_ip="10.0.3.65"))
    foo.apply(endpoint_slice("myns", "newservice", ready=1))
    wait_answer(serve, "newservice.myns.myfederation.svc.federation.", ["10.0.3.65"], cluster="foo")

    bar.delete("Service", "myns", "myservice")
    wait_answer(serve, QNAME, ["10.0.3.64"], cluster="foo")
    wait_answer(serve, QNAME, ["104.32.64.128"], cluster="bar")


def test_readiness_zero_removes_the_shard_from_answers(serve, foo):
    wait_answer(serve, QNAME, ["10.0.3.64", "104.32.64.130"], cluster="foo")
    foo.apply(endpoint_slice("myns", "myservice", ready=0, not_ready=3, name="myservice-x7k2p"))
    wait_answer(serve, QNAME, ["104.32.64.130"], cluster="foo")
    wait_answer(serve, QNAME, ["104.32.64.130"])
    assert serve.addresses("foo." + QNAME, cluster="foo") == ["10.0.3.64"]  # C.<svc>: whatever its ready count
    foo.apply(endpoint_slice("myns", "myservice", ready=1, name="myservice-x7k2p"))
    wait_answer(serve, QNAME, ["10.0.3.64", "104.32.64.130"], cluster="foo")
