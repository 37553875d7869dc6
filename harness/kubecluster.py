"""A real member cluster for tests: a real kube-apiserver on loopback (built by scripts/peers.sh).

``KubeCluster(name, etcd_url)`` runs kube-apiserver with:

* its own key prefix (``--etcd-prefix``) in the given etcd, so clusters share the session's etcd;
* a serving certificate for 127.0.0.1 from its own CA (made with stubzone.pki, as ``feddns certs`` would);
* an admin identity: a bearer token in ``--token-auth-file``, group ``system:masters``;
* service-account signing keys and ``--service-cluster-ip-range 10.0.0.0/16,fd00:10:96::/112`` (so the
  ``kubernetes`` Service is 10.0.0.1, the tests' clusterIPs such as 10.0.3.64 are in range, and a
  dual-stack Service can be made);
* ``--authorization-mode RBAC``, so an identity other than the admin has exactly the permissions its
  roles grant, and the admission chain of a real cluster (``MutatingAdmissionWebhook`` among it).

No controller-manager, scheduler or kubelet runs: nothing creates EndpointSlices, ServiceAccounts'
namespaces defaults or Pods' containers. Tests write EndpointSlices themselves (as the fake cluster's
tests did), and a Pod is only stored, never run. ``start()`` returns once ``/readyz`` answers 200
(bootstrap RBAC roles and priority levels in place); a server that exits or stays unready fails with
the tail of its log, naming kube-apiserver.

Objects go in by server-side apply (``apply``), the way ``kubectl apply --server-side`` sends them,
so the API server's validation, defaulting and admission all run. ``kubectl()`` runs the real kubectl
against it.
"""

import base64
import json
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from harness import peers
from harness.ports import free_port
from harness.process import ChildProcess, child_env
from stubzone import pki

SERVICE_CIDR = "10.0.0.0/16,fd00:10:96::/112"
"""``--service-cluster-ip-range``, dual-stack: the ``kubernetes`` Service gets 10.0.0.1 (the first range's
family is every single-stack Service's), and ``ipFamilyPolicy: RequireDualStack`` gets an address of each."""
FIELD_MANAGER = "feddns-tests"
CLUSTER_SCOPED = frozenset({
    "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PriorityClass", "PersistentVolume", "Node",
})
API_VERSIONS = {
    "Namespace": "v1", "Service": "v1", "ConfigMap": "v1", "Secret": "v1", "Pod": "v1", "ServiceAccount": "v1",
    "Endpoints": "v1",
    "EndpointSlice": "discovery.k8s.io/v1", "ServiceExport": "multicluster.x-k8s.io/v1alpha1",
    "DNSEndpoint": "externaldns.k8s.io/v1alpha1", "Lease": "coordination.k8s.io/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1", "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1", "RoleBinding": "rbac.authorization.k8s.io/v1",
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
    "MutatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
    "Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "Job": "batch/v1",
    "PodDisruptionBudget": "policy/v1", "NetworkPolicy": "networking.k8s.io/v1",
    "PersistentVolume": "v1", "PersistentVolumeClaim": "v1", "Node": "v1",
}
"""The API version tests use for each kind, for ``get`` and ``delete`` that name only the kind."""


