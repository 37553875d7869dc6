"""The stub-zone API over real TLS against the real `feddns stubzone --backend skydns`, read back from a
real etcd's v2 key space, where released SkyDNS reads stub zones (docs/reference.md section 5)."""

import json
import threading

from harness.etcd import EtcdServer
from harness.stubzone import StubzoneProcess, skydns_args


def stub_keys(etcd: EtcdServer, prefix: str) -> dict[str, dict]:
    """The SkyDNS keys under ``prefix`` in etcd's v2 key space, values parsed."""
    return {key: json.loads(value) for key, value in etcd.v2_leaves(prefix).items()}


def test_post_programs_the_skydns_stub_keys_of_section_5(stubzone: StubzoneProcess, etcd, skydns_prefix):
    answer = stubzone.request("POST", "/federations/myfederation", {"nameservers": ["108.45.90.180", "108.180.64.128"]})
    assert answer.status == 200, answer
    assert answer.body == {
        "federation": "myfederation",
        "stubDomain": "myfederation.svc.federation.",
        "nameservers": ["108.45.90.180", "108.180.64.128"],
    }
    assert answer.headers["Content-Type"].startswith("application/json")
    base = f"{skydns_prefix}/local/cluster/dns/stub/federation/svc/myfederation"
    assert stub_keys(etcd, base + "/") == {
        f"{base}/ns1": {"host": "108.45.90.180", "port": 53},
        f"{base}/ns2": {"host": "108.180.64.128", "port": 53},
    }
    assert etcd.get_prefix(skydns_prefix) == {}  # nothing in the v3 key space, which SkyDNS does not read
    stubzone.wait_for_log(r'POST /federations/myfederation client="CN=feddns-controller" '
                          r'peer=127\.0\.0\.1:\d+ status=200 reason="myfederation\.svc\.federation\. -> ')


def test_get_and_list_read_back_what_etcd_holds(stubzone: StubzoneProcess, etcd, skydns_prefix):
    alpha_nameservers = ["10.0.0.1:5353", "[2001:db8::1]:5353", "2001:db8::2"]
    stubzone.request("POST", "/federations/alpha", {"nameservers": alpha_nameservers})
    # A key written by someone else (SkyDNS semantics: no port means 53) is read back too.
    etcd.v2_put(f"{skydns_prefix}/local/cluster/dns/stub/federation/svc/beta/ns1", {"host": "192.0.2.7"})
    alpha = stubzone.request("GET", "/federations/alpha")
    assert alpha.status == 200
    assert alpha.body["nameservers"] == ["10.0.0.1:5353", "[2001:db8::1]:5353", "2001:db8::2"]
    listed = stubzone.request("GET", "/federations")
    assert listed.status == 200
    by_name = {zone["federation"]: zone["nameservers"] for zone in listed.body["federations"]}
    assert by_name["alpha"] == alpha.body["nameservers"]
    assert by_name["beta"] == ["192.0.2.7"]
    assert list(by_name) == sorted(by_name)


def test_post_replaces_the_whole_list_and_deletes_stale_keys(stubzone: StubzoneProcess, etcd, skydns_prefix):
    base = f"{skydns_prefix}/local/cluster/dns/stub/federation/svc/shrink/"
    stubzone.request("POST", "/federations/shrink", {"nameservers": ["192.0.2.1", "192.0.2.2", "192.0.2.3"]})
    assert len(etcd.v2_leaves(base)) == 3
    answer = stubzone.request("POST", "/federations/shrink", {"nameservers": ["198.51.100.9:54"]})
    assert answer.status == 200
    assert stub_keys(etcd, base) == {base + "ns1": {"host": "198.51.100.9", "port": 54}}


def test_post_is_idempotent_and_writes_nothing_the_second_time(stubzone: StubzoneProcess, etcd, skydns_prefix):
    body = {"nameservers": ["192.0.2.10", "192.0.2.11"]}
    first = stubzone.request("POST", "/federations/same", body)
    index = etcd.v2_index()
    second = stubzone.request("POST", "/federations/same", body)
    assert (first.status, second.status) == (200, 200)
    assert second.body == first.body
    assert etcd.v2_index() == index
    stubzone.wait_for_log(r"POST /federations/same .*status=200 .*\(unchanged\)")


def test_delete_removes_only_that_federation(stubzone: StubzoneProcess, etcd, skydns_prefix):
    root = f"{skydns_prefix}/local/cluster/dns/stub/federation/svc/"
    stubzone.request("POST", "/federations/gone", {"nameservers": ["192.0.2.20"]})
    stubzone.request("POST", "/federations/gonebutnot", {"nameservers": ["192.0.2.21"]})
    answer = stubzone.request("DELETE", "/federations/gone")
    assert answer.status == 200
    assert answer.body["nameservers"] == ["192.0.2.20"]
    assert etcd.v2_leaves(root + "gone/") == {}
    assert etcd.v2_call("GET", root + "gone")[0] == 404  # the emptied directory is removed too
    assert etcd.v2_leaves(root + "gonebutnot/") != {}
    assert stubzone.request("GET", "/federations/gone").status == 404
    again = stubzone.request("DELETE", "/federations/gone")
    assert again.status == 404
    assert "not programmed" in again.body["error"]


