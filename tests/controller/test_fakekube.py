"""The fake API server speaks the real list/watch protocol: checked with plain HTTP.

These test FakeKube itself, which the fault tests rely on (tests/support/fakekube.py)."""

import http.client
import json
import urllib.error
import urllib.request

import kubernetes_validate
import pytest

from harness.objects import endpoint_slice, service, service_export
from harness.ports import wait_until
from tests.controller.harness import FIXTURES, LABEL
from tests.support.fakekube import KUBERNETES_VERSION, FakeKube

SERVICES = "/api/v1/services"


def get(fake: FakeKube, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(fake.url + path, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def watch(fake: FakeKube, query: str, count: int, path: str = SERVICES) -> list[dict]:
    """Open a watch and read ``count`` events (or until the server ends the stream)."""
    connection = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    connection.request("GET", f"{path}?watch=true&{query}")
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Transfer-Encoding") == "chunked"
    events = []
    while len(events) < count and (line := response.readline()):
        events.append(json.loads(line))
    connection.close()
    return events


@pytest.mark.parametrize("name", ["foo", "bar"])
def test_fixture_objects_are_valid_kubernetes_objects(fake, name):
    objects = fake.load(str(FIXTURES / f"{name}.yaml"))
    for obj in objects:
        if obj["kind"] == "ServiceExport":
            continue  # a CRD: no schema in kubernetes-validate
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert {o["kind"] for o in objects} == {"Service", "EndpointSlice"}


def test_headless_policy_objects_are_valid_kubernetes_objects(fake):
    """What the policy and headless tests apply: annotations, clusterIP None, hostnames."""
    objects = [
        fake.apply(service("ns", "web", labels=LABEL, cluster_ip="None", annotations={
            "federation.feddns.io/policy": "failover", "federation.feddns.io/failover-order": "foo,bar"})),
        fake.apply(endpoint_slice("ns", "web", ready=2, not_ready=1, hostnames=["web-0", "web-1"], headless=True)),
        fake.apply(endpoint_slice("ns", "web", ready=1, name="web-v6", address_type="IPv6", base="fd00::")),
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert objects[0]["spec"]["clusterIPs"] == ["None"] and objects[0]["spec"]["ipFamilies"] == ["IPv4"]


@pytest.mark.parametrize(("path", "kind", "api_version", "make"), [
    ("/apis/discovery.k8s.io/v1/endpointslices", "EndpointSlice", "discovery.k8s.io/v1",
     lambda n: endpoint_slice("ns", "web", ready=n, hostnames=["web-0"], headless=True)),
    ("/apis/multicluster.x-k8s.io/v1alpha1/serviceexports", "ServiceExport", "multicluster.x-k8s.io/v1alpha1",
     lambda n: {**service_export("ns", "web"), "status": {"conditions": [{"type": "Valid", "status": str(n)}]}}),
])
def test_endpoint_slices_and_service_exports_list_then_watch(fake, path, kind, api_version, make):
    name = fake.apply(make(1))["metadata"]["name"]
    status, body = get(fake, path)
    assert status == 200 and (body["kind"], body["apiVersion"]) == (f"{kind}List", api_version)
    (item,) = body["items"]
    assert ("kind" in item) == (kind == "ServiceExport")  # only custom resources' items keep kind/apiVersion
    fake.apply(make(2))
    fake.delete(kind, "ns", name)
    events = watch(fake, f"resourceVersion={body['metadata']['resourceVersion']}", 2, path)
    assert [(e["type"], e["object"]["kind"], e["object"]["apiVersion"]) for e in events] == [
        ("MODIFIED", kind, api_version), ("DELETED", kind, api_version)]


def test_list_has_a_resource_version_and_typed_items(fake):
    stored = fake.apply(service("ns", "a", labels=LABEL))
    status, body = get(fake, SERVICES)
    assert status == 200 and body["kind"] == "ServiceList" and body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"] == str(fake.resource_version)
    (item,) = body["items"]
    assert "kind" not in item and item["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert item["spec"]["clusterIPs"] == [item["spec"]["clusterIP"]] and item["spec"]["ipFamilies"] == ["IPv4"]


def test_paged_list_is_a_consistent_snapshot_and_expires_with_compaction(fake):
    for name in "abcde":
        fake.apply(service("ns", name))
    status, first = get(fake, f"{SERVICES}?limit=2")
    token = first["metadata"]["continue"]
    fake.apply(service("ns", "aa"))  # created after the first page: not in this list
    fake.delete("Service", "ns", "e")  # deleted after: still in this list
    names = [i["metadata"]["name"] for i in first["items"]]
    while token:
        status, page = get(fake, f"{SERVICES}?limit=2&continue={token}")
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
    assert names == ["a", "b", "c", "d", "e"]
    status, first = get(fake, f"{SERVICES}?limit=2")
    fake.compact()
    fake.apply(service("ns", "later"))
    status, body = get(fake, f"{SERVICES}?limit=2&continue={first['metadata']['continue']}")
    assert status == 410 and body["reason"] == "Expired" and body["kind"] == "Status"


def test_watch_resumes_after_the_given_version(fake):
    fake.apply(service("ns", "a"))
    version = fake.resource_version
    fake.apply(service("ns", "b"))
    fake.delete("Service", "ns", "a")
    events = watch(fake, f"resourceVersion={version}", 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b"), ("DELETED", "a")]
    assert events[0]["object"]["kind"] == "Service"
    assert int(events[1]["object"]["metadata"]["resourceVersion"]) == fake.resource_version


def test_watch_from_a_compacted_version_is_410(fake):
    fake.apply(service("ns", "a"))
    old = fake.resource_version - 1
    fake.compact()
    (event,) = watch(fake, f"resourceVersion={old}", 5)
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"


def test_watch_from_a_compacted_version_as_http_status():
    fake = FakeKube("t", gone_as_status=True)
    fake.start()
    try:
        fake.apply(service("ns", "a"))
        fake.compact()
        status, body = get(fake, f"{SERVICES}?watch=true&resourceVersion=1")
        assert status == 410 and body["code"] == 410
    finally:
        fake.close()


def test_bookmarks_and_timeout(fake):
    fake.apply(service("ns", "a"))
    version = fake.resource_version
    events = watch(fake, f"resourceVersion={version}&allowWatchBookmarks=true&timeoutSeconds=1", 100)
    assert events and {e["type"] for e in events} == {"BOOKMARK"}  # and the stream ended by itself
    assert events[-1]["object"]["metadata"] == {"resourceVersion": str(version)}


def test_label_selector_turns_leaving_into_deleted(fake):
    labelled = fake.apply(service("ns", "a", labels=LABEL))
    fake.apply(service("ns", "other"))
    version = fake.resource_version
    del labelled["metadata"]["labels"]["federation.feddns.io/name"]
    fake.apply(labelled)
    fake.apply({**labelled, "metadata": {**labelled["metadata"], "labels": LABEL}})
    events = watch(fake, f"resourceVersion={version}&labelSelector=federation.feddns.io/name%3Dmyfederation", 2)
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]
    _, body = get(fake, f"{SERVICES}?labelSelector=federation.feddns.io/name%3Dmyfederation")
    assert [i["metadata"]["name"] for i in body["items"]] == ["a"]


def test_expire_watches_sends_410_on_open_watches(fake):
    fake.apply(service("ns", "a"))
    connection = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    connection.request("GET", f"{SERVICES}?watch=true&resourceVersion={fake.resource_version}")
    response = connection.getresponse()
    wait_until(lambda: fake.watch_count() == 1, what="the watch open")
    fake.expire_watches()
    event = json.loads(response.readline())
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    assert response.readline() == b""  # and the stream ends
    connection.close()


def test_stop_refuses_connections_and_start_keeps_port_and_objects(fake):
    fake.apply(service("ns", "a"))
    port = fake.port
    fake.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(fake.url + SERVICES, timeout=2)
    fake.start()
    assert fake.port == port
    assert [i["metadata"]["name"] for i in get(fake, SERVICES)[1]["items"]] == ["a"]


def test_unknown_paths_and_selectors_are_errors(fake):
    assert get(fake, "/api/v1/pods")[0] == 404
    assert get(fake, f"{SERVICES}?labelSelector=a%20in%20(b)")[0] == 400
    fake.fail_next(503)
    assert get(fake, SERVICES)[0] == 503 and get(fake, SERVICES)[0] == 200