class ApiError(RuntimeError):
    """The API server refused a request: ``status`` (HTTP) and the ``Status`` object's ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message = status, message


def _path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = kind.lower() + ("es" if kind.endswith("s") else "s")
    scope = "" if kind in CLUSTER_SCOPED or namespace is None else f"/namespaces/{namespace}"
    return f"{base}{scope}/{plural}" + (f"/{name}" if name else "")


class KubeCluster:
    """One member cluster's real kube-apiserver on 127.0.0.1 (see the module doc).

    ``url`` is ``https://127.0.0.1:PORT``; ``ca_pem`` the PEM of the CA that signed its serving
    certificate; ``admin_token`` the admin's bearer token; ``kubeconfig`` the admin's kubeconfig file.
    A subclass (harness/node.py's node) changes ``SERVING_IPS`` and ``_args``.
    """

    SERVING_IPS: tuple[str, ...] = ("127.0.0.1", "10.0.0.1")
    """The IP addresses of the serving certificate: where clients reach the server, and the
    ``kubernetes`` Service's clusterIP."""

    def __init__(self, name: str, etcd_url: str, directory: Path | None = None) -> None:
        self.name, self.etcd_url = name, etcd_url
        self.directory = directory or Path(tempfile.mkdtemp(prefix=f"feddns-kube-{name}-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.admin_token = uuid.uuid4().hex
        self.etcd_prefix = f"/registry-{name}-{uuid.uuid4().hex[:8]}"
        self._write_credentials()
        self.kubeconfig = self.write_kubeconfig(self.directory / "admin.kubeconfig", token=self.admin_token)
        self.started_in: float | None = None
        # " (session)": a test may restart a session's server; its new reader thread is not the test's leak.
        self.child = ChildProcess(self._args(), name=f"kube-apiserver ({name}) (session)",
                                  log_path=self.directory / "kube-apiserver.log")
        self._ssl = ssl.create_default_context(cadata=self.ca_pem)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _write_credentials(self) -> None:
        validity = pki.Validity.days_from(30)
        ca = pki.make_ca(f"{self.name} cluster CA", pki.new_key(), validity)
        key = pki.new_key()
        sans = pki.parse_sans(["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                               "kubernetes.default.svc.cluster.local"], list(self.SERVING_IPS), [])
        serving = pki.issue(ca, "server", "kube-apiserver", sans, key, validity)
        self.ca_pem = ca.certificate.public_bytes(serialization.Encoding.PEM).decode()
        (self.directory / "ca.crt").write_text(self.ca_pem)
        pki.save(serving, key, self.directory / "apiserver.crt", self.directory / "apiserver.key", force=True)
        signing = pki.new_key()
        (self.directory / "sa.key").write_bytes(signing.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (self.directory / "sa.pub").write_bytes(signing.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        (self.directory / "tokens.csv").write_text(f'{self.admin_token},admin,admin,"system:masters"\n')

    def _args(self) -> list[str]:
        d = self.directory
        return [
            peers.binary("kube-apiserver"),
            f"--etcd-servers={self.etcd_url}", f"--etcd-prefix={self.etcd_prefix}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            f"--tls-cert-file={d / 'apiserver.crt'}", f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--cert-dir={d / 'certs'}",
            f"--token-auth-file={d / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'sa.pub'}", f"--service-account-signing-key-file={d / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
            "--endpoint-reconciler-type=none",  # it refuses a loopback --advertise-address
            "--profiling=false", "--v=0",
        ]

    # -- life -------------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> "KubeCluster":
        """Start kube-apiserver and wait until ``/readyz`` is 200; RuntimeError with its log otherwise."""
        began = time.monotonic()
        self.child.start()
        deadline = began + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if not self.child.running:
                raise RuntimeError(f"kube-apiserver ({self.name}) exited before it was ready:\n"
                                   f"{self.child.log[-4000:]}")
            try:
                self.request("GET", "/readyz")
                self.started_in = time.monotonic() - began
                return self
            except (OSError, ApiError) as exc:
                last = str(exc)
            time.sleep(0.25)
        self.child.stop()
        raise RuntimeError(f"kube-apiserver ({self.name}) not ready within {timeout}s ({last}):\n"
                           f"{self.child.log[-4000:]}")

    def stop(self) -> None:
        self.child.stop()

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def restart(self) -> None:
        """Stop and start the server again on the same port with the same data (an API server upgrade)."""
        self.child.stop()
        self.start()

    # -- the API ----------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                token: str | None = None, timeout: float = 30.0) -> Any:
        """One request as the admin (or ``token``); the decoded JSON answer. ApiError on an HTTP error."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            with exc:
                text = exc.read().decode(errors="replace")
            try:
                message = json.loads(text).get("message", text)
            except ValueError:
                message = text
            raise ApiError(exc.code, message) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode(errors="replace")

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or update ``obj`` by server-side apply (force, field manager ``feddns-tests``); a
        ``status`` in it is applied to the status subresource after. Returns the object as stored."""
        meta = obj["metadata"]
        namespace = None if obj["kind"] in CLUSTER_SCOPED else meta.get("namespace", "default")
        if namespace is not None:
            self.ensure_namespace(namespace)
        path = _path(obj["apiVersion"], obj["kind"], namespace, meta["name"])
        query = f"?fieldManager={FIELD_MANAGER}&force=true"
        body = {k: v for k, v in obj.items() if k != "status"}
        stored: dict[str, Any] = self.request("PATCH", path + query, body, "application/apply-patch+yaml")
        if obj.get("status"):
            status = {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                      "metadata": {"name": meta["name"], **({"namespace": namespace} if namespace else {})},
                      "status": obj["status"]}
            stored = self.request("PATCH", path + "/status" + query, status, "application/apply-patch+yaml")
        return stored

    def ensure_namespace(self, namespace: str) -> None:
        """Create ``namespace`` with its ``default`` ServiceAccount (no controller-manager does either here)."""
        account = {"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "default", "namespace": namespace}}
        for obj in ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, account):
            try:
                self.request("POST", _path("v1", obj["kind"], None if obj["kind"] == "Namespace" else namespace), obj)
            except ApiError as exc:
                if exc.status != 409:
                    raise

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when the API server has none of that name."""
        try:
            found: dict[str, Any] = self.request("GET", _path(API_VERSIONS[kind], kind, namespace, name))
            return found
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, kind: str, namespace: str | None, name: str) -> None:
        """Delete the object (foreground not needed: no garbage collector runs here)."""
        self.request("DELETE", _path(API_VERSIONS[kind], kind, namespace, name))

    def load(self, path: str | Path) -> list[dict[str, Any]]:
        """Apply every object of a YAML file (a ``---``-separated stream), in order."""
        return [self.apply(obj) for obj in yaml.safe_load_all(Path(path).read_text()) if obj]

    def install_crds(self, path: str | Path, timeout: float = 30.0) -> list[str]:
        """Apply the CRDs of a file and wait until each is ``Established`` (its API served); their names."""
        names = [crd["metadata"]["name"] for crd in self.load(path)]
        deadline = time.monotonic() + timeout
        for name in names:
            while not self._established(name):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {name} not Established within {timeout}s in cluster {self.name}")
                time.sleep(0.1)
        return names

    def _established(self, name: str) -> bool:
        crd = self.get("CustomResourceDefinition", None, name) or {}
        conditions = crd.get("status", {}).get("conditions") or []  # null until the server has looked at it
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A token of ServiceAccount ``namespace/name`` from the TokenRequest API (created if missing)."""
        self.ensure_namespace(namespace)
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
        try:
            self.request("POST", _path("v1", "ServiceAccount", namespace), account)
        except ApiError as exc:
            if exc.status != 409:
                raise
        answer = self.request("POST", _path("v1", "ServiceAccount", namespace, name) + "/token",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                               "spec": {"expirationSeconds": seconds}})
        return str(answer["status"]["token"])

    # -- clients ----------------------------------------------------------------------------------

    def write_kubeconfig(self, path: str | Path, *, token: str | None = None, context: str | None = None) -> str:
        """A kubeconfig at ``path`` (returned) for this server: the CA as ``certificate-authority-data``
        (inline, as a cloud's kubeconfig has it) and a bearer ``token`` (default: the admin's)."""
        context = context or self.name
        user = f"{self.name}-user"
        config = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": self.name, "cluster": {
                "server": self.url, "certificate-authority-data": base64.b64encode(self.ca_pem.encode()).decode()}}],
            "users": [{"name": user, "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": context, "context": {"cluster": self.name, "user": user}}],
            "current-context": context,
        }
        Path(path).write_text(yaml.safe_dump(config))
        return str(path)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The real kubectl against this server (as the admin unless ``kubeconfig``), killed after ``timeout``
        seconds; with ``check``, a non-zero exit raises RuntimeError with its output."""
        env = child_env(KUBECONFIG=kubeconfig or self.kubeconfig, HOME=str(self.directory))
        done = subprocess.run([peers.binary("kubectl"), f"--cache-dir={self.directory / 'kubectl-cache'}", *args],
                              input=input, capture_output=True, text=True, env=env, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    def serving_certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate((self.directory / "apiserver.crt").read_bytes())
