"""Whatever reaches POST /mutate, the answer is a 200 AdmissionReview: never an error status."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.links.support import LinksProcess, admission_review, pod

LINKS = "links.feddns.io/services"


def test_non_pod_is_allowed_unchanged_with_a_warning(webhook: LinksProcess):
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}
    reply = webhook.review(deployment, kind={"group": "apps", "version": "v1", "kind": "Deployment"})
    assert reply.allowed and "patch" not in reply.response
    assert reply.warnings == ["feddns links: only pods are handled, not Deployment; nothing was changed"]


def test_pod_update_is_allowed_unchanged_with_a_warning(webhook: LinksProcess):
    reply = webhook.review(pod(annotations={LINKS: "DB=postgres.data.myfederation"}), operation="UPDATE")
    assert reply.allowed and "patch" not in reply.response
    assert reply.warnings == ["feddns links: only pod creation is handled, not UPDATE; nothing was changed"]


@pytest.mark.parametrize("body", [
    b"", b"not json", b"[]", b"null", b'{"kind": "Pod"}', b"\xff\xfe",
    b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
    b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}',
    b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []}',
], ids=["empty", "text", "list", "null", "pod", "bytes", "no-request", "uid-number", "request-list"])
def test_a_body_that_is_not_an_admission_review_is_allowed_with_a_warning(webhook: LinksProcess, body):
    reply = webhook.post(body)
    assert reply.status == 200 and reply.body is not None
    assert reply.body["kind"] == "AdmissionReview" and reply.allowed and "patch" not in reply.response
    assert reply.warnings == [("feddns links: the request is not an AdmissionReview with a request.uid; "
                              "nothing was changed")]


@pytest.mark.parametrize("obj", [
    "a string", None, {"metadata": {"name": "x"}}, {"spec": []}, {"metadata": [], "spec": {}},
], ids=["string", "null", "no-spec", "spec-list", "metadata-list"])
def test_an_object_that_is_not_a_pod_is_allowed_with_a_warning(webhook: LinksProcess, obj):
    request = admission_review({})
    request["request"]["object"] = obj
    reply = webhook.post(json.dumps(request).encode())
    assert reply.status == 200 and reply.response["uid"] == request["request"]["uid"]
    assert reply.allowed and reply.warnings == ["feddns links: request.object is not a pod; nothing was changed"]


def test_odd_pod_fields_do_not_break_the_review(webhook: LinksProcess):
    odd = pod(annotations={LINKS: "DB=postgres.data.myfederation"})
    odd["metadata"]["labels"] = ["not", "a", "map"]
    odd["spec"]["containers"] = [{"name": "a", "env": "not a list", "envFrom": [None, 3]}, "not a container", None]
    odd["spec"]["initContainers"] = {"not": "a list"}
    reply = webhook.review(odd)
    assert reply.allowed
    assert reply.applied(odd)["spec"]["containers"][0]["env"][0]["name"] == "DB_SERVICE_HOST"


@pytest.mark.parametrize("method,path,status", [("GET", "/mutate", 405), ("POST", "/other", 404)])
def test_other_routes_are_plain_http_errors(webhook: LinksProcess, method, path, status):
    assert webhook.post(b"{}", method=method, path=path).status == status


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3),
    max_leaves=12,
)
TEXT = st.text(alphabet=st.sampled_from(list("DB=pstgre.daFmyfion?&,:_$() 0123456789-")), max_size=60)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(annotation=TEXT | JSON_VALUES, env_entries=st.lists(JSON_VALUES | st.fixed_dictionaries(
    {"name": TEXT, "value": TEXT}), max_size=4), command=JSON_VALUES, labels=JSON_VALUES)
def test_arbitrary_pods_never_make_an_internal_error(webhook: LinksProcess, annotation, env_entries, command, labels):
    fuzzed = pod(annotations={LINKS: annotation} if isinstance(annotation, str) else annotation,
                 containers=[{"name": "app", "env": env_entries, "command": command}])
    fuzzed["metadata"]["labels"] = labels
    reply = webhook.review(fuzzed)
    if reply.allowed and reply.patch:
        reply.applied(fuzzed)  # the patch applies to the pod it was made for
    assert not any("AdmissionReview failed" in line for line in webhook.lines)
