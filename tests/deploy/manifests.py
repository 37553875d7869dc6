"""Loading the manifests in deploy/ and walking their pods, for the manifest tests.

The manifests are plain YAML (one directory per federation, docs/choices.md), so
"rendering" is reading every document of every file. Files named
``*.patch.yaml`` are strategic merge patches of a cluster's own objects (the
stock CoreDNS Deployment): :func:`strategic_merge` applies them to the stock
objects in tests/deploy/stock/ the way ``kubectl patch`` does.
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).parents[2]
DEPLOY = REPO / "deploy"
FEDDNS_IMAGE = "ghcr.io/feddns/feddns"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job")

Obj = dict[str, Any]


STOCK = Path(__file__).parent / "stock"
PATCH_SUFFIX = ".patch.yaml"
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
              "volumeMounts": "mountPath", "ports": "containerPort"}
"""The patch merge keys of the lists a Deployment patch touches (Kubernetes API, ``x-kubernetes-patch-merge-key``)."""


MONITORING = DEPLOY / "monitoring"
"""prometheus-operator objects (CRDs, not in the Kubernetes schemas): tests/deploy/test_monitoring.py."""
HELM = DEPLOY / "helm"
PLATFORM_CRS = (DEPLOY / "cluster-dns" / "rke2" / "rke2-coredns-config.yaml",)
"""Manifests of a platform's own custom resources (RKE2's HelmChartConfig): no Kubernetes schema holds
them; the API server's dry run checks them against their CRD (tests/deploy/test_dry_run.py)."""
"""The charts the plain manifests are rendered from (their templates are not manifests): tests/deploy/test_charts.py."""


def manifest_files() -> list[Path]:
    """Every ``*.yaml`` under deploy/ that is a whole manifest of built-in kinds (not a
    patch, not the monitoring CRDs, not a platform's custom resource, not a chart), sorted."""
    return sorted(path for path in DEPLOY.rglob("*.yaml")
                  if not path.name.endswith(PATCH_SUFFIX) and MONITORING not in path.parents
                  and HELM not in path.parents and path not in PLATFORM_CRS)


def patch_files() -> list[Path]:
    """Every strategic merge patch under deploy/, sorted."""
    return sorted(DEPLOY.rglob("*" + PATCH_SUFFIX))


def strategic_merge(base: Any, patch: Any, field: str = "") -> Any:
    """``base`` with ``patch`` merged in: maps recursively, lists of :data:`MERGE_KEYS` item by item."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = strategic_merge(base[key], value, key) if key in base else value
        return merged
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        merged_list = list(base)
        for item in patch:
            index = next((i for i, old in enumerate(merged_list) if old.get(key) == item.get(key)), None)
            if index is None:
                merged_list.append(item)
            else:
                merged_list[index] = strategic_merge(merged_list[index], item)
        return merged_list
    return patch


VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def service_variables(objects: list[Obj], ns: str) -> dict[str, str]:
    """The ``<NAME>_SERVICE_HOST``/``_PORT`` variables Kubernetes gives pods for the Services of ``ns``
    (headless Services get none); the address is made up."""
    found = {}
    for obj in objects:
        if obj["kind"] == "Service" and namespace(obj) == ns and obj["spec"].get("clusterIP") != "None":
            prefix = obj["metadata"]["name"].upper().replace("-", "_")
            found[f"{prefix}_SERVICE_HOST"] = "10.96.0.10"
            found[f"{prefix}_SERVICE_PORT"] = str(obj["spec"]["ports"][0]["port"])
    return found


def expand(text: str, variables: dict[str, str]) -> tuple[str, list[str]]:
    """``text`` with ``$(VAR)`` replaced as the kubelet does; also the names it could not replace."""
    missing = [name for name in VARIABLE.findall(text) if name not in variables]
    return VARIABLE.sub(lambda m: variables.get(m.group(1), m.group(0)), text), missing


def load(path: Path) -> list[Obj]:
    """The non-empty YAML documents of ``path``."""
    with open(path, encoding="utf-8") as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc]


def all_objects() -> list[tuple[Path, Obj]]:
    return [(path, obj) for path in manifest_files() for obj in load(path)]


def namespace(obj: Obj) -> str:
    return str(obj["metadata"].get("namespace", "default"))


def find(objects: list[Obj], kind: str, ns: str, name: str) -> Obj:
    """The object of that kind, namespace and name; AssertionError naming it when absent."""
    for obj in objects:
        if obj["kind"] == kind and namespace(obj) == ns and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"{kind} {ns}/{name} is referenced but not in the manifests")


@dataclass(frozen=True)
class Container:
    """One container of a workload's pod template."""

    workload: Obj
    spec: Obj

    @property
    def where(self) -> str:
        workload = self.workload
        return f"{workload['kind']} {namespace(workload)}/{workload['metadata']['name']} container {self.spec['name']}"

    @property
    def is_feddns(self) -> bool:
        return str(self.spec["image"]).startswith(FEDDNS_IMAGE + ":")

    def port(self, name: str) -> Obj:
        for port in self.spec.get("ports", []):
            if port["name"] == name:
                return dict(port)
        raise AssertionError(f"{self.where}: no port named {name!r}")

    def mount_for(self, path: str) -> Obj:
        """The volumeMount whose mountPath holds ``path``."""
        for mount in self.spec.get("volumeMounts", []):
            if path == mount["mountPath"] or path.startswith(mount["mountPath"].rstrip("/") + "/"):
                return dict(mount)
        raise AssertionError(f"{self.where}: {path} is on no volumeMount")


def containers(objects: list[Obj]) -> Iterator[Container]:
    for obj in objects:
        if obj["kind"] in WORKLOADS:
            for spec in obj["spec"]["template"]["spec"]["containers"]:
                yield Container(obj, spec)


def flag(args: list[str], name: str) -> list[str]:
    """Every value of ``--name=value`` in ``args``."""
    return [arg.split("=", 1)[1] for arg in args if arg.startswith(f"--{name}=")]


def dockerfile_instruction(name: str) -> list[str]:
    """The JSON-form arguments of the Dockerfile's last ``name`` instruction (ENTRYPOINT, CMD)."""
    lines = [line for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith(name + " ")]
    assert lines, f"Dockerfile has no {name}"
    return list(yaml.safe_load(lines[-1][len(name) + 1:]))

