"""What every backend does (docs/reference.md section 5), against the real store behind it.

coredns and kube-dns: the session's real kube-apiserver (a ConfigMap in a namespace of the test's
own; stopped and started for the outage tests);
skydns: a real etcd 3.4, v2 and v3 key spaces; unbound: a real unbound
programmed through unbound-control. Each test reads the store directly
(tests/stubzone/stores.py), never through the endpoint alone.
"""

import threading
from collections.abc import Iterator

import pytest

from harness.ports import wait_until
from harness.stubzone import StubzoneProcess
from tests.stubzone.stores import BACKENDS, Store, make_store

FIRST = ["192.0.2.1", "192.0.2.2:5353", "[2001:db8::1]:5353"]
FIRST_KUBE_DNS = ["192.0.2.1", "192.0.2.2:5353", "2001:db8::1"]
"""kube-dns takes an IPv6 nameserver on port 53 only (tests/stubzone/test_configmaps.py)."""
SECOND = ["198.51.100.7"]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:
    made = make_store(request.param, tmp_path, request)
    yield made
    made.close()


def first_list(store: Store) -> list[str]:
    """The first list of nameservers posted: IPv4 and IPv6 with and without a port, as the backend takes them."""
    return FIRST_KUBE_DNS if store.name == "kube-dns" else FIRST


def post(server: StubzoneProcess, federation: str, nameservers: list[str]) -> int:
    answer = server.request("POST", f"/federations/{federation}", {"nameservers": nameservers})
    assert answer.status == 200, answer
    return answer.status


def test_post_get_list_delete_read_back_from_the_store(pki, store: Store):
    with StubzoneProcess(pki, *store.args()) as server:
        answer = server.request("POST", "/federations/myfederation", {"nameservers": first_list(store)})
        assert answer.status == 200, answer
        assert answer.body == {"federation": "myfederation", "stubDomain": "myfederation.svc.federation.",
                               "nameservers": first_list(store)}
        assert store.stored("myfederation") == first_list(store)
        assert server.request("GET", "/federations/myfederation").body == answer.body
        post(server, "other", SECOND)
        listed = server.request("GET", "/federations").body["federations"]
        assert [(zone["federation"], zone["nameservers"]) for zone in listed] == [
            ("myfederation", first_list(store)), ("other", SECOND)]
        deleted = server.request("DELETE", "/federations/myfederation")
        assert deleted.status == 200 and deleted.body["nameservers"] == first_list(store)
        assert store.stored("myfederation") is None
        assert store.stored("other") == SECOND
        assert server.request("GET", "/federations/myfederation").status == 404
        assert server.request("DELETE", "/federations/myfederation").status == 404
        health = server.request("GET", "/healthz")
        assert health.status == 200 and health.body["backend"] == store.name.split("-v")[0]


def test_post_is_idempotent(pki, store: Store):
    with StubzoneProcess(pki, *store.args()) as server:
        post(server, "same", first_list(store))
        version = store.version()
        log_start = len(server.lines)
        post(server, "same", first_list(store))
        assert store.version() == version
        server.wait_for_log(r"POST /federations/same .*status=200 .*\(unchanged\)", start=log_start)
        post(server, "same", SECOND)
        assert store.version() != version and store.stored("same") == SECOND


def test_get_reads_the_store_not_a_copy(pki, store: Store):
    """A second endpoint's change shows at once in the first one's GET."""
    with StubzoneProcess(pki, *store.args()) as first, StubzoneProcess(pki, *store.args()) as second:
        post(first, "fed", first_list(store))
        post(second, "fed", SECOND)
        assert first.request("GET", "/federations/fed").body["nameservers"] == SECOND
        assert second.request("DELETE", "/federations/fed").status == 200
        assert first.request("GET", "/federations/fed").status == 404


def test_state_survives_restarts_of_the_endpoint_and_the_cluster_dns(pki, store: Store):
    with StubzoneProcess(pki, *store.args()) as server:
        post(server, "kept", first_list(store))
        store.stop()
        store.start()
        server.restart()
        assert store.stored("kept") == first_list(store)
        answer = server.request("GET", "/federations/kept")
        assert answer.status == 200 and answer.body["nameservers"] == first_list(store)


def test_unreachable_store_gives_503_and_changes_nothing(pki, store: Store):
    with StubzoneProcess(pki, *store.args()) as server:
        post(server, "fed", first_list(store))
        store.stop()
        try:
            for method, path in (("POST", "/federations/fed"), ("POST", "/federations/new"),
                                 ("DELETE", "/federations/fed"), ("GET", "/federations"), ("GET", "/healthz")):
                answer = server.request(method, path, {"nameservers": SECOND})
                assert answer.status == 503, (method, answer)
                assert answer.body["mayHaveApplied"] is False, answer
                assert answer.body["error"].endswith("nothing was changed" + (
                    f"; {method} is idempotent, so retry it" if method != "GET" else ""))
        finally:
            store.start()
        assert store.stored("fed") == first_list(store)
        assert store.stored("new") is None
        wait_until(lambda: server.request("GET", "/healthz").status == 200, timeout=10, what="healthz 200")
        post(server, "fed", SECOND)
        assert store.stored("fed") == SECOND


def test_entries_the_endpoint_did_not_write_are_kept(pki, store: Store):
    with StubzoneProcess(pki, *store.args()) as server:
        post(server, "shared", first_list(store))
        store.add_foreign()
        post(server, "shared", SECOND)
        post(server, "another", first_list(store))
        assert server.request("DELETE", "/federations/another").status == 200
        assert store.foreign_kept()
        assert [zone["federation"] for zone in server.request("GET", "/federations").body["federations"]] == ["shared"]


def test_two_endpoint_processes_posting_at_once_lose_nothing(pki, store: Store):
    """Two replicas, 16 concurrent POSTs: every federation is stored, and the one both
    programmed holds exactly one of the lists they sent."""
    lists = {name: [f"192.0.2.{i}", f"198.51.100.{i}:5353"] for i, name in enumerate("abcdefgh", 1)}
    contested = [[f"203.0.113.{i}"] * 1 + [f"203.0.113.{i + 100}"] for i in range(1, 7)]
    # unbound reloads one POST at a time: on a loaded machine 8 queued ones can outlast the
    # default 5 s --backend-timeout, whose 503 is another test's subject, not this one's
    flags = [*store.args(), "--backend-timeout", "60"]
    with StubzoneProcess(pki, *flags) as one, StubzoneProcess(pki, *flags) as two:
        statuses: list[int] = []

        def send(server: StubzoneProcess, federation: str, nameservers: list[str]) -> None:
            body = {"nameservers": nameservers}
            statuses.append(server.request("POST", f"/federations/{federation}", body).status)

        jobs = [(one if i % 2 else two, name, ns) for i, (name, ns) in enumerate(lists.items())]
        jobs += [(one if i % 2 else two, "contested", ns) for i, ns in enumerate(contested)]
        threads = [threading.Thread(target=send, args=job) for job in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert statuses == [200] * len(jobs)
        for name, nameservers in lists.items():
            assert store.stored(name) == nameservers, name
        assert store.stored("contested") in contested
        listed = {zone["federation"] for zone in two.request("GET", "/federations").body["federations"]}
        assert listed == {*lists, "contested"}

