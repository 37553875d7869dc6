"""Federated-DNS backed by a real etcd: load, watch, outage, compaction, bad records."""

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request

import dns.rcode
import pytest

from harness.ports import wait_until
from harness.serve import ServeProcess

QNAME = "myservice.myns.myfederation.svc.federation."

# The design document's three keys ("DNS Record Creation") plus cluster records.
DESIGN_KEYS = {
    "myfederation/myns/myservice/foo": {"externalIP": "104.32.64.128", "clusterIP": "10.0.3.64"},
    "myfederation/myns/myservice/bar": {"externalIP": "104.32.64.130", "clusterIP": "10.0.4.20"},
    "myfederation/myns/myservice/baz": {"externalIP": "108.120.45.12", "clusterIP": "10.56.62.6"},
    "myfederation/_clusters/foo": {"zone": "us-central1-a", "region": "us-central1"},
    "myfederation/_clusters/bar": {"zone": "us-central1-b", "region": "us-central1"},
    "myfederation/_clusters/baz": {"zone": "europe-west1-b", "region": "europe-west1"},
}


def put_design_keys(etcd, prefix: str) -> None:
    for key, value in DESIGN_KEYS.items():
        etcd.put(f"{prefix}/{key}", value)


@pytest.fixture
def design_server(etcd, etcd_prefix):
    put_design_keys(etcd, etcd_prefix)
    with ServeProcess(etcd_url=etcd.url, prefix=etcd_prefix, extra_args=["--metrics", "127.0.0.1:0"]) as server:
        wait_until(lambda: server.addresses(QNAME), what="first load")
        yield server


def dig(port: int, *args: str) -> list[str]:
    out = subprocess.run(["dig", "@127.0.0.1", "-p", str(port), *args, "+short"],
                         capture_output=True, text=True, timeout=10, check=True)
    return out.stdout.split()


def test_dig_with_cluster_option_gets_own_clusterip_first(design_server):
    # the documented command: payload 666f6f is "foo"
    answer = dig(design_server.port, QNAME, "+ednsopt=65245:666f6f")
    assert answer[0] == "10.0.3.64"
    assert answer[1:] == ["104.32.64.130", "108.120.45.12"]  # bar shares foo's region, baz does not
    assert dig(design_server.port, QNAME, "+tcp", "+ednsopt=65245:626172")[0] == "10.0.4.20"


def test_external_client_gets_every_external_ip(design_server):
    assert sorted(dig(design_server.port, QNAME)) == ["104.32.64.128", "104.32.64.130", "108.120.45.12"]


def test_record_change_shows_within_a_second(design_server, etcd, etcd_prefix):
    service = f"{etcd_prefix}/myfederation/myns/myservice"

    def asked() -> list[str]:
        return design_server.addresses(QNAME, cluster="foo")

    etcd.put(f"{service}/baz", {"externalIP": "108.120.45.99", "clusterIP": "10.56.62.6"})
    wait_until(lambda: "108.120.45.99" in asked(), timeout=1, what="new externalIP")
    etcd.put(f"{service}/bar", {"externalIP": "104.32.64.130", "clusterIP": "10.0.4.20", "ready": 0})
    wait_until(lambda: "104.32.64.130" not in asked(), timeout=1, what="unready shard gone")
    etcd.delete(f"{service}/foo")
    wait_until(lambda: asked() == ["108.120.45.99"], timeout=1, what="deleted shard gone")


def test_new_service_appears_and_deleted_service_is_nxdomain(design_server, etcd, etcd_prefix):
    other = "other.myns.myfederation.svc.federation."
    assert design_server.query(other).rcode() == dns.rcode.NXDOMAIN
    etcd.put(f"{etcd_prefix}/myfederation/myns/other/foo", {"clusterIP": "10.0.9.9", "externalIP": "1.2.3.4"})
    wait_until(lambda: design_server.addresses(other, cluster="foo") == ["10.0.9.9"], timeout=1, what="new service")
    etcd.delete(f"{etcd_prefix}/myfederation/myns/other/", prefix=True)
    wait_until(lambda: design_server.query(other).rcode() == dns.rcode.NXDOMAIN, timeout=1, what="NXDOMAIN again")


