"""Kubernetes objects to shard records (docs/reference.md section 4): a table per kind of object."""

import pytest

from controller import shards
from feddns.records import DEFAULT_POLICY, ShardRecord, encode, read_shard
from harness.objects import endpoint_slice, service

FED = "myfederation"
LABEL = "federation.feddns.io/name"
LABELS = {LABEL: FED}


CLUSTERS = frozenset({"foo", "bar", "baz"})
ONE_READY = [shards.slice_info(endpoint_slice("ns", "a", ready=1, base="10.244.0.0", hostnames=["web-0"]))]


def record_json(obj: dict) -> dict | None:
    info = shards.service_info(obj, FED, LABEL, CLUSTERS)
    record, _ = shards.shard_record(info, ONE_READY)
    return None if record is None else record.to_json()


def with_spec(obj: dict, **spec) -> dict:
    obj["spec"].update(spec)
    return obj


SERVICES = [
    # (id, Service, expected record JSON with ready 1, or a skip code)
    ("clusterIP only",
     service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1"),
     {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"],
      "ports": [{"name": "http", "protocol": "TCP", "port": 80}], "ready": 1}),
    ("load balancer ip wins over spec.externalIPs",
     service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1", type="LoadBalancer",
             load_balancer_ips=["104.32.64.128", "2600:1f18::1"], external_ips=["198.51.100.1"]),
     {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "externalIP": "104.32.64.128",
      "externalIPs": ["104.32.64.128", "2600:1f18::1"],
      "ports": [{"name": "http", "protocol": "TCP", "port": 80}], "ready": 1}),
    ("spec.externalIPs when no ingress",
     service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1", external_ips=["198.51.100.1"], ports=()),
     {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "externalIP": "198.51.100.1",
      "externalIPs": ["198.51.100.1"], "ready": 1}),
    ("dual-stack clusterIPs",
     with_spec(service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1", ports=()),
               clusterIPs=["10.0.0.1", "fd00::1"]),
     {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "fd00::1"], "ready": 1}),
    ("unnamed ports are left out",
     service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1", ports=(("", "TCP", 80), ("dns", "UDP", 53))),
     {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"],
      "ports": [{"name": "dns", "protocol": "UDP", "port": 53}], "ready": 1}),
    ("headless: the slices' ready endpoints and named ports",
     service("ns", "a", labels=LABELS, cluster_ip="None"),
     {"endpoints": [{"ip": "10.244.0.1", "hostname": "web-0"}],
      "ports": [{"name": "http", "protocol": "TCP", "port": 8080}], "ready": 1}),
    ("failover annotations",
     service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1", ports=(), annotations={
         "federation.feddns.io/policy": "failover", "federation.feddns.io/failover-order": " bar, foo,bar "}),
     {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ready": 1, "policy": "failover",
      "failoverOrder": ["bar", "foo"]}),
    ("weighted annotations",
     service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1", ports=(), annotations={
         "federation.feddns.io/policy": "weighted", "federation.feddns.io/weight": "3"}),
     {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "ready": 1, "policy": "weighted", "weight": 3}),
    ("no clusterIP yet", service("ns", "a", labels=LABELS), "no-clusterip"),
    ("ExternalName", service("ns", "a", labels=LABELS, type="ExternalName"), "externalname"),
    ("hostname-only load balancer",
     service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1", type="LoadBalancer",
             load_balancer_hostnames=["x.elb.amazonaws.com"]), "hostname-only"),
    ("a bad clusterIP", service("ns", "a", labels=LABELS, cluster_ip="10.0.0.300"), "malformed"),
    ("spec is a list", {**service("ns", "a", labels=LABELS), "spec": []}, "malformed"),
    ("ingress is a string",
     {**service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1"), "status": {"loadBalancer": {"ingress": "x"}}},
     "malformed"),
    ("a port out of range",
     service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1", ports=(("http", "TCP", 70000),)), "malformed"),
]


@pytest.mark.parametrize(("obj", "expected"), [c[1:] for c in SERVICES], ids=[c[0] for c in SERVICES])
def test_service_to_record(obj, expected):
    info = shards.service_info(obj, FED, LABEL, CLUSTERS)
    assert info.labelled
    if isinstance(expected, str):
        assert info.record is None and info.skip is not None and info.skip.code == expected
    else:
        assert info.skip is None and record_json(obj) == expected


@pytest.mark.parametrize("labels", [{}, {LABEL: "otherfederation"}, None])
def test_only_the_federation_label_selects(labels):
    obj = service("ns", "a", cluster_ip="10.0.0.1")
    obj["metadata"]["labels"] = labels
    assert not shards.service_info(obj, FED, LABEL).labelled


@pytest.mark.parametrize("obj", [
    {"metadata": {"name": "Bad_Name", "namespace": "ns"}},
    {"metadata": "x"},
    {"kind": "Service"},
    [],
])
def test_objects_without_a_usable_name_raise_shape_error(obj):
    with pytest.raises(shards.ShapeError):
        shards.service_info(obj, FED, LABEL)


SLICES = [
    ("ready and not ready", [endpoint_slice("ns", "a", ready=2, not_ready=1)], 2),
    ("nil ready counts as ready",
     [{**endpoint_slice("ns", "a", ready=0), "endpoints": [{"addresses": ["10.1.1.1"]},
                                                           {"addresses": ["10.1.1.2"], "conditions": {}}]}], 2),
    ("null endpoints", [{**endpoint_slice("ns", "a", ready=0), "endpoints": None}], 0),
    ("slices of one family add up",
     [endpoint_slice("ns", "a", ready=2, name="a-1"), endpoint_slice("ns", "a", ready=3, name="a-2")], 5),
    ("dual-stack counts pods once",
     [endpoint_slice("ns", "a", ready=2, name="a-4"),
      endpoint_slice("ns", "a", ready=2, name="a-6", address_type="IPv6", base="fd00::")], 2),
    ("no slices", [], 0),
]


@pytest.mark.parametrize(("slices", "ready"), [c[1:] for c in SLICES], ids=[c[0] for c in SLICES])
def test_ready_count(slices, ready):
    assert shards.ready_count(shards.slice_info(s) for s in slices) == ready


def test_slice_without_service_label_belongs_to_nothing():
    obj = endpoint_slice("ns", "a", ready=1)
    obj["metadata"]["labels"] = {}
    assert shards.slice_info(obj).service is None


@pytest.mark.parametrize("change", [
    lambda s: s.pop("addressType"),
    lambda s: s.update(endpoints="x"),
    lambda s: s.update(endpoints=[{"addresses": ["10.0.0.1"], "conditions": "ready"}]),
])
def test_malformed_slices_raise_shape_error(change):
    obj = endpoint_slice("ns", "a", ready=1)
    change(obj)
    with pytest.raises(shards.ShapeError):
        shards.slice_info(obj)


def test_describe_change_names_each_changed_field():
    old = ShardRecord.from_json({"clusterIP": "10.0.3.64", "externalIP": "104.32.64.128", "ready": 3})
    new = ShardRecord.from_json({"clusterIP": "10.0.3.64", "externalIP": "104.32.64.130", "ready": 0})
    assert shards.describe_change(old, new) == "externalIP 104.32.64.128 -> 104.32.64.130, ready 3 -> 0"
    two = ShardRecord.from_json({"clusterIPs": ["10.0.3.64", "fd00::1"], "ready": 3})
    assert shards.describe_change(old, two) == (
        "clusterIPs [10.0.3.64] -> [10.0.3.64, fd00::1], externalIP 104.32.64.128 -> none")
    assert shards.describe(new) == "clusterIP 10.0.3.64, externalIP 104.32.64.130, ports none, ready 0"


def test_record_bytes_are_canonical():
    a, _ = shards.shard_record(shards.service_info(service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1"),
                                                   FED, LABEL), ONE_READY)
    b = ShardRecord.from_json(a.to_json()) if a else None
    assert a is not None and encode(a) == encode(b)


POLICY, ORDER, WEIGHT = (f"federation.feddns.io/{n}" for n in ("policy", "failover-order", "weight"))
ANNOTATIONS = [
    # (annotations, policy name, order, weight, problem or None)
    ({}, "locality", (), None, None),
    ({POLICY: "locality"}, "locality", (), None, None),
    ({POLICY: "locality", WEIGHT: "7"}, "locality", (), None, None),  # a weight a policy does not use is ignored
    ({POLICY: "locality-weighted", WEIGHT: "0"}, "locality-weighted", (), 0, None),
    ({POLICY: "weighted"}, "weighted", (), None, None),
    ({POLICY: "failover", ORDER: "baz"}, "failover", ("baz",), None, None),
    ({POLICY: "round-robin"}, "locality", (), None, "federation.feddns.io/policy 'round-robin' is not one of"),
    ({POLICY: "failover"}, "locality", (), None, "policy failover needs federation.feddns.io/failover-order"),
    ({POLICY: "failover", ORDER: "foo,nosuch,qux"}, "locality", (), None,
     "federation.feddns.io/failover-order names unknown clusters: nosuch, qux"),
    ({POLICY: "weighted", WEIGHT: "-1"}, "locality", (), None, "federation.feddns.io/weight '-1' is not a whole"),
    ({POLICY: "weighted", WEIGHT: "1.5"}, "locality", (), None, "federation.feddns.io/weight '1.5'"),
    ({POLICY: "weighted", WEIGHT: "65536"}, "locality", (), None, "federation.feddns.io/weight '65536'"),
    ({WEIGHT: "3"}, "locality", (), None, None),  # no policy annotation: the default, weight unused
]


@pytest.mark.parametrize(("annotations", "name", "order", "weight", "problem"), ANNOTATIONS)
def test_annotations_set_the_policy_or_say_what_is_wrong(annotations, name, order, weight, problem):
    policy, found = shards.read_annotations(annotations, CLUSTERS)
    assert (policy.name, policy.failover_order, policy.weight) == (name, order, weight)
    assert (found is None) if problem is None else (problem in (found or "")), found


NONE_READY = "federation.feddns.io/none-ready"


@pytest.mark.parametrize(("annotations", "none_ready", "name", "problem"), [
    ({}, None, "locality", None),
    ({NONE_READY: "nodata"}, "nodata", "locality", None),
    ({NONE_READY: " answer "}, "answer", "locality", None),
    ({POLICY: "failover", ORDER: "baz", NONE_READY: "nodata"}, "nodata", "failover", None),
    ({NONE_READY: "never"}, None, "locality", "federation.feddns.io/none-ready 'never' is not one of answer, nodata"),
    ({POLICY: "weighted", WEIGHT: "x", NONE_READY: "nodata"}, "nodata", "locality", "weight 'x'"),
])
def test_the_none_ready_annotation_whatever_the_policy(annotations, none_ready, name, problem):
    """federation.feddns.io/none-ready is carried as the record's noneReady (reference section 2)."""
    policy, found = shards.read_annotations(annotations, CLUSTERS)
    assert (policy.none_ready, policy.name) == (none_ready, name)
    assert (found is None) if problem is None else (problem in (found or "")), found
    record = ShardRecord(policy=policy)
    assert record.to_json().get("noneReady") == none_ready
    assert ShardRecord.from_json(record.to_json()).policy == policy


TTL = "federation.feddns.io/ttl"


@pytest.mark.parametrize(("annotations", "ttl", "none_ready", "problem"), [
    ({TTL: "5"}, 5, None, None),
    ({TTL: " 0 "}, 0, None, None),
    ({TTL: "2147483647", NONE_READY: "nodata"}, 2147483647, "nodata", None),
    ({TTL: "2147483648"}, None, None, "federation.feddns.io/ttl '2147483648' is not a whole number of seconds from 0"),
    ({TTL: "-1"}, None, None, "federation.feddns.io/ttl '-1' is not a whole number"),
    ({TTL: "2s", NONE_READY: "never"}, None, None,
     "federation.feddns.io/none-ready 'never' is not one of answer, nodata; federation.feddns.io/ttl '2s' is not"),
])
def test_the_ttl_annotation_whatever_the_policy(annotations, ttl, none_ready, problem):
    """federation.feddns.io/ttl is carried as the record's ttl (reference section 2); a bad one is left
    out, and said beside any other bad annotation."""
    policy, found = shards.read_annotations(annotations, CLUSTERS)
    assert (policy.ttl, policy.none_ready) == (ttl, none_ready)
    assert (found is None) if problem is None else (problem in (found or "")), found
    record = ShardRecord(policy=policy)
    assert record.to_json().get("ttl") == ttl
    assert ShardRecord.from_json(record.to_json()).policy == policy


@pytest.mark.parametrize("value", [-1, 2**31, 1.5, "5", True])
def test_a_record_whose_ttl_is_not_whole_seconds_in_range_keeps_the_default_policy_and_says_why(value):
    fields = read_shard({"clusterIP": "10.0.0.1", "ttl": value})
    assert fields.policy == DEFAULT_POLICY
    assert f"ttl {value!r} is not a whole number of seconds from 0 to 2147483647" == fields.problem


def test_a_bad_annotation_still_makes_a_shard_with_the_default_policy():
    obj = service("ns", "a", labels=LABELS, cluster_ip="10.0.0.1", annotations={POLICY: "weighted", WEIGHT: "x"})
    info = shards.service_info(obj, FED, LABEL, CLUSTERS)
    assert info.record is not None and info.record.policy.name == "locality" and "weight 'x'" in info.policy_problem


def headless_record(*slices: dict) -> tuple[dict, int]:
    info = shards.service_info(service("ns", "a", labels=LABELS, cluster_ip="None"), FED, LABEL)
    record, beyond = shards.shard_record(info, [shards.slice_info(s) for s in slices])
    assert record is not None
    return record.to_json(), beyond


def test_headless_endpoints_ready_only_sorted_both_families_without_duplicates():
    record, beyond = headless_record(
        endpoint_slice("ns", "a", ready=2, not_ready=1, name="a-2", base="10.244.1.0", hostnames=["web-2", "web-3"]),
        endpoint_slice("ns", "a", ready=2, name="a-1", base="10.244.0.0", hostnames=["web-0", "WEB_1"]),
        endpoint_slice("ns", "a", ready=1, name="a-1b", base="10.244.0.0", hostnames=["web-0"]),  # the same pod
        endpoint_slice("ns", "a", ready=1, name="a-6", address_type="IPv6", base="fd00::", ports=()),
    )
    assert record["endpoints"] == [
        {"ip": "10.244.0.1", "hostname": "web-0"}, {"ip": "10.244.0.2"},  # WEB_1 is not a DNS label: dropped
        {"ip": "10.244.1.1", "hostname": "web-2"}, {"ip": "10.244.1.2", "hostname": "web-3"}, {"ip": "fd00::1"}]
    assert record["ready"] == 5 and beyond == 0
    assert record["ports"] == [{"name": "http", "protocol": "TCP", "port": 8080}]
    assert "clusterIP" not in record and "externalIP" not in record


def test_headless_without_slices_is_a_shard_with_no_endpoints():
    assert headless_record() == ({"endpoints": [], "ready": 0}, 0)


def test_headless_keeps_at_most_1000_endpoints_and_says_how_many_more():
    record, beyond = headless_record(endpoint_slice("ns", "a", ready=1000, name="a-1", base="10.1.0.0"),
                                     endpoint_slice("ns", "a", ready=200, name="a-2", base="10.0.0.0"))
    assert len(record["endpoints"]) == 1000 and beyond == 200 and record["ready"] == 1200
    assert record["endpoints"][0] == {"ip": "10.0.0.1"}  # kept by address, whatever the slices' order


def test_describe_names_policy_and_endpoints():
    old = ShardRecord.from_json({"clusterIP": "10.0.0.1", "ready": 1})
    new = ShardRecord.from_json({"clusterIP": "10.0.0.1", "ready": 1, "policy": "failover", "failoverOrder": ["a"]})
    assert shards.describe_change(old, new) == "policy locality -> failover [a]"
    assert shards.describe(ShardRecord.from_json({"endpoints": [{"ip": "10.0.0.1"}], "ready": 1})) == (
        "clusterIP none, externalIP none, ports none, ready 1, endpoints 1")
