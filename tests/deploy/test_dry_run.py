"""Every manifest in deploy/ through a real kube-apiserver (harness/kubecluster.py), by server-side dry run.

``kubectl apply --server-side --dry-run=server`` sends each object through the whole write path of the
API server (decoding, defaulting, validation of every field, RBAC rules, webhook configurations, the
CRDs' OpenAPI schemas, admission) and stores nothing. What the schema checks of test_manifests.py
cannot see, the API server refuses here: a field it does not know, a value out of range, a rule
without verbs, a name that is no DNS label.

What the dry run needs first is made for real: the CRDs the manifests use, in the form their projects
publish them (prometheus-operator's PodMonitor and PrometheusRule for deploy/monitoring, ExternalDNS's
DNSEndpoint, the MCS API's ServiceExport), and every namespace the manifests name: a dry-run Namespace
is not created, so the objects in it would be refused as "namespaces not found".

The strategic-merge patch of the cluster's own CoreDNS Deployment goes through ``kubectl patch
--dry-run=server`` against the stock Deployment of tests/deploy/stock/, applied for real in a
namespace of this module's own (the shared cluster's kube-system stays as other tests make it), and
the server's merge must equal tests/deploy/manifests.py's.

The namespaces are labelled ``pod-security.kubernetes.io/warn: restricted`` for the module, so the
API server's PodSecurity admission says of every pod template that falls short of the "restricted"
Pod Security Standard what it lacks: the dry run must give no warning but the ones
:data:`EXPECTED_WARNINGS` names.

``--force-conflicts``: a dry run owns no field, and other tests apply some of these objects for real
(deploy/member/'s ClusterRole); the two stubzone.yaml of deploy/cluster-dns/ name the same Role with
other ``resourceNames``, as a user applies only one of them.
"""

import copy
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import peers
from harness.kubecluster import KubeCluster
from tests.deploy.manifests import (
    MERGE_KEYS,
    MONITORING,
    PLATFORM_CRS,
    REPO,
    STOCK,
    find,
    load,
    manifest_files,
    patch_files,
    strategic_merge,
)

CRDS = ("podmonitors.yaml", "prometheusrules.yaml", "dnsendpoints.yaml", "serviceexports.yaml", "helmchartconfigs.yaml")
MANIFESTS = [*manifest_files(), *sorted(MONITORING.glob("*.yaml")), *PLATFORM_CRS]
FIELD_MANAGER = "feddns-dry-run"
POD_SECURITY = {"pod-security.kubernetes.io/warn": "restricted"}
POD_SECURITY_MANAGER = "feddns-dry-run-pod-security"
"""Owns the label alone, so that applying the Namespace without it at the end takes it off again."""
EXPECTED_WARNINGS = {
    # a placeholder that certs.sh replaces with a real certificate (docs/links.md, "Deploying")
    "deploy/links/tls.yaml": ["tls: failed to find any PEM data in certificate input"],
}
WARNING = re.compile(r"^Warning: (.*)$", re.MULTILINE)
DRY_RUN_LINE = re.compile(r"^(\S+)/(\S+) serverside-applied \(server dry run\)$", re.MULTILINE)


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def namespaces() -> set[str]:
    """Every namespace an object of the manifests lives in."""
    return {obj["metadata"]["namespace"] for path in MANIFESTS for obj in load(path) if "namespace" in obj["metadata"]}


