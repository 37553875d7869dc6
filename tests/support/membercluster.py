"""A member cluster as the controller tests drive it, real or fake.

``MemberCluster`` is what both kinds offer a test: objects in (``apply``, ``load``), read
(``get``), deleted (``delete``), and a kubeconfig for the controller (``write_kubeconfig``).
harness/kubecluster.py's ``KubeCluster`` is a real kube-apiserver shared by the test session;
``TestObjects`` is one test's view of it, which deletes at teardown every object the test made
through it, and the namespaces it had to create, so the shared server is left as it was.
tests/support/fakekube.py's ``FakeKube`` meets the protocol too, and adds the faults a real
server cannot show on demand (stop, black_hole, hold, compact, ...): ``TestObjects`` has none of
them, and a test that asks it for one fails naming the fake to use instead.
"""

import copy
from pathlib import Path
from typing import Any, NoReturn, Protocol

import yaml

from harness.kubecluster import CLUSTER_SCOPED, ApiError, KubeCluster

SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")
"""``metadata`` fields the API server sets (Kubernetes API, ObjectMeta): dropped from an object read
back before it is applied again. A server-side apply refuses ``managedFields``, and a ``uid`` or
``resourceVersion`` of a deleted object would be a precondition that fails."""


class MemberCluster(Protocol):
    """A member cluster's API server as the controller tests use it (FakeKube or TestObjects)."""

    @property
    def name(self) -> str: ...

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def delete(self, kind: str, namespace: str, name: str) -> None: ...

    def load(self, path: str) -> list[dict[str, Any]]: ...

    def write_kubeconfig(self, path: str) -> str: ...


class TestObjects:
    """One test's objects in a session's real kube-apiserver ``kube``: ``close()`` deletes them.

    ``apply`` creates or updates by server-side apply (``KubeCluster.apply``) and remembers the
    object; ``close()`` deletes every object remembered, newest first (one already gone is
    fine), then each namespace that did not exist before the test (deleted and finalized, as
    the namespace controller does once a namespace is empty: none runs here).
    """

    __test__ = False  # not a test class, whatever pytest's name rule says

    def __init__(self, kube: KubeCluster) -> None:
        self.kube = kube
        self._made: dict[tuple[str, str | None, str], None] = {}  # (kind, namespace, name), in order
        self._namespaces: list[str] = []  # created by this test, in order
        self._known: set[str] = set()

    @property
    def name(self) -> str:
        return self.kube.name

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or update ``obj`` (a dict in the API's JSON shape); the object as stored."""
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        for field in SERVER_SET:
            meta.pop(field, None)
        namespace = None if obj["kind"] in CLUSTER_SCOPED else meta.setdefault("namespace", "default")
        if namespace is not None:
            self._remember_namespace(namespace)
        self._made[(obj["kind"], namespace, meta["name"])] = None
        return self.kube.apply(obj)

    def own(self, kind: str, namespace: str, name: str) -> None:
        """Remember an object that the program under test may create, so ``close()`` deletes it too, and
        create its namespace now if it does not exist (deleted at ``close()`` like the others)."""
        self._remember_namespace(namespace)
        self.kube.ensure_namespace(namespace)
        self._made[(kind, namespace, name)] = None

    def _remember_namespace(self, namespace: str) -> None:
        if namespace not in self._known:
            if self.kube.get("Namespace", None, namespace) is None:
                self._namespaces.append(namespace)
            self._known.add(namespace)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.kube.get(kind, namespace, name)

    def delete(self, kind: str, namespace: str | None, name: str) -> None:
        self.kube.delete(kind, namespace, name)

    def load(self, path: str | Path) -> list[dict[str, Any]]:
        """Apply every object of a YAML stream, in order."""
        return [self.apply(obj) for obj in yaml.safe_load_all(Path(path).read_text()) if obj]

    def write_kubeconfig(self, path: str | Path) -> str:
        """The admin's kubeconfig for this server, written at ``path``."""
        return self.kube.write_kubeconfig(path)

    def close(self) -> None:
        """Delete what the test made, newest first, then the namespaces it created."""
        for kind, namespace, name in reversed(list(self._made)):
            self._delete_if_there(kind, namespace, name)
        for namespace in reversed(self._namespaces):
            self._delete_if_there("ServiceAccount", namespace, "default")  # made by ensure_namespace
            self._delete_if_there("Namespace", None, namespace)
            self.kube.request("PUT", f"/api/v1/namespaces/{namespace}/finalize",
                              {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace},
                               "spec": {"finalizers": []}})
        self._made.clear()
        self._namespaces.clear()
        self._known.clear()

    def _delete_if_there(self, kind: str, namespace: str | None, name: str) -> None:
        try:
            self.kube.delete(kind, namespace, name)
        except ApiError as exc:
            if exc.status != 404:
                raise

    def __getattr__(self, attribute: str) -> NoReturn:
        raise AttributeError(
            f"{attribute!r} is not something a shared real kube-apiserver ({self.kube.name}) does on demand: "
            f"a test that needs that fault uses FakeKube (fixtures fake_foo, fake_bar, fake of tests/controller)")
