"""The SkyDNS etcd goes away: every call answers 503 with a reason, nothing is written,
and the endpoint works again as soon as etcd is back (docs/reference.md section 5)."""

import signal
import time

import pytest

from harness.ports import free_port, wait_until
from harness.stubzone import StubzoneProcess, skydns_args


@pytest.mark.parametrize("api", ["v2", "v3"])
def test_etcd_down_gives_503_and_writes_nothing(pki, private_etcd, api):
    keys = private_etcd.v2_leaves if api == "v2" else private_etcd.get_prefix
    with StubzoneProcess(pki, *skydns_args(private_etcd.url, "/skydns", "--skydns-etcd-api", api)) as server:
        assert server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.1", "192.0.2.2"]}).status == 200
        before = keys("/skydns/")
        private_etcd.stop()
        for method, path in (("POST", "/federations/fed"), ("POST", "/federations/new"), ("GET", "/federations/fed"),
                             ("GET", "/federations"), ("DELETE", "/federations/fed"), ("GET", "/healthz")):
            answer = server.request(method, path, {"nameservers": ["198.51.100.1"]})
            assert answer.status == 503, (method, path, answer)
            assert answer.body["error"].startswith("etcd cannot be reached: ")
            assert answer.body["error"].endswith("nothing was changed" + (
                f"; {method} is idempotent, so retry it" if method != "GET" else ""))
            assert answer.body["mayHaveApplied"] is False
            assert answer.headers["Retry-After"] == "1"
            server.wait_for_log(rf"{method} {path} .*status=503 reason=\"etcd cannot be reached")
        private_etcd.start()
        wait_until(lambda: server.request("GET", "/healthz").status == 200, timeout=10, what="healthz 200")
        assert keys("/skydns/") == before
        after = server.request("POST", "/federations/fed", {"nameservers": ["198.51.100.1"]})
        assert after.status == 200
        assert list(keys("/skydns/")) == ["/skydns/local/cluster/dns/stub/federation/svc/fed/ns1"]


@pytest.mark.parametrize("api", ["v2", "v3"])
def test_second_etcd_endpoint_is_used_when_the_first_is_down(pki, etcd, etcd_prefix, api):
    dead = f"http://127.0.0.1:{free_port()}"
    keys = etcd.v2_leaves if api == "v2" else etcd.get_prefix
    with StubzoneProcess(pki, *skydns_args(dead, etcd_prefix, "--etcd", etcd.url, "--skydns-etcd-api", api)) as server:
        answer = server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.1"]})
        assert answer.status == 200, answer
        assert list(keys(etcd_prefix)) == [f"{etcd_prefix}/local/cluster/dns/stub/federation/svc/fed/ns1"]


@pytest.mark.parametrize("api", ["v2", "v3"])
def test_etcd_frozen_answers_503_within_the_timeout_and_recovers(pki, private_etcd, api):
    """etcd stopped with SIGSTOP accepts connections and never answers: the deadline ends each call."""
    with StubzoneProcess(pki, *skydns_args(private_etcd.url, "/skydns", "--skydns-etcd-api", api)) as server:
        assert server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.1"]}).status == 200
        private_etcd.proc.send_signal(signal.SIGSTOP)
        try:
            start = time.monotonic()
            answer = server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.2"]})
            elapsed = time.monotonic() - start
        finally:
            private_etcd.proc.send_signal(signal.SIGCONT)
        assert answer.status == 503, answer
        assert answer.body["mayHaveApplied"] is False  # it timed out reading, before any write
        assert elapsed < 2 * 3 + 3  # --backend-timeout 2, a few calls at most, plus slack for a loaded machine
        wait_until(lambda: server.request("GET", "/healthz").status == 200, timeout=15, what="healthz 200")
        assert server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.2"]}).status == 200
        assert server.request("GET", "/federations/fed").body["nameservers"] == ["192.0.2.2"]
