"""What the platform backends' tests share: the platforms' shipped objects (tests/fixtures/platforms/),
the federation Federated-DNS serves them, and the least-privileged identity of the endpoint."""

import uuid
from pathlib import Path
from typing import Any

import yaml

from harness.kubecluster import KubeCluster

FIXTURES = Path(__file__).parents[1] / "fixtures" / "platforms"
QNAME = "myservice.myns.myfederation.svc.federation."
FOO_FIRST = ["10.0.3.64", "104.32.64.130"]
"""What cluster foo is answered for QNAME: its own clusterIP, then bar's externalIP (same region)."""
EXTERNAL = ["104.32.64.128", "104.32.64.130"]
"""What a client of no known cluster is answered: every externalIP."""


def records(foo_cidrs: list[str]) -> str:
    """The records file of ``feddns serve`` (docs/reference.md section 4): myns/myservice in clusters foo
    and bar, one region; foo's queries come from ``foo_cidrs``."""
    return yaml.safe_dump({
        "/myfederation/myns/myservice/foo": {"clusterIP": "10.0.3.64", "externalIP": "104.32.64.128", "ready": 1},
        "/myfederation/myns/myservice/bar": {"clusterIP": "10.0.4.20", "externalIP": "104.32.64.130", "ready": 1},
        "/myfederation/_clusters/foo": {"zone": "us-central1-a", "region": "us-central1", "cidrs": foo_cidrs},
        "/myfederation/_clusters/bar": {"zone": "us-central1-b", "region": "us-central1",
                                        "cidrs": ["10.241.0.0/16"]},
    })


def fixture(name: str) -> list[dict[str, Any]]:
    """The objects of tests/fixtures/platforms/``name``."""
    return [obj for obj in yaml.safe_load_all((FIXTURES / name).read_text()) if obj]


def kubeconfig_with_rules(kube: KubeCluster, directory: Path, namespace: str | None,
                          rules: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str | None, str]]]:
    """A kubeconfig for a new ServiceAccount of kube-system bound to ``rules`` only: a Role in ``namespace``,
    or a ClusterRole when it is ``None``. Returns it and the (kind, namespace, name) of what was made."""
    name = f"feddns-stubzone-{uuid.uuid4().hex[:8]}"
    cluster = namespace is None
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole" if cluster else "Role",
            "metadata": {"name": name, **({} if cluster else {"namespace": namespace})}, "rules": rules}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1",
               "kind": "ClusterRoleBinding" if cluster else "RoleBinding",
               "metadata": {"name": name, **({} if cluster else {"namespace": namespace})},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"], "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}]}
    kube.apply(role)
    kube.apply(binding)
    token = kube.service_account_token("kube-system", name)
    made = [(role["kind"], namespace, name), (binding["kind"], namespace, name),
            ("ServiceAccount", "kube-system", name)]
    return kube.write_kubeconfig(directory / f"{name}.kubeconfig", token=token), made


def delete_all(kube: KubeCluster, made: list[tuple[str, str | None, str]]) -> None:
    for kind, namespace, name in made:
        if kube.get(kind, namespace, name) is not None:
            kube.delete(kind, namespace, name)
