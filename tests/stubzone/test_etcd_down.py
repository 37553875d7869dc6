"""The SkyDNS etcd goes away: every call answers 503 with a reason, nothing is written,
and the endpoint works again as soon as etcd is back (CONTRACTS 5)."""

from tests.stubzone.support import StubzoneProcess
from tests.support.ports import free_port, wait_until


def test_etcd_down_gives_503_and_writes_nothing(pki, private_etcd):
    server = StubzoneProcess(pki, private_etcd.url, "/skydns")
    server.start()
    try:
        assert server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.1", "192.0.2.2"]}).status == 200
        before, revision = private_etcd.get_prefix("/skydns/"), private_etcd.revision()
        private_etcd.stop()
        for method, path in (("POST", "/federations/fed"), ("POST", "/federations/new"), ("GET", "/federations/fed"),
                             ("GET", "/federations"), ("DELETE", "/federations/fed"), ("GET", "/healthz")):
            answer = server.request(method, path, {"nameservers": ["198.51.100.1"]})
            assert answer.status == 503, (method, path, answer)
            assert answer.body["error"].startswith("etcd cannot be reached: ")
            server.wait_for_log(rf"{method} {path} .*status=503 reason=\"etcd cannot be reached")
        private_etcd.start()
        wait_until(lambda: server.request("GET", "/healthz").status == 200, timeout=10, what="healthz 200")
        assert private_etcd.get_prefix("/skydns/") == before
        assert private_etcd.revision() == revision
        after = server.request("POST", "/federations/fed", {"nameservers": ["198.51.100.1"]})
        assert after.status == 200
        assert list(private_etcd.get_prefix("/skydns/")) == ["/skydns/local/cluster/dns/stub/federation/svc/fed/ns1"]
    finally:
        assert server.stop() == 0


def test_second_etcd_endpoint_is_used_when_the_first_is_down(pki, etcd, etcd_prefix):
    dead = f"http://127.0.0.1:{free_port()}"
    server = StubzoneProcess(pki, dead, etcd_prefix, "--etcd", etcd.url)
    server.start()
    try:
        answer = server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.1"]})
        assert answer.status == 200, answer
        assert list(etcd.get_prefix(etcd_prefix)) == [f"{etcd_prefix}/local/cluster/dns/stub/federation/svc/fed/ns1"]
    finally:
        assert server.stop() == 0
