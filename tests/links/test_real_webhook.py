"""deploy/links' MutatingWebhookConfiguration registered in a real kube-apiserver, calling a real ``feddns links``.

tests/links/test_webhook.py sends AdmissionReviews to the webhook itself. Here the API server does:
deploy/links/webhook.yaml is registered as shipped, but for two fields: ``caBundle`` holds the test CA
(as certs.sh sets it) and ``clientConfig.url`` is ``feddns links`` on 127.0.0.1 instead of the Service
(no cluster network runs here); its name has a suffix of this module's, since the cluster is shared.
Pods are created with the real kubectl, so the API server's defaulting, the webhook call over TLS, the
JSONPatch applied by the server, its validation of the result and ``failurePolicy`` are all real.

``feddns links`` reads the Services of the same API server (a kubeconfig with the token of
ServiceAccount ``feddns-links/feddns-links``, bound by deploy/links/links.yaml's ClusterRole only)
and gates links through the real chain of tests/links/conftest.py: unbound (stub zone) to
``feddns serve``. The federation's services live in a namespace of this module's, in the records
and in the cluster. No kubelet runs: a Pod is stored, never started.
"""

import base64
import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.kubecluster import KubeCluster
from harness.objects import service
from harness.ports import wait_until
from harness.serve import ServeProcess, write_records
from harness.unbound import UnboundResolver
from tests.links.support import FEDERATION, LABEL, STUB_ZONE, LinksProcess, Pki, env

REPO = Path(__file__).parents[2]
LINKS_MANIFEST = REPO / "deploy" / "links" / "links.yaml"
WEBHOOK_MANIFEST = REPO / "deploy" / "links" / "webhook.yaml"
RBAC = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
LINKS = "links.feddns.io/services"
INJECTED = "links.feddns.io/injected"
OPT_IN = {"links.feddns.io/enabled": "true"}
SUFFIX = uuid.uuid4().hex[:8]
DATA = f"data-{SUFFIX}"
"""The namespace of the federated services, in the records and in the cluster."""
SHOP = f"shop-{SUFFIX}"
"""The opted-in namespace the pods are created in."""
HOST = f"postgres.{DATA}.{FEDERATION}.svc.federation."
RECORDS = f"""
/{FEDERATION}/_clusters/foo: {{zone: z1, region: r1}}
/{FEDERATION}/{DATA}/postgres/foo: {{clusterIP: 10.0.3.64, externalIP: 104.32.64.128}}
"""


@pytest.fixture(scope="module")
def resolver() -> Iterator[UnboundResolver]:
    """The member cluster's DNS (unbound, stub zone) in front of Federated-DNS serving :data:`RECORDS`."""
    with ServeProcess(records=write_records(RECORDS)) as federated_dns:
        cluster_dns = UnboundResolver("foo", stub_zone=STUB_ZONE, stub_port=federated_dns.port).start()
        yield cluster_dns
        cluster_dns.stop()


@pytest.fixture(scope="module")
def kube(kube_foo: KubeCluster) -> Iterator[KubeCluster]:
    """kube_foo with the shard of postgres in :data:`DATA` and the opted-in namespace :data:`SHOP`."""
    kube_foo.ensure_namespace(DATA)
    kube_foo.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SHOP, "labels": OPT_IN}})
    kube_foo.ensure_namespace(SHOP)
    kube_foo.apply(service(DATA, "postgres", labels=LABEL, ports=[("sql", "TCP", 5432), ("admin", "TCP", 5433)]))
    yield kube_foo
    kube_foo.delete("Service", DATA, "postgres")


@pytest.fixture(scope="module")
def kubeconfig(kube: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The webhook's ServiceAccount and ClusterRole from deploy/links/links.yaml; a kubeconfig with its token."""
    for obj in yaml.safe_load_all(LINKS_MANIFEST.read_text()):
        if obj and obj["kind"] in RBAC:
            kube.apply(obj)
    token = kube.service_account_token("feddns-links", "feddns-links")
    return kube.write_kubeconfig(tmp_path_factory.mktemp("links") / "foo.kubeconfig", token=token)


def linked(service: str) -> str:
    """``<service>.<DATA>.<FEDERATION>``: a federated service of this module's namespace."""
    return f"{service}.{DATA}.{FEDERATION}"


def pod(name: str, links: str, namespace: str = SHOP) -> dict[str, Any]:
    """A Pod as a user writes it, with the links annotation ``links``."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {LINKS: links}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1", "env": [
                {"name": "DATABASE_URL", "value": "postgres://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)/shop"}]}]}}


def dry_run(kube: KubeCluster, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The Pod as the API server would store it (``kubectl create --dry-run=server``); None when refused."""
    done = kube.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj), check=False)
    return dict(json.loads(done.stdout)) if done.returncode == 0 else None


