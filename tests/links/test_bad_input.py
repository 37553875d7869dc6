"""Whatever reaches POST /mutate, the answer is an AdmissionReview, allowed: 200 when the body has a
request.uid to answer, else 400; never a 500."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.links.support import LinksProcess, Reply, admission_review, pod

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


NOT_A_REVIEW = "feddns links: the request is not an AdmissionReview with a request.uid; nothing was changed"


def no_uid(reply: Reply, warning: str) -> None:
    """``reply`` is the answer to a body with no uid to answer: 400, and still an AdmissionReview with ``warning``."""
    assert reply.status == 400 and reply.body is not None, reply
    assert reply.body["kind"] == "AdmissionReview" and reply.response["uid"] == ""
    assert reply.allowed and "patch" not in reply.response
    assert reply.warnings == [warning]


@pytest.mark.parametrize("body", [
    b"", b"not json", b"[]", b"null", b'{"kind": "Pod"}', b"\xff\xfe",
    b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
    b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}',
    b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}',
    b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []}',
], ids=["empty", "text", "list", "null", "pod", "bytes", "no-request", "uid-number", "uid-empty", "request-list"])
def test_a_body_with_no_uid_to_answer_gets_400_and_an_admission_review(webhook: LinksProcess, body):
    no_uid(webhook.post(body), NOT_A_REVIEW)


def test_a_body_with_a_uid_that_is_not_an_admission_review_is_allowed_with_a_warning(webhook: LinksProcess):
    reply = webhook.post(json.dumps({"kind": "Pod", "request": {"uid": "u-1"}}).encode())
    assert reply.status == 200 and reply.response["uid"] == "u-1"
    assert reply.allowed and "patch" not in reply.response and reply.warnings == [NOT_A_REVIEW]


NESTED = "feddns links: the body is JSON nested deeper than the webhook parses; nothing was changed"


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_json_nested_too_deeply_gets_400_and_an_admission_review_not_a_500(webhook: LinksProcess, depth):
    """The API server's uid is in there, but so deep a body cannot be parsed to reach it (it was a 500:
    RecursionError in links/app.py _uid(), outside the reviewer's guard)."""
    request = admission_review(pod())
    text = json.dumps(request).replace('"object": {', '"object": {"deep": ' + "[" * depth + "]" * depth + ", ", 1)
    log_start = len(webhook.lines)
    no_uid(webhook.post(text.encode()), NESTED)
    assert not any("Error handling request" in line or "Traceback" in line for line in webhook.lines[log_start:])


def test_a_deep_but_parsable_pod_is_reviewed(webhook: LinksProcess):
    submitted = pod(annotations={LINKS: "DB=postgres.data.myfederation"})
    submitted["metadata"]["labels"] = {"deep": "x"}
    submitted["spec"]["affinity"] = {"deep": [[[[[[[[[[[[[[[[[[[[{"x": 1}]]]]]]]]]]]]]]]]]]]]}
    reply = webhook.review(submitted)
    assert reply.allowed and reply.applied(submitted)["spec"]["containers"][0]["env"][0]["name"] == "DB_SERVICE_HOST"


def test_a_body_over_the_limit_gets_400_and_an_admission_review(webhook: LinksProcess):
    no_uid(webhook.post(b" " * (6 * 1024 * 1024 + 1)),
           f"feddns links: the body is over {6 * 1024 * 1024} bytes; nothing was changed")


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


NO_CONTAINER = ("feddns links: the pod has no container to inject into (spec.containers is not a list of "
                "containers); nothing was changed")


@pytest.mark.parametrize("containers", [{"name": "app"}, "app", 5, None, [], ["app", None]],
                         ids=["mapping", "string", "number", "null", "empty", "no-mapping"])
def test_a_pod_without_a_container_list_is_not_marked_injected(webhook: LinksProcess, containers):
    """links.feddns.io/injected says what was injected: with nothing injected, it is not set (a mapping
    got the annotation alone, a number made an internal error)."""
    odd = pod(annotations={LINKS: "DB=postgres.data.myfederation"})
    odd["spec"]["containers"] = containers
    reply = webhook.review(odd)
    assert reply.allowed and "patch" not in reply.response
    assert reply.warnings == [NO_CONTAINER]


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
