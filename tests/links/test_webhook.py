"""`feddns links` over real TLS, reading a real kube-apiserver: what a pod gets, re-invocation, conflicts,
and what it does with bad input."""

import json

import pytest

from harness.kubecluster import KubeCluster
from harness.objects import service
from harness.ports import wait_until
from tests.links.support import LinksProcess, env, pod

HOST = "postgres.data.myfederation.svc.federation."
LINKS = "links.feddns.io/services"
INJECTED = "links.feddns.io/injected"


def test_annotated_pod_gets_the_link_variables_ahead_of_its_own_env(webhook: LinksProcess):
    submitted = pod(annotations={LINKS: "DB=postgres.data.myfederation, CACHE=redis.data.myfederation?required=false"},
                    containers=[{"name": "app", "image": "app:1", "env": [
                        {"name": "DATABASE_URL", "value": "postgres://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)/app"}]}])
    reply = webhook.review(submitted)
    assert reply.allowed and reply.warnings == []
    result = reply.applied(submitted)
    assert env(result) == [
        ("DB_SERVICE_HOST", HOST), ("DB_SERVICE_PORT", "5432"),
        ("DB_SERVICE_PORT_SQL", "5432"), ("DB_SERVICE_PORT_ADMIN", "5433"),
        ("CACHE_SERVICE_HOST", "redis.data.myfederation.svc.federation."), ("CACHE_SERVICE_PORT", "6379"),
        ("CACHE_SERVICE_PORT_REDIS", "6379"),
        ("DATABASE_URL", "postgres://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)/app"),
    ]
    recorded = json.loads(result["metadata"]["annotations"][INJECTED])
    assert recorded["DB"] == {"service": "postgres.data.myfederation", "source": "annotation",
                              "variables": ["DB_SERVICE_HOST", "DB_SERVICE_PORT", "DB_SERVICE_PORT_SQL",
                                            "DB_SERVICE_PORT_ADMIN"]}
    assert result["metadata"]["annotations"][LINKS].startswith("DB=")


def test_every_container_and_init_container_gets_them(webhook: LinksProcess):
    submitted = pod(annotations={LINKS: "DB=postgres.data.myfederation"},
                    containers=[{"name": "a", "image": "x"}, {"name": "b", "image": "x", "env": []}],
                    init_containers=[{"name": "wait", "image": "x", "env": [{"name": "X", "value": "1"}]}])
    result = webhook.review(submitted).applied(submitted)
    for key, index in (("containers", 0), ("containers", 1), ("initContainers", 0)):
        assert env(result, index, key)[0] == ("DB_SERVICE_HOST", HOST), (key, index)
    assert env(result, 0, "initContainers")[-1] == ("X", "1")


def test_ports_come_from_the_local_shard_before_the_links_own(webhook: LinksProcess):
    submitted = pod(annotations={LINKS: "DB=postgres.data.myfederation?ports=pg:6000"})
    assert env(webhook.review(submitted).applied(submitted))[:3] == [
        ("DB_SERVICE_HOST", HOST), ("DB_SERVICE_PORT", "5432"), ("DB_SERVICE_PORT_SQL", "5432")]


@pytest.mark.parametrize("link,expected", [
    # no local shard of this name: the link's own ports
    ("W=idle.data.myfederation?ports=web:8080,metrics:9090",
     [("W_SERVICE_HOST", "idle.data.myfederation.svc.federation."), ("W_SERVICE_PORT", "8080"),
      ("W_SERVICE_PORT_WEB", "8080"), ("W_SERVICE_PORT_METRICS", "9090")]),
    # a Service of that name labelled for another federation is not this federation's shard
    ("M=mysql.data.myfederation?required=false",
     [("M_SERVICE_HOST", "mysql.data.myfederation.svc.federation.")]),
    # neither: the host only; the prefix is upper-cased and '-' becomes '_'
    ("db-main=idle.data.myfederation", [("DB_MAIN_SERVICE_HOST", "idle.data.myfederation.svc.federation.")]),
])
def test_ports_fall_back_to_the_links_own_then_to_none(webhook: LinksProcess, link, expected):
    submitted = pod(annotations={LINKS: link})
    reply = webhook.review(submitted)
    assert reply.allowed and reply.warnings == []
    assert env(reply.applied(submitted)) == expected


def test_a_shard_change_reaches_the_next_review(webhook: LinksProcess, kube: KubeCluster):
    submitted = pod(annotations={LINKS: "C=cache.data.myfederation?required=false"})
    assert env(webhook.review(submitted).applied(submitted)) == [
        ("C_SERVICE_HOST", "cache.data.myfederation.svc.federation.")]
    kube.apply(service("data", "cache", labels={"federation.feddns.io/name": "myfederation"},
                       ports=[("memcache", "TCP", 11211)]))
    wait_until(lambda: len(env(webhook.review(submitted).applied(submitted))) == 3, timeout=10,
               what="the new shard's ports in a review")
    kube.delete("Service", "data", "cache")
    wait_until(lambda: len(env(webhook.review(submitted).applied(submitted))) == 1, timeout=10,
               what="the deleted shard's ports gone")


def test_reinvocation_does_not_patch_twice(webhook: LinksProcess):
    submitted = pod(annotations={LINKS: "DB=postgres.data.myfederation"})
    once = webhook.review(submitted).applied(submitted)
    again = webhook.review(once)
    assert again.allowed and again.patch == [] and again.warnings == []
    assert [name for name, _ in env(once)].count("DB_SERVICE_HOST") == 1


def test_pod_without_links_is_left_alone(webhook: LinksProcess):
    reply = webhook.review(pod(annotations={"other": "x"}, labels={"role": "frontend"}))
    assert reply.allowed and "patch" not in reply.response and reply.warnings == []


@pytest.mark.parametrize("annotation,words", [
    ("DB=postgres.data", "is not <service>.<namespace>.<federation>"),
    ("DB=postgres.data.myfederation.svc.federation.", "not the DNS name"),
    ("1DB=postgres.data.myfederation", "prefix '1DB' is not a variable name"),
    ("kubernetes=postgres.data.myfederation", "prefix KUBERNETES is reserved: kubelet sets KUBERNETES_SERVICE_HOST"),
    ("DB=postgres.data.myfederation?required=maybe", "link DB: required='maybe'"),
    ("DB=postgres.data.myfederation?port=sql:1", "link DB: unknown parameter 'port=sql:1'"),
    ("DB=postgres.data.myfederation?ports=sql:99999", "link DB: port 'sql:99999'"),
    ("just words", "'just words' is not PREFIX="),
    ("DB=Ünïcode.data.myfederation", "service name"),
])
def test_malformed_link_is_a_warning_and_the_good_links_still_go_in(webhook: LinksProcess, annotation, words):
    submitted = pod(annotations={LINKS: f"{annotation}, CACHE=redis.data.myfederation"})
    reply = webhook.review(submitted)
    assert reply.allowed
    assert len(reply.warnings) == 1 and words in reply.warnings[0] and LINKS in reply.warnings[0], reply.warnings
    assert [name for name, _ in env(reply.applied(submitted))] == [
        "CACHE_SERVICE_HOST", "CACHE_SERVICE_PORT", "CACHE_SERVICE_PORT_REDIS"]