class RegisteredWebhook:
    """deploy/links/webhook.yaml registered for ``links`` under a name of this module's, as a context."""

    def __init__(self, kube: KubeCluster, links: LinksProcess, pki: Pki) -> None:
        self.kube, self.links = kube, links
        self.configuration = yaml.safe_load(WEBHOOK_MANIFEST.read_text())
        self.name = f"{self.configuration['metadata']['name']}-{SUFFIX}"
        self.configuration["metadata"]["name"] = self.name
        for hook in self.configuration["webhooks"]:
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{links.port}/mutate",
                                    "caBundle": base64.b64encode(pki.ca.read_bytes()).decode()}

    def calls_it(self) -> bool:
        """Whether the API server patches a probe pod, ports and all (the webhook has listed the shards)."""
        probe = dry_run(self.kube, pod("probe", f"DB={linked('postgres')}"))
        return probe is not None and ("DB_SERVICE_PORT_SQL", "5432") in env(probe)

    def __enter__(self) -> "RegisteredWebhook":
        """Apply the configuration and wait until the API server calls the webhook: it picks a
        configuration up from its informer, and until then pods pass unpatched."""
        self.kube.apply(self.configuration)
        wait_until(self.calls_it, timeout=15, interval=0.2, what=f"the API server calling webhook {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        """Delete the configuration and, while the webhook runs, wait until the API server no longer
        calls it: the next test's registration is a new one."""
        self.kube.delete("MutatingWebhookConfiguration", None, self.name)
        if self.links.child.running:
            wait_until(lambda: not self.calls_it(), timeout=15, interval=0.2,
                       what=f"the API server forgetting webhook {self.name}")


def start_links(pki: Pki, kubeconfig: str, resolver: UnboundResolver) -> LinksProcess:
    """``feddns links`` on 127.0.0.1, reading kube_foo's Services, gating through ``resolver``."""
    return LinksProcess(pki, kubeconfig=kubeconfig, resolver=f"127.0.0.1:{resolver.port}").start()


@pytest.fixture(scope="module")
def links(kubeconfig: str, resolver: UnboundResolver, pki: Pki) -> Iterator[LinksProcess]:
    process = start_links(pki, kubeconfig, resolver)
    yield process
    assert process.stop() == 0, process.lines[-20:]


@pytest.fixture
def webhook(kube: KubeCluster, links: LinksProcess, pki: Pki) -> Iterator[RegisteredWebhook]:
    """The module's ``feddns links``, registered for the test."""
    with RegisteredWebhook(kube, links, pki) as registered:
        yield registered


@pytest.fixture
def created(kube: KubeCluster) -> Iterator[list[tuple[str, str]]]:
    """``(namespace, name)`` of the pods a test creates, deleted after it."""
    pods: list[tuple[str, str]] = []
    yield pods
    for namespace, name in pods:
        if kube.get("Pod", namespace, name) is not None:
            kube.delete("Pod", namespace, name)


def create(kube: KubeCluster, obj: dict[str, Any],
           created: list[tuple[str, str]]) -> "subprocess.CompletedProcess[str]":
    """``kubectl create -f -`` of ``obj``, sent as the YAML file a user has; never raises."""
    created.append((obj["metadata"]["namespace"], obj["metadata"]["name"]))
    return kube.kubectl("create", "-f", "-", input=yaml.safe_dump(obj), check=False)


def test_a_pod_created_with_kubectl_is_stored_with_the_injected_variables(
        kube: KubeCluster, webhook: RegisteredWebhook, created: list[tuple[str, str]]) -> None:
    links = f"DB={linked('postgres')}, CACHE={linked('redis')}?required=false&ports=redis:6379"
    done = create(kube, pod("web", links), created)
    assert done.returncode == 0, done.stdout + done.stderr
    stored = kube.get("Pod", SHOP, "web")
    assert stored is not None
    assert env(stored) == [
        ("DB_SERVICE_HOST", HOST), ("DB_SERVICE_PORT", "5432"),
        ("DB_SERVICE_PORT_SQL", "5432"), ("DB_SERVICE_PORT_ADMIN", "5433"),
        ("CACHE_SERVICE_HOST", f"{linked('redis')}.svc.federation."), ("CACHE_SERVICE_PORT", "6379"),
        ("CACHE_SERVICE_PORT_REDIS", "6379"),
        ("DATABASE_URL", "postgres://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)/shop"),
    ]
    recorded = json.loads(stored["metadata"]["annotations"][INJECTED])
    assert recorded["DB"] == {"service": linked("postgres"), "source": "annotation",
                              "variables": ["DB_SERVICE_HOST", "DB_SERVICE_PORT", "DB_SERVICE_PORT_SQL",
                                            "DB_SERVICE_PORT_ADMIN"]}
    assert stored["metadata"]["annotations"][LINKS] == links
    # what the API server defaulted before it called the webhook is kept
    assert stored["spec"]["serviceAccountName"] == "default"
    assert stored["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"


def test_a_pod_whose_required_link_does_not_exist_is_refused_with_the_webhooks_message(
        kube: KubeCluster, webhook: RegisteredWebhook, created: list[tuple[str, str]]) -> None:
    done = create(kube, pod("orphan", f"DB={linked('missing')}"), created)
    assert done.returncode != 0, done.stdout
    assert re.search(
        r'Error from server \(Forbidden\): .*admission webhook "links\.feddns\.io" denied the request: '
        r"feddns links: the pod requires federated services that do not exist: "
        rf"link DB \(annotation\): {re.escape(linked('missing'))}\.svc\.federation\. does not exist \(NXDOMAIN\)",
        done.stderr), done.stderr
    assert kube.get("Pod", SHOP, "orphan") is None


def test_a_namespace_not_opted_in_is_left_alone(
        kube: KubeCluster, webhook: RegisteredWebhook, created: list[tuple[str, str]]) -> None:
    done = create(kube, pod("plain", f"DB={linked('missing')}", namespace=DATA), created)
    assert done.returncode == 0, done.stdout + done.stderr
    stored = kube.get("Pod", DATA, "plain")
    assert stored is not None and INJECTED not in stored["metadata"]["annotations"]
    assert [name for name, _ in env(stored)] == ["DATABASE_URL"]


def test_with_the_webhook_stopped_failure_policy_ignore_lets_pods_through(
        kube: KubeCluster, kubeconfig: str, resolver: UnboundResolver, pki: Pki,
        created: list[tuple[str, str]]) -> None:
    """A webhook of the test's own, so that stopping it leaves the module's running."""
    links = start_links(pki, kubeconfig, resolver)
    try:
        with RegisteredWebhook(kube, links, pki):
            assert links.stop() == 0, links.lines[-20:]
            done = create(kube, pod("unlinked", f"DB={linked('missing')}"), created)
            assert done.returncode == 0, done.stdout + done.stderr
            stored = kube.get("Pod", SHOP, "unlinked")
            assert stored is not None and INJECTED not in stored["metadata"]["annotations"]
            assert [name for name, _ in env(stored)] == ["DATABASE_URL"]
    finally:
        if links.child.running:
            links.stop()


def test_a_running_webhook_logs_one_json_object_a_line(kube: KubeCluster, kubeconfig: str,
                                                       resolver: UnboundResolver, pki: Pki) -> None:
    """``--log-format json`` as an operator's log shipper reads it: every line the webhook writes
    while it starts, lists the Services, answers the API server's reviews and stops is one object."""
    process = LinksProcess(pki, "--log-format", "json", kubeconfig=kubeconfig,
                           resolver=f"127.0.0.1:{resolver.port}").start()
    try:
        with RegisteredWebhook(kube, process, pki):
            pass  # registered: the API server has had the webhook review a probe pod
    finally:
        assert process.stop() == 0, process.lines[-20:]
    objects = [json.loads(line) for line in process.lines]
    assert all({"time", "level", "logger", "message"} <= obj.keys() for obj in objects), objects
    said = [obj["message"] for obj in objects]
    assert any(str(m).startswith("listening on https://127.0.0.1:") for m in said), said
    assert "stopping (SIGTERM)" in said and said[-1] == "stopped", said
