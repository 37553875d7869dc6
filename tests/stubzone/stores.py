"""The real stores behind each ``--backend``, read and disturbed the way an operator would.

Each ``Store`` starts (or is given) the thing the endpoint programs, gives the
``feddns stubzone`` flags that point at it, and reads back what it holds
without going through the endpoint: ``kubectl get configmap``-style reads of
the real kube-apiserver, etcd's own v2 and v3 APIs, ``unbound-control
list_forwards``. The tests common to every backend run on these.
"""

import hashlib
import json
import re
import uuid
from pathlib import Path
from typing import Any, Protocol

import pytest

from harness.etcd import EtcdServer
from harness.kubecluster import KubeCluster
from harness.unbound import UnboundResolver
from tests.support.membercluster import TestObjects

ZONE = "federation"
CLUSTER = "foo"


def canonical(host: str, port: int) -> str:
    """The API's canonical nameserver text: ``1.2.3.4``, ``1.2.3.4:5353``, ``[2001:db8::1]:5353``."""
    if port == 53:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Store(Protocol):
    name: str

    def args(self) -> list[str]: ...
    def stored(self, federation: str) -> list[str] | None: ...
    def version(self) -> str: ...
    def add_foreign(self) -> None: ...
    def foreign_kept(self) -> bool: ...
    def stop(self) -> None: ...
    def start(self) -> None: ...
    def close(self) -> None: ...


class SkyDNSStore:
    """A private etcd 3.4 with ``--enable-v2``; SkyDNS keys in its v2 (or v3) key space."""

    def __init__(self, api: str = "v2") -> None:
        self.name = f"skydns-{api}"
        self.api = api
        self.etcd = EtcdServer()
        self.etcd.start()
        self.prefix = f"/t{uuid.uuid4().hex[:8]}/skydns"

    def args(self) -> list[str]:
        return ["--backend", "skydns", "--etcd", self.etcd.url, "--etcd-prefix", self.prefix,
                "--skydns-etcd-api", self.api]

    def directory(self, federation: str) -> str:
        return f"{self.prefix}/local/cluster/dns/stub/{ZONE}/svc/{federation}/"

    def leaves(self, prefix: str) -> dict[str, str]:
        return self.etcd.v2_leaves(prefix) if self.api == "v2" else self.etcd.get_prefix(prefix)

    def stored(self, federation: str) -> list[str] | None:
        directory = self.directory(federation)
        found = {key: json.loads(value) for key, value in self.leaves(directory).items()
                 if re.fullmatch(r"ns\d+", key[len(directory):])}
        ordered = sorted(found, key=lambda key: int(key[len(directory) + 2:]))
        return [canonical(found[key]["host"], found[key].get("port") or 53) for key in ordered] or None

    def version(self) -> str:
        return str(self.etcd.v2_index() if self.api == "v2" else self.etcd.revision())

    def _foreign(self) -> dict[str, str]:
        return {f"{self.prefix}/local/cluster/dns/stub/local/corp/ns1": '{"host":"192.0.2.250","port":53}',
                f"{self.directory('shared')}note": "not a nameserver"}

    def add_foreign(self) -> None:
        for key, value in self._foreign().items():
            self.etcd.v2_put(key, value) if self.api == "v2" else self.etcd.put(key, value)

    def foreign_kept(self) -> bool:
        everything = self.leaves(self.prefix)
        return all(everything.get(key) == value for key, value in self._foreign().items())

    def stop(self) -> None:
        self.etcd.stop()

    def start(self) -> None:
        self.etcd.start()

    def close(self) -> None:
        self.etcd.destroy()


class ConfigMapStore:
    """The ConfigMap that ``coredns`` or ``kube-dns`` writes, in the session's real kube-apiserver ``kube``.

    It lives in a namespace of the test's own (``--configmap NS/NAME``): other tests' ``kube-system``
    is never touched. ``close()`` deletes the ConfigMap and the namespace (tests/support/membercluster.py).
    ``stop()`` and ``start()`` stop and start that shared server itself (on the same port, with the same
    data): an outage of the cluster's API server, as a test that restarts a session's server may cause.
    """

    def __init__(self, backend: str, directory: Path, kube: KubeCluster) -> None:
        self.name = backend
        self.kube = kube
        self.objects = TestObjects(kube)
        self.namespace = f"stubzone-{uuid.uuid4().hex[:8]}"
        self.kubeconfig = kube.write_kubeconfig(directory / f"{backend}.kubeconfig")
        self.configmap = "coredns-feddns" if backend == "coredns" else "kube-dns"
        self.objects.own("ConfigMap", self.namespace, self.configmap)
        if backend == "kube-dns":  # kube-dns's own ConfigMap exists before any stub domain
            self.objects.apply({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"namespace": self.namespace, "name": "kube-dns"},
                                "data": {"upstreamNameservers": '["192.0.2.53"]'}})

    def args(self) -> list[str]:
        cluster = ["--cluster", CLUSTER] if self.name == "coredns" else []
        return ["--backend", self.name, *cluster, "--kubeconfig", self.kubeconfig,
                "--configmap", f"{self.namespace}/{self.configmap}"]

    def get(self) -> dict[str, Any] | None:
        return self.kube.get("ConfigMap", self.namespace, self.configmap)

    def data(self) -> dict[str, str]:
        return dict((self.get() or {}).get("data") or {})

    def stored(self, federation: str) -> list[str] | None:
        data = self.data()
        if self.name == "kube-dns":
            entry = json.loads(data.get("stubDomains") or "{}").get(f"{federation}.svc.{ZONE}")
            return list(entry) if entry is not None else None
        block = data.get(f"{federation}.server")
        if block is None:
            return None
        (targets,) = re.findall(r"^\s*forward \. (.+)$", block, re.MULTILINE)
        return [canonical(*_split_host_port(target)) for target in targets.split()]

    def version(self) -> str:
        obj = self.get()
        return str(obj["metadata"]["resourceVersion"]) if obj else "absent"

    def _foreign(self) -> dict[str, str]:
        if self.name == "kube-dns":
            return {"upstreamNameservers": '["192.0.2.53"]'}
        return {"README": "hand-written, not a server block"}

    def add_foreign(self) -> None:
        obj = self.get() or {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"namespace": self.namespace, "name": self.configmap}}
        obj["data"] = {**(obj.get("data") or {}), **self._foreign()}
        if self.name == "kube-dns":
            stubs = json.loads(obj["data"].get("stubDomains") or "{}")
            obj["data"]["stubDomains"] = json.dumps({**stubs, "corp.local": ["192.0.2.250"]})
        obj["metadata"]["labels"] = {"owner": "operator"}
        self.objects.apply(obj)

    def foreign_kept(self) -> bool:
        obj = self.get() or {}
        data = obj.get("data") or {}
        kept = all(data.get(k) == v for k, v in self._foreign().items())
        if self.name == "kube-dns":
            kept = kept and json.loads(data.get("stubDomains") or "{}").get("corp.local") == ["192.0.2.250"]
        return kept and obj["metadata"].get("labels") == {"owner": "operator"}

    def stop(self) -> None:
        self.kube.stop()

    def start(self) -> None:
        self.kube.start()

    def close(self) -> None:
        if not self.kube.child.running:  # a test that stopped the server failed before it started it again
            self.kube.start()
        self.objects.close()


