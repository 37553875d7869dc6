"""Helpers of the links tests: certificates from ``feddns certs``, the real ``feddns links`` process,
an HTTPS client speaking AdmissionReview, and pods to send."""

import base64
import copy
import http.client
import json
import ssl
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch

from feddns.cli import main as feddns_main
from harness.kubecluster import KubeCluster
from harness.objects import service
from harness.process import ChildProcess

FEDERATION = "myfederation"
LABEL = {"federation.feddns.io/name": FEDERATION}
ZONE = "federation."
STUB_ZONE = f"{FEDERATION}.svc.{ZONE}"

# The federation as Federated-DNS serves it: postgres and redis exist; `idle` exists with no ready shard.
RECORDS = f"""
/{FEDERATION}/_clusters/foo: {{zone: z1, region: r1}}
/{FEDERATION}/data/postgres/foo: {{clusterIP: 10.0.3.64, externalIP: 104.32.64.128}}
/{FEDERATION}/data/redis/foo: {{clusterIP: 10.0.3.65, externalIP: 104.32.64.129}}
/{FEDERATION}/data/idle/foo: {{clusterIP: 10.0.3.66, externalIP: 104.32.64.130, ready: 0}}
"""

JSON = dict[str, Any]
NAMESPACE = "data"
"""The namespace of the local shards, in RECORDS and in the local cluster."""


def local_services() -> list[JSON]:
    """The local cluster (foo): shards of postgres and redis, a Service of another federation, a plain one."""
    return [
        service(NAMESPACE, "postgres", labels=LABEL, ports=[("sql", "TCP", 5432), ("admin", "TCP", 5433)]),
        service(NAMESPACE, "redis", labels=LABEL, ports=[("redis", "TCP", 6379)]),
        service(NAMESPACE, "mysql", labels={"federation.feddns.io/name": "otherfed"},
                ports=[("mysql", "TCP", 3306)]),
        service(NAMESPACE, "idle", ports=[("http", "TCP", 80)]),
    ]


def clear_services(kube: KubeCluster, namespace: str = NAMESPACE) -> None:
    """Delete every Service in ``namespace`` of ``kube``. The session's clusters are shared and no
    controller-manager empties a namespace there: a Service left labelled for the federation would
    be a shard to every later test of that cluster. ApiError if the API server refuses."""
    for found in kube.request("GET", f"/api/v1/namespaces/{namespace}/services")["items"]:
        kube.delete("Service", namespace, found["metadata"]["name"])


def certs(*args: str) -> None:
    """Run ``feddns certs ARGS`` in this process; fails the test unless it exits 0."""
    assert feddns_main(["certs", *args]) == 0, args


@dataclass(frozen=True)
class Pki:
    """A CA (``ca.crt``) in ``dir`` and a server certificate (``server``) for 127.0.0.1 and localhost."""

    dir: Path

    def cert(self, name: str = "server") -> tuple[Path, Path]:
        return self.dir / f"{name}.crt", self.dir / f"{name}.key"

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"


def make_pki(root: Path) -> Pki:
    certs("init", "--dir", str(root), "--cn", "feddns links test CA")
    certs("issue-server", "--dir", str(root), "--ip", "127.0.0.1", "--dns", "localhost")
    return Pki(root)