@pytest.mark.parametrize("qname, key, value", [
    ("fresh.myns.myfederation.svc.federation.", "myfederation/myns/fresh/foo", {"clusterIP": "10.0.9.8"}),
    ("newns.myfederation.svc.federation.", "myfederation/newns/web/foo", {"clusterIP": "10.0.9.8"}),
    ("_whoami.newfed.svc.federation.", "newfed/_clusters/foo", {"zone": "z", "region": "r"}),
])
def test_a_name_put_below_a_parent_flooded_with_random_names_is_found(design_server, etcd, etcd_prefix, qname, key,
                                                                     value):
    """A flood of random names below one parent is answered NXDOMAIN from the parent's
    envelope (feddns.dns.cache, ``Cache.keep_parent_envelope``); a name put below that
    parent (a service, a namespace, a federation's _whoami) is found once the watch
    brings it, not answered NXDOMAIN from the envelope."""
    parent = qname.split(".", 1)[1]
    for n in range(20):
        assert design_server.query(f"r{n}x.{parent}").rcode() == dns.rcode.NXDOMAIN
    assert design_server.query(qname).rcode() == dns.rcode.NXDOMAIN
    etcd.put(f"{etcd_prefix}/{key}", value)
    wait_until(lambda: design_server.query(qname).rcode() == dns.rcode.NOERROR, timeout=2, what="the new name")
    assert design_server.query(f"r99x.{parent}").rcode() == dns.rcode.NXDOMAIN


def test_bad_keys_and_values_are_skipped_logged_and_counted(design_server, etcd, etcd_prefix):
    bad = {
        f"{etcd_prefix}/myfederation/myns/myservice/Bad_Cluster": json.dumps({"clusterIP": "10.1.1.1"}),
        f"{etcd_prefix}/myfederation/myns/broken/foo": "{not json",
        f"{etcd_prefix}/myfederation/myns/wrongip/foo": json.dumps({"clusterIP": "10.0.0.300"}),
        f"{etcd_prefix}/myfederation/too/many/parts/here": "{}",
    }
    for key, value in bad.items():
        etcd.put(key, value)
    wait_until(lambda: design_server.metrics()["feddns_records_invalid"] == 4, timeout=2, what="4 invalid records")
    for key in bad:
        assert key in design_server.log
    assert "not JSON" in design_server.log and "not an IP address" in design_server.log
    assert dig(design_server.port, QNAME, "+ednsopt=65245:666f6f")[0] == "10.0.3.64"
    assert design_server.query("broken.myns.myfederation.svc.federation.").rcode() == dns.rcode.NXDOMAIN
    values = design_server.metrics()
    assert values["feddns_records_loaded"] == 6 and values["feddns_records_skipped_total"] >= 4


def test_bad_values_in_the_load_are_reported_by_the_read_after_it(etcd, etcd_prefix):
    """A load reads keys only (docs/serve.md, "Loading"): a bad value already in etcd at start is
    logged and counted once the read between queries reaches it, and its service is answered
    as if it had never been there."""
    put_design_keys(etcd, etcd_prefix)
    broken, wrong = (f"{etcd_prefix}/myfederation/myns/broken/foo", f"{etcd_prefix}/myfederation/myns/myservice/qux")
    etcd.put(broken, "{not json")
    etcd.put(wrong, json.dumps({"clusterIP": "10.0.0.300"}))
    with ServeProcess(etcd_url=etcd.url, prefix=etcd_prefix, extra_args=["--metrics", "127.0.0.1:0"]) as server:
        wait_until(lambda: "every record value read" in server.log, timeout=10, what="the read after the load")
        line = next(line for line in server.log.splitlines() if "every record value read" in line)
        assert line.endswith(": 2 invalid (feddns_records_invalid)"), line
        assert f"skipping record {broken}: value is not JSON" in server.log
        assert f"skipping record {wrong}: clusterIPs: '10.0.0.300' is not an IP address" in server.log
        values = server.metrics()
        assert values["feddns_records_invalid"] == 2 and values["feddns_records_loaded"] == 6
        assert server.query("broken.myns.myfederation.svc.federation.").rcode() == dns.rcode.NXDOMAIN
        assert sorted(server.addresses(QNAME)) == ["104.32.64.128", "104.32.64.130", "108.120.45.12"]