def changes_since(kube: KubeCluster, namespace: str, name: str, version: str) -> list[str]:
    """The kinds of change (``ADDED``, ``MODIFIED``, ``DELETED``) the real API server made to ConfigMap
    ``namespace/name`` after resourceVersion ``version``, oldest first: a watch from that version replays
    them (Kubernetes API concepts, "Efficient detection of changes"), and ends after a second. One write
    that changed the object is one event; a write that changed nothing makes none."""
    path = (f"/api/v1/namespaces/{namespace}/configmaps?watch=1&resourceVersion={version}"
            f"&fieldSelector=metadata.name%3D{name}&timeoutSeconds=1")
    answer = kube.request("GET", path)
    if answer is None:
        return []
    events = [answer] if isinstance(answer, dict) else [json.loads(line) for line in answer.splitlines() if line]
    return [str(event["type"]) for event in events]


def list_version(kube: KubeCluster, namespace: str) -> str:
    """The resourceVersion of a list of ``namespace``'s ConfigMaps: a point to watch from."""
    return str(kube.request("GET", f"/api/v1/namespaces/{namespace}/configmaps")["metadata"]["resourceVersion"])


class UnboundStore:
    """A running unbound with remote control, programmed through ``<dir>/feddns/F.conf``."""

    name = "unbound"

    def __init__(self) -> None:
        self.resolver = UnboundResolver("foo", programmable=True).start()
        self.feddns_dir = Path(self.resolver.directory) / "feddns"

    def args(self) -> list[str]:
        return ["--backend", "unbound", "--cluster", CLUSTER, "--unbound-config", str(self.resolver.conf)]

    def stored(self, federation: str) -> list[str] | None:
        addresses = self.resolver.forwards().get(f"{federation}.svc.{ZONE}.")
        if addresses is None:
            return None
        conf = self.feddns_dir / f"{federation}.conf"
        ports = dict(re.findall(r"forward-addr: (\S+)@(\d+)", conf.read_text())) if conf.exists() else {}
        return [canonical(address, int(ports.get(address, 53))) for address in addresses]

    def version(self) -> str:
        files = sorted(self.feddns_dir.glob("*.conf")) if self.feddns_dir.exists() else []
        digest = hashlib.sha256(b"".join(path.name.encode() + path.read_bytes() for path in files)).hexdigest()
        return f"{self.resolver.log.count('Restart of unbound')}:{digest[:12]}"

    def add_foreign(self) -> None:
        """A forward zone of the operator's, in unbound.conf itself (before the include)."""
        text = self.resolver.conf.read_text()
        self.resolver.conf.write_text(text.replace(
            "include-toplevel:", 'forward-zone:\n    name: "corp.local."\n    forward-addr: 192.0.2.250@53\n'
            "include-toplevel:"))
        self.resolver.control("reload")

    def foreign_kept(self) -> bool:
        return self.resolver.forwards().get("corp.local.") == ["192.0.2.250"]

    def stop(self) -> None:
        self.resolver.halt()

    def start(self) -> None:
        self.resolver.start()

    def close(self) -> None:
        self.resolver.stop()


def _split_host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def make_store(name: str, directory: Path, request: pytest.FixtureRequest) -> Any:
    """The store of backend ``name`` (``skydns-v2``, ``skydns-v3``, ``coredns``, ``kube-dns``, ``unbound``);
    coredns and kube-dns take the session's real kube-apiserver ``kube_foo`` from ``request``."""
    if name.startswith("skydns-"):
        return SkyDNSStore(name.removeprefix("skydns-"))
    if name == "unbound":
        return UnboundStore()
    return ConfigMapStore(name, directory, request.getfixturevalue("kube_foo"))


BACKENDS = ["coredns", "kube-dns", "skydns-v2", "skydns-v3", "unbound"]
