"""The policy file: selection by namespace and label selector, merging with the annotation, reload."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from feddns.configfile import SizeLimit
from feddns.errors import ConfigError
from harness.unbound import UnboundResolver
from links.files import PolicyFile
from links.selector import parse_selector
from tests.links.conftest import write
from tests.links.support import LinksProcess, Pki, env, pod

LINKS = "links.feddns.io/services"
INJECTED = "links.feddns.io/injected"

POLICIES = """
policies:
  - name: shop-database
    namespace: shop
    selector:
      matchLabels: {role: frontend}
      matchExpressions:
        - {key: tier, operator: In, values: [web, api]}
        - {key: canary, operator: DoesNotExist}
    links:
      - {prefix: DB, service: postgres.data.myfederation}
  - name: shop-cache
    namespace: shop
    selector: {}
    links:
      - {prefix: CACHE, service: redis.data.myfederation, required: false}
  - name: other-queue
    namespace: other
    selector: {matchLabels: {app: worker}}
    links:
      - {prefix: Q, service: queue.data.myfederation, ports: [{name: amqp, port: 5672}]}
"""


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("policies") / "policies.yaml", POLICIES)


@pytest.fixture(scope="module")
def with_policies(pki: Pki, kubeconfig: str, cluster_dns: UnboundResolver, policy_path: Path) -> Iterator[LinksProcess]:
    process = LinksProcess(pki, kubeconfig=kubeconfig, resolver=f"127.0.0.1:{cluster_dns.port}",
                           policies=policy_path).start()
    yield process
    assert process.stop() == 0, process.lines[-20:]


def prefixes(process: LinksProcess, submitted: dict, namespace: str = "shop") -> list[str]:
    """The prefixes whose _SERVICE_HOST the pod got."""
    reply = process.review(submitted, namespace=namespace)
    assert reply.allowed, reply.response
    return [name[:-len("_SERVICE_HOST")] for name, _ in env(reply.applied(submitted)) if name.endswith("_SERVICE_HOST")]


@pytest.mark.parametrize("labels,namespace,expected", [
    ({"role": "frontend", "tier": "web"}, "shop", ["DB", "CACHE"]),
    ({"role": "frontend", "tier": "api", "x": "y"}, "shop", ["DB", "CACHE"]),
    ({"role": "frontend", "tier": "batch"}, "shop", ["CACHE"]),               # In: value not listed
    ({"role": "frontend"}, "shop", ["CACHE"]),                                # In: label absent
    ({"role": "frontend", "tier": "web", "canary": "true"}, "shop", ["CACHE"]),  # DoesNotExist
    ({"role": "backend", "tier": "web"}, "shop", ["CACHE"]),                  # matchLabels
    ({}, "shop", ["CACHE"]),                                                  # {} selects every pod
    ({"role": "frontend", "tier": "web"}, "elsewhere", []),                   # another namespace
])
def test_policies_select_by_namespace_and_labels(with_policies: LinksProcess, labels, namespace, expected):
    assert prefixes(with_policies, pod(labels=labels), namespace) == expected


def test_policy_links_are_recorded_with_their_policy(with_policies: LinksProcess):
    submitted = pod(labels={"role": "frontend", "tier": "web"})
    result = with_policies.review(submitted).applied(submitted)
    recorded = json.loads(result["metadata"]["annotations"][INJECTED])
    assert recorded["DB"]["source"] == "policy shop-database"
    assert recorded["CACHE"]["source"] == "policy shop-cache"


def test_required_policy_link_to_a_missing_service_denies_naming_the_policy(with_policies: LinksProcess):
    reply = with_policies.review(pod(labels={"app": "worker"}), namespace="other")
    assert not reply.allowed
    assert "link Q (policy other-queue): queue.data.myfederation.svc.federation. does not exist" in \
        reply.response["status"]["message"]


def test_annotation_and_policy_naming_one_service_make_one_link(with_policies: LinksProcess):
    submitted = pod(labels={"role": "frontend", "tier": "web"},
                    annotations={LINKS: "CACHE=redis.data.myfederation, EXTRA=postgres.data.myfederation"})
    reply = with_policies.review(submitted)
    assert reply.allowed and reply.warnings == []
    assert [n for n, _ in env(reply.applied(submitted)) if n.endswith("_HOST")] == [
        "CACHE_SERVICE_HOST", "EXTRA_SERVICE_HOST", "DB_SERVICE_HOST"]


def test_annotation_and_policy_linking_one_prefix_to_two_services_conflict(with_policies: LinksProcess):
    submitted = pod(labels={"role": "frontend", "tier": "web"}, annotations={LINKS: "DB=redis.data.myfederation"})
    reply = with_policies.review(submitted)
    assert reply.allowed and reply.patch == []
    assert reply.warnings == [
        ("conflict: prefix DB links redis.data.myfederation (annotation) and postgres.data.myfederation "
        "(policy shop-database); nothing was injected into this pod")]


def test_policy_file_is_reloaded_and_a_bad_edit_keeps_the_old_one_logged_once(
        pki: Pki, kubeconfig: str, cluster_dns: UnboundResolver, tmp_path: Path):
    path = write(tmp_path / "policies.yaml", POLICIES)
    process = LinksProcess(pki, kubeconfig=kubeconfig, resolver=f"127.0.0.1:{cluster_dns.port}",
                           policies=path).start()
    try:
        web = pod(labels={"role": "frontend", "tier": "web"})
        assert prefixes(process, web) == ["DB", "CACHE"]
        write(path, POLICIES.replace("prefix: CACHE", "prefix: REDIS"))
        process.wait_for_log(f"policy file {path} reloaded")
        assert prefixes(process, web) == ["DB", "REDIS"]

        mark = len(process.lines)
        write(path, POLICIES.replace("operator: In", "operator: Within"))
        process.wait_for_log("keeping the policy file", start=mark)
        assert prefixes(process, web) == ["DB", "REDIS"], "the policies loaded before stay"
        path.unlink()  # a missing file is one more bad change, not a reason to drop the policies
        process.wait_for_log("No such file", start=mark)
        assert prefixes(process, web) == ["DB", "REDIS"]
        write(path, POLICIES)
        process.wait_for_log(f"policy file {path} reloaded", start=mark)
        assert prefixes(process, web) == ["DB", "CACHE"]
        failures = [line for line in process.lines[mark:] if "keeping the policy file" in line]
        assert len(failures) == 2, failures  # one per bad change, not one per poll
        assert "operator 'Within' is not one of In, NotIn, Exists, DoesNotExist" in failures[0]
    finally:
        assert process.stop() == 0


@pytest.mark.parametrize("selector,labels,selected", [
    ({}, {}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchLabels": {"a": "1", "b": "2"}}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "3"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
    ({"matchLabels": {"app.kubernetes.io/name": "web"},
      "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]},
     {"app.kubernetes.io/name": "web", "env": "prod"}, True),
])
def test_label_selector_semantics(selector, labels, selected):
    assert parse_selector(selector, "s").matches(labels) is selected


@pytest.mark.parametrize("selector,words", [
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}, "operator In needs at least one value"),
    ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "operator Exists takes no values"),
    ({"matchExpressions": [{"key": "a", "operator": "in", "values": ["x"]}]}, "operator 'in' is not one of"),
    ({"matchLabels": {"bad key!": "x"}}, "'bad key!' is not a label key"),
    ({"matchLabels": {"a": "not a value"}}, "'not a value' is not a label value"),
    ({"matchLabel": {"a": "b"}}, "matchLabel: unknown key (expected matchLabels, matchExpressions)"),
    (["a=b"], "must be a mapping"),
])
def test_bad_selectors_are_named(selector, words):
    with pytest.raises(ConfigError) as info:
        parse_selector(selector, "policies[0].selector")
    assert str(info.value).startswith("policies[0].selector") and words in str(info.value), str(info.value)


def test_a_policy_file_over_the_cap_is_refused_unread(tmp_path):
    """--max-policies-size (1 MiB unless given): at start (exit 2) and on reload (the policies in use stay)."""
    path = write(tmp_path / "policies.yaml", POLICIES + "#" * 4096 + "\n")
    size = path.stat().st_size
    with pytest.raises(ConfigError, match=f"^policy file {path}: {size:,} bytes, over the limit of 4,096 bytes "
                                          r"\(--max-policies-size\); not read$"):
        PolicyFile(path, SizeLimit(4096, "--max-policies-size"))
    assert len(PolicyFile(path, SizeLimit(size, "--max-policies-size")).current()) > 0
