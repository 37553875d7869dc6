"""The record model and key layout of docs/reference.md section 4."""

import pytest

from feddns import records
from feddns.errors import RecordError
from feddns.keys import ClusterKey, Layout, ShardKey


def test_design_document_key_parses_with_empty_prefix():
    assert Layout().parse("/myfederation/myns/myservice/foo") == ShardKey("myfederation", "myns", "myservice", "foo")
    assert Layout().parse("/myfederation/_clusters/foo") == ClusterKey("myfederation", "foo")


def test_prefix_round_trip():
    layout = Layout("/feddns/")
    key = ShardKey("f", "ns", "svc", "c")
    assert layout.shard_key(key) == "/feddns/f/ns/svc/c"
    assert layout.parse(layout.shard_key(key)) == key
    assert layout.cluster_key(ClusterKey("f", "c")) == "/feddns/f/_clusters/c"


@pytest.mark.parametrize("key", ["/f/ns/svc", "/f/ns/svc/c/extra", "/F/ns/svc/c", "/f/ns/-svc/c", "/other/x",
                                 "f/ns/svc/c"])
def test_bad_keys_name_the_problem(key):
    with pytest.raises(RecordError) as info:
        Layout().parse(key)
    assert key in str(info.value)


def test_lists_take_precedence_and_encoding_is_canonical():
    rec = records.ShardRecord.from_json({"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.2", "fd00::2"],
                                         "externalIP": "1.1.1.1", "ready": 2})
    assert [str(ip) for ip in rec.cluster_ips] == ["10.0.0.2", "fd00::2"]
    again = records.ShardRecord.from_json(records.decode_json(records.encode(rec)))
    assert again == rec and records.encode(again) == records.encode(rec)


@pytest.mark.parametrize("value,words", [
    ({"ready": -1}, "ready"), ({"ready": True}, "ready"), ({"clusterIPs": "10.0.0.1"}, "clusterIPs"),
    ({"externalIP": "host.example"}, "not an IP address"),
    ({"ports": [{"name": "HTTP", "port": 80}]}, "name"), ({"ports": [{"name": "http", "port": 0}]}, "port"),
    ({"ports": [{"name": "http", "port": 80, "protocol": "ICMP"}]}, "protocol"),
])
def test_bad_shard_values_name_the_field(value, words):
    with pytest.raises(RecordError, match=words):
        records.ShardRecord.from_json(value)


def test_cluster_record():
    rec = records.ClusterRecord.from_json({"zone": "z", "region": "r", "cidrs": ["10.0.0.0/8"]})
    assert rec.zone == "z" and str(rec.cidrs[0]) == "10.0.0.0/8"
    with pytest.raises(RecordError, match="cidrs"):
        records.ClusterRecord.from_json({"cidrs": ["nonsense"]})


def test_policy_and_endpoints_round_trip():
    value = {"clusterIPs": [], "policy": "failover", "failoverOrder": ["b", "a"], "weight": 3,
             "endpoints": [{"ip": "10.4.0.7", "hostname": "web-0"}, {"ip": "fd00::7"}], "ready": 2}
    rec = records.ShardRecord.from_json(value)
    assert rec.policy == records.Policy("failover", ("b", "a"), 3)
    assert rec.endpoints == (records.Endpoint(records.parse_ip("10.4.0.7"), "web-0"),
                             records.Endpoint(records.parse_ip("fd00::7")))
    assert records.decode_json(records.encode(rec)) == {
        "policy": "failover", "failoverOrder": ["b", "a"], "weight": 3, "ready": 2,
        "endpoints": [{"ip": "10.4.0.7", "hostname": "web-0"}, {"ip": "fd00::7"}]}
    assert "policy" not in records.decode_json(records.encode(records.ShardRecord()))  # locality: the default


@pytest.mark.parametrize("fields,words", [
    ({"policy": "round-robin"}, "policy 'round-robin' is not one of"),
    ({"policy": "failover", "failoverOrder": "a,b"}, "failoverOrder"),
    ({"policy": "failover", "failoverOrder": ["A"]}, "failoverOrder"),
    ({"policy": "weighted", "weight": -1}, "weight -1"),
    ({"policy": "weighted", "weight": 1.5}, "weight 1.5"),
    ({"policy": "weighted", "weight": True}, "weight True"),
    ({"policy": "weighted", "weight": 65536}, "weight 65536"),
])
def test_a_bad_policy_field_reads_as_the_default_policy_and_says_why(fields, words):
    read = records.read_shard({"clusterIP": "10.0.0.1", **fields})
    assert read.policy == records.DEFAULT_POLICY and words in (read.problem or "")
    assert read.cluster_ips  # the shard keeps its addresses


@pytest.mark.parametrize("endpoints,words", [
    ("10.0.0.1", "endpoints must be a list"), ([{"ip": "nope"}], "ip 'nope'"), (["10.0.0.1"], "not an object"),
    ([{"ip": "10.0.0.1", "hostname": "Web_0"}], "hostname"),
    ([{"ip": f"10.0.{i // 256}.{i % 256}"} for i in range(1001)], "1001 entries, more than 1000"),
])
def test_bad_endpoints_name_the_field(endpoints, words):
    with pytest.raises(RecordError, match=words):
        records.ShardRecord.from_json({"endpoints": endpoints})


def test_cluster_record_pod_network():
    assert records.ClusterRecord.from_json({"podNetwork": "routable"}).routable
    for value in ("isolated", "Routable", 1, None):
        assert not records.ClusterRecord.from_json({"podNetwork": value}).routable
    assert records.ClusterRecord(pod_network="routable").to_json() == {"podNetwork": "routable"}