def label_namespace(cluster: KubeCluster, namespace: str, labels: dict[str, str]) -> None:
    """Server-side apply of the Namespace's ``labels`` as :data:`POD_SECURITY_MANAGER` (``{}`` removes its own)."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}
    cluster.request("PATCH", f"/api/v1/namespaces/{namespace}?fieldManager={POD_SECURITY_MANAGER}&force=true",
                    body, "application/apply-patch+yaml")


@pytest.fixture(scope="module")
def cluster(kube_foo: KubeCluster) -> Iterator[KubeCluster]:
    """kube_foo with the CRDs installed and the manifests' namespaces created for real, labelled
    :data:`POD_SECURITY` while the module runs."""
    for name in CRDS:
        kube_foo.install_crds(peers.crd(name))
    for namespace in sorted(namespaces()):
        kube_foo.ensure_namespace(namespace)
        label_namespace(kube_foo, namespace, POD_SECURITY)
    yield kube_foo
    for namespace in sorted(namespaces()):
        label_namespace(kube_foo, namespace, {})


def dry_run_apply(cluster: KubeCluster, path: Path, text: str | None = None) -> tuple[int, str]:
    """``kubectl apply --server-side --dry-run=server`` of ``path`` (or of ``text``): exit status and output."""
    source = ["-f", "-"] if text is not None else ["-f", str(path)]
    done = cluster.kubectl("apply", "--server-side", "--dry-run=server", "--force-conflicts",
                           f"--field-manager={FIELD_MANAGER}", *source, input=text, check=False)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("path", MANIFESTS, ids=relative)
def test_the_api_server_accepts_every_object_of_the_manifest(cluster: KubeCluster, path: Path) -> None:
    status, output = dry_run_apply(cluster, path)
    assert status == 0, f"the API server refused {relative(path)}:\n{output}"
    sent = {(kind.partition(".")[0], name) for kind, name in DRY_RUN_LINE.findall(output)}
    expected = {(obj["kind"].lower(), obj["metadata"]["name"]) for obj in load(path)}
    assert sent == expected, output
    assert WARNING.findall(output) == EXPECTED_WARNINGS.get(relative(path), []), output


def test_a_pod_short_of_the_restricted_standard_is_warned_of(cluster: KubeCluster) -> None:
    """The PodSecurity check is a real one: a container of deploy/myfederation allowed to escalate."""
    path = REPO / "deploy/myfederation/federated-dns.yaml"
    objects = copy.deepcopy(load(path))
    deployment = find(objects, "Deployment", "feddns-myfederation", "feddns")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": True}
    status, output = dry_run_apply(cluster, path, yaml.safe_dump_all(objects))
    assert status == 0, output
    assert WARNING.findall(output) == [
        'would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "serve" must set '
        'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "serve" must set '
        'securityContext.capabilities.drop=["ALL"])'], output


@pytest.mark.parametrize("path, breaks, refusal", [
    (REPO / "deploy/links/webhook.yaml", lambda obj: obj["webhooks"][0].update(timeoutSeconds=31),
     r"webhooks\[0\]\.timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"),
    (REPO / "deploy/member/controller-access.yaml",
     lambda obj: obj["kind"] == "ClusterRole" and obj["rules"][0].update(verbs=[]),
     r"rules\[0\]\.verbs: Required value"),
    (REPO / "deploy/monitoring/podmonitors.yaml",
     lambda obj: obj["spec"]["podMetricsEndpoints"][0].update(scheme="gopher"),
     r'podMetricsEndpoints\[0\]\.scheme: Unsupported value: "gopher"'),
], ids=["webhook-timeout", "rule-without-verbs", "crd-schema"])
def test_a_broken_object_is_refused(cluster: KubeCluster, path: Path, breaks: Any, refusal: str) -> None:
    """The dry run is a real check: one field broken in a shipped manifest, and the API server says which."""
    objects = copy.deepcopy(load(path))
    for obj in objects:
        breaks(obj)
    status, output = dry_run_apply(cluster, path, yaml.safe_dump_all(objects))
    assert status != 0, output
    assert re.search(refusal, output), output


def holds(actual: Any, expected: Any, field: str = "") -> bool:
    """``actual`` has everything of ``expected``: each key of a map; each item of a list and no more, in
    order, but by merge key for the lists of :data:`MERGE_KEYS`: the server's strategic merge puts a new
    item first (tests/deploy/manifests.py's appends it), and the order of those means nothing."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and holds(actual[k], v, k) for k, v in expected.items())
    if isinstance(expected, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        return holds({item[key]: item for item in actual} if isinstance(actual, list) else actual,
                     {item[key]: item for item in expected}) and len(actual) == len(expected)
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(actual) == len(expected)
                and all(holds(a, e) for a, e in zip(actual, expected, strict=True)))
    return bool(actual == expected)


@pytest.fixture(scope="module")
def stock_coredns(cluster: KubeCluster) -> Iterator[tuple[str, dict[str, Any]]]:
    """The stock CoreDNS Deployment applied for real in a namespace of this module's: (namespace, as stored)."""
    namespace = f"stock-{uuid.uuid4().hex[:8]}"
    deployment = copy.deepcopy(find(load(STOCK / "coredns.yaml"), "Deployment", "kube-system", "coredns"))
    deployment["metadata"]["namespace"] = namespace
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/coredns"
    cluster.ensure_namespace(namespace)
    yield namespace, cluster.request("PATCH", path + "?fieldManager=feddns-tests&force=true", deployment,
                                     "application/apply-patch+yaml")
    cluster.request("DELETE", path)


@pytest.mark.parametrize("path", patch_files(), ids=relative)
def test_the_patch_applies_to_the_stock_deployment_as_the_manifest_tests_merge_it(
        cluster: KubeCluster, stock_coredns: tuple[str, dict[str, Any]], path: Path) -> None:
    namespace, stored = stock_coredns
    done = cluster.kubectl("-n", namespace, "patch", "deployment", "coredns", "--patch-file", str(path),
                           "--dry-run=server", "-o", "json", check=False)
    assert done.returncode == 0, f"the API server refused {relative(path)}:\n{done.stdout}{done.stderr}"
    patched = json.loads(done.stdout)["spec"]["template"]["spec"]
    expected = strategic_merge(stored, load(path)[0])["spec"]["template"]["spec"]
    for field in ("volumes", "containers"):  # the server's has defaults the patch leaves out (defaultMode)
        assert holds(patched[field], expected[field], field), f"{field}: {patched[field]} != {expected[field]}"
    # a dry run: the stored Deployment is as it was
    now = cluster.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/coredns")
    assert now["spec"] == stored["spec"]
