"""docs/links.md's walkthrough is the webhook's real output: its pod, sent to the real webhook, gets its patch,
and the kubelet's expansion of the patched pod gives its environment."""

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.kubecluster import KubeCluster
from harness.unbound import UnboundResolver
from links.expansion import expand
from tests.links.support import LinksProcess, Pki, clear_services

DOC = Path(__file__).parents[2] / "docs" / "links.md"


def example(name: str) -> str:
    """The fenced block that follows ``<!-- links-example: NAME -->`` in docs/links.md."""
    match = re.search(rf"<!-- links-example: {name} -->\n```[a-z]*\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert match, f"docs/links.md has no example {name!r}"
    return match.group(1)


@pytest.fixture
def doc_cluster(kube_foo: KubeCluster) -> Iterator[str]:
    """The local cluster (real, the session's foo) holding the walkthrough's Service, as a kubeconfig path;
    the Services of its namespace are deleted after the test."""
    walkthrough = yaml.safe_load(example("service"))
    kube_foo.apply(walkthrough)
    yield kube_foo.kubeconfig
    clear_services(kube_foo, walkthrough["metadata"]["namespace"])


def kubelet_environment(container: dict) -> list[str]:
    """``NAME=value`` lines as the kubelet builds them (each value sees the ones before), then the args."""
    values: dict[str, str] = {}
    lines = []
    for entry in container["env"]:
        values[entry["name"]] = expand(entry["value"], lambda name, seen=dict(values): seen.get(name))
        lines.append(f"{entry['name']}={values[entry['name']]}")
    return [*lines, "args: " + " ".join(expand(arg, values.get) for arg in container.get("args", []))]


def test_walkthrough_is_the_webhooks_output(pki: Pki, doc_cluster: str, cluster_dns: UnboundResolver):
    submitted = yaml.safe_load(example("pod"))
    process = LinksProcess(pki, kubeconfig=doc_cluster, resolver=f"127.0.0.1:{cluster_dns.port}").start()
    try:
        reply = process.review(submitted, namespace=submitted["metadata"]["namespace"])
    finally:
        assert process.stop() == 0
    assert reply.allowed and reply.warnings == []
    assert reply.patch == json.loads(example("patch"))
    patched = reply.applied(submitted)
    assert kubelet_environment(patched["spec"]["containers"][0]) == example("environment").strip().splitlines()
