"""Loading the manifests in deploy/ and walking their pods, for the manifest tests.

The manifests are plain YAML (one directory per federation, docs/choices.md), so
"rendering" is reading every document of every file.
"""

import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).parents[2]
DEPLOY = REPO / "deploy"
FEDDNS_IMAGE = "ghcr.io/feddns/feddns"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")

Obj = dict[str, Any]


def manifest_files() -> list[Path]:
    """Every ``*.yaml`` under deploy/, sorted."""
    return sorted(DEPLOY.rglob("*.yaml"))


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
        return f"{self.workload['kind']} {namespace(self.workload)}/{self.workload['metadata']['name']} container {self.spec['name']}"

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


def corefile_lines(corefile: str) -> list[list[str]]:
    """The Corefile's lines as words (comments and blank lines dropped)."""
    return [shlex.split(line, comments=True) for line in corefile.splitlines() if line.split("#")[0].strip()]
