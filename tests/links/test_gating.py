"""Gating on existence through the cluster DNS: a real `feddns serve` behind a real unbound.

NXDOMAIN for a required link denies the pod with a message naming the link;
an existing name (with or without ready shards) admits it; SERVFAIL or no
answer admits it too, with a warning, within the gating deadline.
"""

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.ports import free_port, wait_until
from harness.serve import ServeProcess
from harness.unbound import UnboundResolver
from tests.links.support import STUB_ZONE, LinksProcess, Pki, env, pod

LINKS = "links.feddns.io/services"
WEBHOOK_TIMEOUT = 5.0
"""The API server's timeout for the webhook (timeoutSeconds in deploy/links/): every answer must beat it."""


def test_required_link_to_a_missing_service_denies_the_pod_naming_the_link(webhook: LinksProcess):
    reply = webhook.review(pod(annotations={LINKS: "DB=postgres.data.myfederation, Q=queue.data.myfederation"}))
    assert not reply.allowed
    assert "patch" not in reply.response
    status = reply.response["status"]
    assert status["code"] == 403
    assert "link Q (annotation): queue.data.myfederation.svc.federation. does not exist (NXDOMAIN)" in status["message"]
    assert "link DB" not in status["message"]
    assert f"denied: {status['message']}" in webhook.wait_for_log("denied")


def test_every_missing_required_link_is_named(webhook: LinksProcess):
    reply = webhook.review(pod(annotations={LINKS: "A=nope.data.myfederation, B=gone.other.myfederation"}))
    assert not reply.allowed
    assert "link A (annotation)" in reply.response["status"]["message"]
    assert "link B (annotation)" in reply.response["status"]["message"]


@pytest.mark.parametrize("link", [
    "DB=postgres.data.myfederation",
    "IDLE=idle.data.myfederation",                           # exists, no ready shard: NODATA, not NXDOMAIN
    "Q=queue.data.myfederation?required=false",              # missing, but not required
], ids=["exists", "exists-not-ready", "missing-not-required"])
def test_existing_or_optional_links_admit_the_pod(webhook: LinksProcess, link):
    submitted = pod(annotations={LINKS: link})
    reply = webhook.review(submitted)
    assert reply.allowed and reply.warnings == []
    prefix = link.split("=")[0]
    assert env(reply.applied(submitted))[0][0] == f"{prefix}_SERVICE_HOST"


def test_missing_service_created_later_is_admitted_then(webhook: LinksProcess, federated_dns: ServeProcess):
    """Existence is asked each time: once the service appears (and unbound's 1 s negative cache expires),
    the pod goes in."""
    submitted = pod(annotations={LINKS: "LATE=late.data.myfederation"})
    assert not webhook.review(submitted).allowed
    records = Path(federated_dns.args[federated_dns.args.index("--records") + 1])
    records.write_text(records.read_text() + "/myfederation/data/late/foo: {clusterIP: 10.0.3.99}\n")
    wait_until(lambda: webhook.review(submitted).allowed, timeout=15, interval=0.2, what="the new service admitted")


def _admitted_with_warning(process: LinksProcess, words: str) -> None:
    submitted = pod(annotations={LINKS: "DB=postgres.data.myfederation"})
    started = time.monotonic()
    reply = process.review(submitted)
    elapsed = time.monotonic() - started
    assert reply.allowed
    assert len(reply.warnings) == 1, reply.warnings
    warning = reply.warnings[0]
    assert "link DB: could not check that postgres.data.myfederation.svc.federation. exists" in warning
    assert words in warning and warning.endswith("admitted")
    assert env(reply.applied(submitted))[0] == ("DB_SERVICE_HOST", "postgres.data.myfederation.svc.federation.")
    assert elapsed < WEBHOOK_TIMEOUT - 0.5, f"answered after {elapsed:.1f} s"


@pytest.fixture
def unready_chain() -> Iterator[UnboundResolver]:
    """unbound in front of a `feddns serve` whose etcd is down: it answers SERVFAIL until its first load."""
    with ServeProcess(etcd_url=f"http://127.0.0.1:{free_port()}") as unready:
        resolver = UnboundResolver("foo", stub_zone=STUB_ZONE, stub_port=unready.port).start()
        yield resolver
        resolver.stop()


def test_servfail_from_a_federated_dns_that_is_not_ready_admits(pki: Pki, kubeconfig: str,
                                                                unready_chain: UnboundResolver):
    assert unready_chain.query("postgres.data.myfederation.svc.federation.").rcode() == 2  # SERVFAIL, as served
    process = LinksProcess(pki, kubeconfig=kubeconfig, resolver=f"127.0.0.1:{unready_chain.port}").start()
    try:
        _admitted_with_warning(process, "(SERVFAIL)")
    finally:
        assert process.stop() == 0


def test_cluster_dns_forwarding_to_a_dead_federated_dns_admits(pki: Pki, kubeconfig: str):
    resolver = UnboundResolver("foo", stub_zone=STUB_ZONE, stub_port=free_port()).start()
    process = LinksProcess(pki, kubeconfig=kubeconfig, resolver=f"127.0.0.1:{resolver.port}").start()
    try:
        # unbound gives up on the dead upstream with SERVFAIL, or the 2 s deadline comes first
        submitted = pod(annotations={LINKS: "DB=postgres.data.myfederation"})
        started = time.monotonic()
        reply = process.review(submitted)
        assert time.monotonic() - started < WEBHOOK_TIMEOUT - 0.5
        assert reply.allowed and reply.patch
        assert any(w for w in reply.warnings if "SERVFAIL" in w or "no answer within 2 s" in w), reply.warnings
    finally:
        assert process.stop() == 0
        resolver.stop()


def test_a_resolver_that_never_answers_admits_within_the_gating_timeout(pki: Pki, kubeconfig: str):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))  # takes queries, never answers
        process = LinksProcess(pki, "--gating-timeout", "1", kubeconfig=kubeconfig,
                               resolver=f"127.0.0.1:{silent.getsockname()[1]}").start()
        try:
            started = time.monotonic()
            _admitted_with_warning(process, "(no answer within 1 s)")
            assert time.monotonic() - started >= 0.9, "the deadline is the flag's"
        finally:
            assert process.stop() == 0