def test_metrics_count_queries(design_server):
    design_server.query(QNAME, cluster="foo")
    design_server.query(QNAME, cluster="foo")
    design_server.query("nope.federation.")
    values = design_server.metrics()
    assert values['feddns_dns_queries_total{qtype="A",rcode="NOERROR"}'] >= 2
    assert values['feddns_dns_queries_total{qtype="A",rcode="NXDOMAIN"}'] >= 1
    assert values['feddns_dns_answers_total{source="cluster"}'] >= 2
    assert values["feddns_ready"] == 1


def ready_status(server) -> int:
    try:
        with urllib.request.urlopen(server.metrics_url + "/ready", timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_servfail_until_first_load_then_answers(private_etcd, etcd_prefix):
    private_etcd.stop()
    with ServeProcess(etcd_url=private_etcd.url, prefix=etcd_prefix, extra_args=["--metrics", "127.0.0.1:0"]) as server:
        assert server.query(QNAME, cluster="foo").rcode() == dns.rcode.SERVFAIL
        assert server.query("nosuch.federation.").rcode() == dns.rcode.SERVFAIL  # never NXDOMAIN
        assert ready_status(server) == 503
        private_etcd.start()
        put_design_keys(private_etcd, etcd_prefix)
        wait_until(lambda: server.addresses(QNAME, cluster="foo")[:1] == ["10.0.3.64"], timeout=15, what="first load")
        assert ready_status(server) == 200



def test_an_etcd_down_from_the_start_is_logged_as_nothing_loaded_yet(private_etcd, etcd_prefix):
    """Before the first load there are no last records to serve: the loss says what is answered instead."""
    private_etcd.stop()
    with ServeProcess(etcd_url=private_etcd.url, prefix=etcd_prefix) as server:
        wait_until(lambda: " lost: " in server.log, timeout=20, what="the loss logged")
        lost = next(line for line in server.log.splitlines() if " lost: " in line)
        assert "no records loaded yet: answering SERVFAIL in the zone until the first load" in lost, lost
        assert "serving the records" not in server.log
        assert server.query(QNAME, cluster="foo").rcode() == dns.rcode.SERVFAIL

def test_keeps_answering_through_an_etcd_outage_and_catches_up(private_etcd, etcd_prefix):
    put_design_keys(private_etcd, etcd_prefix)
    with ServeProcess(etcd_url=private_etcd.url, prefix=etcd_prefix) as server:
        wait_until(lambda: server.addresses(QNAME, cluster="foo"), what="first load")
        private_etcd.stop()
        for _ in range(5):
            assert server.addresses(QNAME, cluster="foo")[0] == "10.0.3.64"
        private_etcd.start()
        private_etcd.put(f"{etcd_prefix}/myfederation/myns/myservice/foo", {"clusterIP": "10.0.3.65"})
        wait_until(lambda: server.addresses(QNAME, cluster="foo")[:1] == ["10.0.3.65"], timeout=15, what="catch up")


def test_relists_when_its_revision_was_compacted(private_etcd, etcd_prefix):
    put_design_keys(private_etcd, etcd_prefix)
    with ServeProcess(etcd_url=private_etcd.url, prefix=etcd_prefix) as server:
        wait_until(lambda: server.addresses(QNAME, cluster="foo"), what="first load")
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            private_etcd.stop()  # the paused server's watch stream dies with it
            private_etcd.start()
            private_etcd.delete(f"{etcd_prefix}/myfederation/myns/myservice/baz")
            private_etcd.put(f"{etcd_prefix}/myfederation/myns/myservice/foo", {"clusterIP": "10.0.3.66"})
            private_etcd.compact(private_etcd.revision())
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        wait_until(lambda: server.addresses(QNAME, cluster="foo") == ["10.0.3.66", "104.32.64.130"],
                   timeout=15, what="state after relist")
        assert "compacted" in server.log


def test_etcd_outage_backs_off_and_logs_lost_and_back_once(private_etcd, etcd_prefix):
    import time

    put_design_keys(private_etcd, etcd_prefix)
    with ServeProcess(etcd_url=private_etcd.url, prefix=etcd_prefix, extra_args=["--metrics", "127.0.0.1:0"]) as server:
        wait_until(lambda: server.addresses(QNAME, cluster="foo"), what="first load")
        before = server.metrics()["feddns_etcd_watch_restarts_total"]
        private_etcd.stop()
        wait_until(lambda: " lost: " in server.log, timeout=20, what="the loss logged")
        lost_at = time.monotonic()
        answered = 0
        while time.monotonic() - lost_at < 8:  # the outage: the last records keep being served
            assert server.addresses(QNAME, cluster="foo")[0] == "10.0.3.64"
            answered += 1
        retries = server.metrics()["feddns_etcd_watch_restarts_total"] - before
        outage = time.monotonic() - lost_at
        # 0.1 s doubling to 5 s: 0.1+0.2+0.4+0.8+1.6+3.2 = 6.3 s for six tries, then one per 5 s.
        # A delay reset before every try would give one try every 0.1 s (80 here).
        assert retries <= 6 + (outage - 6.3) / 5 + 2, f"{retries} retries in {outage:.1f}s"
        private_etcd.start()
        private_etcd.put(f"{etcd_prefix}/myfederation/myns/myservice/foo", {"clusterIP": "10.0.3.65"})
        wait_until(lambda: server.addresses(QNAME, cluster="foo")[:1] == ["10.0.3.65"], timeout=15, what="catch up")
        assert server.log.count(" lost: ") == 1 and server.log.count(" back after ") == 1
        assert answered > 10


def test_etcd_frozen_by_sigstop_is_noticed_backed_off_and_caught_up(private_etcd, etcd_prefix):
    """A frozen etcd keeps its sockets open and answers nothing: no connection is
    refused, so only gRPC keepalive and call deadlines can tell."""
    import re
    import time

    put_design_keys(private_etcd, etcd_prefix)
    with ServeProcess(etcd_url=private_etcd.url, prefix=etcd_prefix,
                      extra_args=["--metrics", "127.0.0.1:0", "--log-level", "debug"]) as server:
        wait_until(lambda: server.addresses(QNAME, cluster="foo"), what="first load")
        private_etcd.pause()
        try:
            frozen_at = time.monotonic()
            answered = 0
            while " lost: " not in server.log:  # answered from the index until the loss is noticed
                assert server.addresses(QNAME, cluster="foo")[0] == "10.0.3.64"
                answered += 1
                assert time.monotonic() - frozen_at < 45, "a frozen etcd was never noticed"
            lost_at = time.monotonic()
            wait_until(lambda: len(re.findall(r"retrying in ([\d.]+)s", server.log)) >= 3, timeout=40,
                       what="three retries")
            while time.monotonic() - lost_at < 2:
                assert server.addresses(QNAME, cluster="foo")[0] == "10.0.3.64"
                answered += 1
            assert server.metrics()["feddns_ready"] == 1
        finally:
            private_etcd.resume()
        delays = [float(d) for d in re.findall(r"retrying in ([\d.]+)s", server.log)]
        assert delays[:3] == [0.2, 0.4, 0.8], delays  # doubling from 0.1 s (the first try went at once)
        private_etcd.put(f"{etcd_prefix}/myfederation/myns/myservice/foo", {"clusterIP": "10.0.3.65"})
        wait_until(lambda: server.addresses(QNAME, cluster="foo")[:1] == ["10.0.3.65"], timeout=30, what="catch up")
        assert server.log.count(" lost: ") == 1 and server.log.count(" back after ") == 1
        assert answered > 10
        assert time.monotonic() - frozen_at < 120