def test_keys_outside_the_ns_leaves_of_a_federation_are_left_alone(stubzone: StubzoneProcess, etcd, skydns_prefix):
    base = f"{skydns_prefix}/local/cluster/dns/stub/federation/svc/mixed/"
    etcd.v2_put(base + "ns7", {"host": "192.0.2.70"})
    etcd.v2_put(base + "note", {"host": "192.0.2.71"})          # not an ns* leaf: not ours
    etcd.v2_put(base + "sub/ns1", {"host": "192.0.2.72"})       # the stub domain sub.mixed.svc...: not ours
    stubzone.request("POST", "/federations/mixed", {"nameservers": ["192.0.2.73"]})
    assert set(etcd.v2_leaves(base)) == {base + "ns1", base + "note", base + "sub/ns1"}
    stubzone.request("DELETE", "/federations/mixed")
    assert set(etcd.v2_leaves(base)) == {base + "note", base + "sub/ns1"}


def test_concurrent_posts_never_mix_two_lists(stubzone: StubzoneProcess, etcd, skydns_prefix):
    base = f"{skydns_prefix}/local/cluster/dns/stub/federation/svc/race/"
    lists = [[f"192.0.2.{i}{j}" for j in range(1, 1 + i)] for i in range(1, 7)]
    answers: list[int] = []

    def post(nameservers: list[str]) -> None:
        answers.append(stubzone.request("POST", "/federations/race", {"nameservers": nameservers}).status)

    for _ in range(3):
        threads = [threading.Thread(target=post, args=(ns,)) for ns in lists]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        by_index = sorted(stub_keys(etcd, base).items(), key=lambda kv: int(kv[0][len(base) + 2:]))
        stored = [value["host"] for _, value in by_index]
        assert stored in lists
    assert set(answers) == {200}


def test_healthz_reports_the_store(stubzone: StubzoneProcess, etcd):
    answer = stubzone.request("GET", "/healthz")
    assert answer.status == 200
    assert answer.body["status"] == "ok" and answer.body["backend"] == "skydns"
    assert answer.body["store"].startswith("etcd v2 index ")
    assert int(answer.body["store"].rsplit(" ", 1)[1]) <= etcd.v2_index()


def test_other_skydns_domain_and_federation_zone(pki, etcd, etcd_prefix):
    with StubzoneProcess(pki, *skydns_args(etcd.url, etcd_prefix + "/skydns"), "--skydns-domain", "Cluster.Example.",
                         "--federation-zone", "feds.example.org") as server:
        answer = server.request("POST", "/federations/f1", {"nameservers": ["192.0.2.99"]})
        assert answer.body["stubDomain"] == "f1.svc.feds.example.org."
        assert list(etcd.v2_leaves(etcd_prefix)) == [
            f"{etcd_prefix}/skydns/example/cluster/dns/stub/org/example/feds/svc/f1/ns1"
        ]


def test_an_ipv6_address_without_brackets_is_all_address_on_the_default_port(
        stubzone: StubzoneProcess, etcd, skydns_prefix):
    """The rule of section 5: an IPv6 address with a port is written ``[v6]:port``; without brackets the
    text is the address, so ``2001:db8::1:5353`` is the address 2001:db8::1:5353 on port 53."""
    answer = stubzone.request("POST", "/federations/bare6", {"nameservers": ["2001:db8::1:5353", "[2001:db8::1]:5353"]})
    assert answer.status == 200, answer
    assert answer.body["nameservers"] == ["2001:db8::1:5353", "[2001:db8::1]:5353"]
    base = f"{skydns_prefix}/local/cluster/dns/stub/federation/svc/bare6"
    assert stub_keys(etcd, base + "/") == {f"{base}/ns1": {"host": "2001:db8::1:5353", "port": 53},
                                           f"{base}/ns2": {"host": "2001:db8::1", "port": 5353}}


def test_a_loopback_nameserver_is_taken_with_the_flag_only(pki, etcd, skydns_prefix):
    """Refused by default (tests/stubzone/test_refusals.py); ``--allow-loopback-nameservers`` takes it, as the
    tests whose Federated-DNS runs on 127.0.0.1 need."""
    with StubzoneProcess(pki, *skydns_args(etcd.url, skydns_prefix + "lo"), "--allow-loopback-nameservers") as server:
        answer = server.request("POST", "/federations/lo", {"nameservers": ["127.0.0.1:5353", "::1"]})
    assert answer.status == 200, answer
    assert answer.body["nameservers"] == ["127.0.0.1:5353", "::1"]
