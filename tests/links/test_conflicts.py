"""Conflicts (the Pod Preset rules) and the $(VAR) reference check, over real TLS.

A conflict injects nothing into the pod and says why in an admission warning;
the pod is never denied for it.
"""

import pytest

from tests.links.support import LinksProcess, env, pod

HOST = "postgres.data.myfederation.svc.federation."
LINKS = "links.feddns.io/services"
DB = "DB=postgres.data.myfederation"
ALL_DB = ["DB_SERVICE_HOST", "DB_SERVICE_PORT", "DB_SERVICE_PORT_SQL", "DB_SERVICE_PORT_ADMIN"]


def container(name: str = "app", **fields) -> dict:
    return {"name": name, "image": "app:1", **fields}


def test_same_value_already_defined_is_fine_and_not_injected_twice(webhook: LinksProcess):
    submitted = pod(annotations={LINKS: DB}, containers=[container(env=[
        {"name": "DB_SERVICE_PORT", "value": "5432"}, {"name": "OTHER", "value": "x"}])])
    reply = webhook.review(submitted)
    assert reply.allowed and reply.warnings == []
    assert env(reply.applied(submitted)) == [
        ("DB_SERVICE_HOST", HOST), ("DB_SERVICE_PORT_SQL", "5432"), ("DB_SERVICE_PORT_ADMIN", "5433"),
        ("DB_SERVICE_PORT", "5432"), ("OTHER", "x")]


def test_a_pod_that_defines_every_variable_already_gets_no_patch_and_no_injected_mark(webhook: LinksProcess):
    """Nothing injected, nothing recorded: links.feddns.io/injected would say otherwise."""
    submitted = pod(annotations={LINKS: DB}, containers=[container(env=[
        {"name": "DB_SERVICE_HOST", "value": HOST}, {"name": "DB_SERVICE_PORT", "value": "5432"},
        {"name": "DB_SERVICE_PORT_SQL", "value": "5432"}, {"name": "DB_SERVICE_PORT_ADMIN", "value": "5433"}])])
    reply = webhook.review(submitted)
    assert reply.allowed and reply.warnings == [] and "patch" not in reply.response


@pytest.mark.parametrize("containers,words", [
    ([container(env=[{"name": "DB_SERVICE_PORT", "value": "6543"}])],
     "container 'app' sets DB_SERVICE_PORT='6543'; link DB (annotation) would set it to '5432'"),
    ([container(env=[{"name": "DB_SERVICE_HOST", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}])],
     "container 'app' sets DB_SERVICE_HOST from valueFrom"),
    ([container(env=[{"name": "DB_SERVICE_HOST"}])],  # no value at all is the empty string
     "container 'app' sets DB_SERVICE_HOST=''"),
    ([container(envFrom=[{"prefix": "DB_", "configMapRef": {"name": "db"}}])],
     "container 'app' has envFrom with prefix 'DB_', which can define the variables of link DB"),
    ([container(envFrom=[{"prefix": "DB_SERVICE_PORT_", "secretRef": {"name": "db"}}])],
     "envFrom with prefix 'DB_SERVICE_PORT_'"),
    # a conflict in one container keeps the variables out of every container
    ([container("ok"), container("sidecar", env=[{"name": "DB_SERVICE_PORT_SQL", "value": "1"}])],
     "container 'sidecar' sets DB_SERVICE_PORT_SQL='1'"),
], ids=["other-value", "valueFrom", "no-value", "envFrom-prefix", "envFrom-longer-prefix", "one-of-two-containers"])
def test_conflict_injects_nothing_and_warns(webhook: LinksProcess, containers, words):
    submitted = pod(annotations={LINKS: DB}, containers=containers)
    reply = webhook.review(submitted)
    assert reply.allowed
    assert reply.patch == []
    assert len(reply.warnings) == 1, reply.warnings
    assert words in reply.warnings[0] and reply.warnings[0].endswith("nothing was injected into this pod")


@pytest.mark.parametrize("env_from", [
    [{"configMapRef": {"name": "settings"}}],              # no prefix: ordinary configuration
    [{"prefix": "DBX_", "configMapRef": {"name": "x"}}],   # another prefix that merely starts alike
    [{"prefix": "D", "configMapRef": {"name": "x"}}],      # shorter than the link's prefix
])
def test_unrelated_env_from_is_no_conflict(webhook: LinksProcess, env_from):
    submitted = pod(annotations={LINKS: DB}, containers=[container(envFrom=env_from)])
    reply = webhook.review(submitted)
    assert reply.allowed and reply.warnings == []
    assert [name for name, _ in env(reply.applied(submitted))] == ALL_DB