def pod(name: str = "app", *, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        containers: list[JSON] | None = None, init_containers: list[JSON] | None = None) -> JSON:
    """A ``v1`` Pod as the API server passes it to a mutating webhook (defaults filled in)."""
    spec: JSON = {"containers": containers if containers is not None else [{"name": "app", "image": "busybox"}],
                  "restartPolicy": "Always"}
    if init_containers is not None:
        spec["initContainers"] = init_containers
    meta: JSON = {"name": name, "namespace": "shop"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def admission_review(obj: JSON, *, namespace: str = "shop", operation: str = "CREATE",
                     kind: JSON | None = None, uid: str | None = None) -> JSON:
    """An ``admission.k8s.io/v1`` AdmissionReview request for ``obj``."""
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": kind or {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": kind or {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": obj.get("metadata", {}).get("name", ""), "namespace": namespace,
            "operation": operation, "userInfo": {"username": "system:serviceaccount:shop:deployer"},
            "object": obj, "oldObject": None, "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


@dataclass
class Reply:
    """An HTTP reply: status, the AdmissionReview's ``response`` (``None`` if absent) and the whole body."""

    status: int
    body: JSON | None

    @property
    def response(self) -> JSON:
        assert self.body is not None and "response" in self.body, self.body
        return dict(self.body["response"])

    @property
    def allowed(self) -> bool:
        return bool(self.response["allowed"])

    @property
    def warnings(self) -> list[str]:
        return list(self.response.get("warnings") or [])

    @property
    def patch(self) -> list[JSON]:
        response = self.response
        if "patch" not in response:
            return []
        assert response["patchType"] == "JSONPatch"
        return list(json.loads(base64.b64decode(response["patch"])))

    def applied(self, obj: JSON) -> JSON:
        """``obj`` with the reply's patch applied by the ``jsonpatch`` library (as the API server would)."""
        return jsonpatch.apply_patch(copy.deepcopy(obj), self.patch) if self.patch else copy.deepcopy(obj)


def env(obj: JSON, container: int = 0, key: str = "containers") -> list[tuple[str, str]]:
    """``(name, value)`` of a container's env, in order (``valueFrom`` entries as ``<valueFrom>``)."""
    entries = obj["spec"][key][container].get("env") or []
    return [(e["name"], e.get("value", "<valueFrom>" if "valueFrom" in e else "")) for e in entries]


class LinksProcess:
    """``python -m feddns links --listen 127.0.0.1:0 ...`` with ``pki``'s server certificate.

    ``lines`` is its log so far; ``child`` its :class:`ChildProcess`.
    """

    def __init__(self, pki: Pki, *extra: str, kubeconfig: str | None = None, resolver: str | None = None,
                 policies: Path | None = None) -> None:
        cert, key = pki.cert()
        self.pki = pki
        self.args = [sys.executable, "-m", "feddns", "links", "--listen", "127.0.0.1:0",
                     "--cert", str(cert), "--key", str(key), "--log-level", "debug", *extra]
        for flag, value in (("--kubeconfig", kubeconfig), ("--resolver", resolver), ("--policies", policies)):
            if value is not None:
                self.args += [flag, str(value)]
        self.child = ChildProcess(self.args, ready=r"listening on https://127\.0\.0\.1:(\d+)", name="feddns links")
        self.port = 0

    @property
    def lines(self) -> list[str]:
        return self.child.lines

    def start(self, wait_for_shards: bool = True) -> "LinksProcess":
        """Start; with ``wait_for_shards``, also wait until it has listed the Services (30 s at most each)."""
        listening = self.child.start(timeout=30)
        assert listening is not None
        self.port = int(listening.group(1))
        if wait_for_shards:
            try:
                self.wait_for_log(r"listed \d+ Services labelled", timeout=30)
            except BaseException:
                self.child.stop()
                raise
        return self

    def wait_for_log(self, pattern: str, timeout: float = 10.0, start: int = 0) -> str:
        """The first log line from index ``start`` on matching ``pattern``; raises TimeoutError."""
        return self.child.wait_for(pattern, timeout=timeout, start=start).string

    def stop(self) -> int | None:
        """SIGTERM (SIGKILL after 15 s), then the exit status (0 for a clean stop; None if never started)."""
        return self.child.stop(timeout=15)

    def context(self) -> ssl.SSLContext:
        """A client context trusting the test CA only (as the API server trusts the caBundle only)."""
        return ssl.create_default_context(cafile=str(self.pki.ca))

    def post(self, body: bytes, *, path: str = "/mutate", content_type: str = "application/json",
             method: str = "POST", timeout: float = 30) -> Reply:
        """One HTTPS request over a fresh TLS connection verified against the test CA."""
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context(), timeout=timeout)
        try:
            connection.request(method, path, body=body, headers={"Content-Type": content_type})
            answer = connection.getresponse()
            payload = answer.read()
        finally:
            connection.close()
        try:
            parsed = json.loads(payload)
        except ValueError:
            parsed = None
        return Reply(answer.status, parsed if isinstance(parsed, dict) else None)

    def review(self, obj: JSON, **kw: Any) -> Reply:
        """Send an AdmissionReview for ``obj``; checks the reply is a 200 AdmissionReview echoing the uid."""
        request = admission_review(obj, **kw)
        reply = self.post(json.dumps(request).encode())
        assert reply.status == 200, reply
        assert reply.body is not None and reply.body["apiVersion"] == "admission.k8s.io/v1"
        assert reply.body["kind"] == "AdmissionReview"
        assert reply.response["uid"] == request["request"]["uid"]
        return reply