def test_two_links_setting_one_variable_differently_conflict(webhook: LinksProcess):
    annotation = "A=idle.data.myfederation?ports=x-service-host:1, A_SERVICE_PORT_X=redis.data.myfederation"
    reply = webhook.review(pod(annotations={LINKS: annotation}))
    assert reply.allowed and reply.patch == []
    assert any("A_SERVICE_PORT_X_SERVICE_HOST is set by link A (annotation) and by link A_SERVICE_PORT_X" in w
               for w in reply.warnings), reply.warnings


@pytest.mark.parametrize("fields,warned", [
    ({"env": [{"name": "URL", "value": "pg://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT_PG)"}]},
     "env URL refers to $(DB_SERVICE_PORT_PG), which link DB does not define (it defines DB_SERVICE_HOST, "),
    ({"command": ["run", "--db=$(DB_SERVICE_PORT_SQL)", "--x=$(DB_SERVICE_PORTT)"]},
     "command[2] refers to $(DB_SERVICE_PORTT)"),
    ({"args": ["$(DB_SERVICE_PORT_ADMIN)", "$(DB_SERVICE_HOST_NAME)"]}, "args[1] refers to $(DB_SERVICE_HOST_NAME)"),
    # an own variable of that name counts only when defined before the reference
    ({"env": [{"name": "URL", "value": "$(DB_SERVICE_PORT_EXTRA)"}, {"name": "DB_SERVICE_PORT_EXTRA", "value": "1"}]},
     "env URL refers to $(DB_SERVICE_PORT_EXTRA), which is defined only after it"),
])
def test_references_a_link_does_not_define_are_warned(webhook: LinksProcess, fields, warned):
    submitted = pod(annotations={LINKS: DB}, containers=[container(**fields)])
    reply = webhook.review(submitted)
    assert reply.allowed and reply.patch, "the pod is patched all the same"
    assert len(reply.warnings) == 1 and warned in reply.warnings[0], reply.warnings
    assert reply.warnings[0].endswith("it will stay as written")


@pytest.mark.parametrize("fields", [
    {"env": [{"name": "URL", "value": "$(DB_SERVICE_HOST):$(DB_SERVICE_PORT_SQL)"}]},
    {"env": [{"name": "ESCAPED", "value": "$$(DB_SERVICE_PORT_NOPE)"}]},            # $$ escapes: not a reference
    {"env": [{"name": "MINE", "value": "$(UNRELATED_SERVICE_HOST) $(HOME)"}]},       # not a link's prefix
    {"env": [{"name": "X", "value": "$(DB_SERVICE_PORT_NOPE)"}], "envFrom": [{"configMapRef": {"name": "m"}}]},
    {"command": ["$(DB_SERVICE_PORT_LATE)"], "env": [{"name": "DB_SERVICE_PORT_LATE", "value": "1"}]},
], ids=["defined", "escaped", "other-prefix", "envFrom-may-define", "command-sees-all-env"])
def test_references_that_expand_are_not_warned(webhook: LinksProcess, fields):
    reply = webhook.review(pod(annotations={LINKS: DB}, containers=[container(**fields)]))
    assert reply.allowed and reply.patch and reply.warnings == []


def test_references_to_a_link_kept_out_by_a_conflict_are_warned(webhook: LinksProcess):
    submitted = pod(annotations={LINKS: DB}, containers=[container(env=[
        {"name": "DB_SERVICE_PORT", "value": "1"}, {"name": "URL", "value": "$(DB_SERVICE_HOST)"}])])
    reply = webhook.review(submitted)
    assert reply.patch == [] and len(reply.warnings) == 2
    assert "env URL refers to $(DB_SERVICE_HOST), which is not defined: link DB was not injected" in reply.warnings[1]


def test_reference_to_a_port_no_one_knows_is_warned(webhook: LinksProcess):
    submitted = pod(annotations={LINKS: "W=idle.data.myfederation"},
                    containers=[container(env=[{"name": "URL", "value": "http://$(W_SERVICE_HOST):$(W_SERVICE_PORT)"}])])
    reply = webhook.review(submitted)
    assert reply.patch and reply.warnings == [
        ("container 'app': env URL refers to $(W_SERVICE_PORT), which link W does not define (it defines "
         "W_SERVICE_HOST); it will stay as written")]
