"""``feddns controller`` against real member clusters: two real kube-apiservers (harness/kubecluster.py).

The controller runs as deploy/ runs it: on a read-only root filesystem with no writable /tmp, reaching
each cluster with a kubeconfig that carries ``certificate-authority-data`` (as a cloud's does) and the
token of ServiceAccount ``feddns-system/feddns-controller``, bound to nothing but the ClusterRole of
deploy/member/controller-access.yaml. So a verb missing from that role, a temporary file the client
needs, or an object the real API server stores differently from what the controller expects fails here.
"""

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import peers
from harness.controller import ControllerProcess
from harness.etcd import EtcdServer
from harness.kubecluster import KubeCluster
from harness.objects import endpoint_slice, service, service_export
from harness.ports import wait_until
from tests.controller.harness import FEDERATION, LABEL, records

REPO = Path(__file__).parents[2]
ACCESS = REPO / "deploy" / "member" / "controller-access.yaml"


def install_access(kube: KubeCluster) -> None:
    """The MCS API's ServiceExport CRD as that project publishes it, and deploy/member's access objects."""
    kube.install_crds(peers.crd("serviceexports.yaml"))
    kube.load(ACCESS)


def controller_kubeconfig(kube: KubeCluster, directory: Path) -> str:
    """A kubeconfig for the controller's ServiceAccount: inline CA data and its token, nothing else."""
    token = kube.service_account_token("feddns-system", "feddns-controller")
    return kube.write_kubeconfig(directory / f"{kube.name}.kubeconfig", token=token)


@pytest.fixture(scope="module")
def members(kube_foo: KubeCluster, kube_bar: KubeCluster) -> dict[str, KubeCluster]:
    for kube in (kube_foo, kube_bar):
        install_access(kube)
    return {"foo": kube_foo, "bar": kube_bar}


@pytest.fixture(scope="module")
def controller(etcd: EtcdServer, members: dict[str, KubeCluster],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControllerProcess, str]]:
    """One controller for the module on a read-only root, its etcd prefix; ServiceExports select too."""
    directory = tmp_path_factory.mktemp("controller")
    prefix = f"/t{uuid.uuid4().hex[:12]}"
    config = {
        "federation": FEDERATION, "etcd": {"endpoints": [etcd.url], "prefix": prefix}, "leaseSeconds": 2,
        "selector": {"serviceExports": True},
        "clusters": [{"name": name, "kubeconfig": controller_kubeconfig(kube, directory),
                      "zone": f"us-central1-{'ab'[i]}", "region": "us-central1"}
                     for i, (name, kube) in enumerate(members.items())],
    }
    (directory / "controller.yaml").write_text(yaml.safe_dump(config))
    process = ControllerProcess(directory / "controller.yaml", directory / "controller.log", read_only=True)
    process.start()
    yield process, prefix
    assert process.terminate() == 0, process.log()[-3000:]


@pytest.fixture
def namespace(members: dict[str, KubeCluster]) -> Iterator[str]:
    """A namespace of the test's own, emptied after it even when the test failed half-way: a Service of the
    federation left in a shared cluster would be a shard in the controller tests that compare all of etcd."""
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    for kube in members.values():
        for kind, collection in (("ServiceExport", "/apis/multicluster.x-k8s.io/v1alpha1"),
                                 ("EndpointSlice", "/apis/discovery.k8s.io/v1"), ("Service", "/api/v1")):
            plural = kind.lower() + ("es" if kind.endswith("s") else "s")
            for found in kube.request("GET", f"{collection}/namespaces/{name}/{plural}")["items"]:
                kube.delete(kind, name, found["metadata"]["name"])


def shards(etcd: EtcdServer, prefix: str, namespace: str) -> dict[str, Any]:
    """The shard records of ``namespace`` the controller wrote, by ``SERVICE/CLUSTER``."""
    return {key[len(namespace) + 1:]: value for key, value in records(etcd, prefix).items()
            if key.startswith(namespace + "/")}


def wait_shards(etcd: EtcdServer, prefix: str, namespace: str, check: Any, what: str,
                controller: ControllerProcess, timeout: float = 15.0) -> dict[str, Any]:
    def holds() -> tuple[dict[str, Any]] | None:  # a tuple: an empty dict is a result too
        found = shards(etcd, prefix, namespace)
        return (found,) if check(found) else None
    try:
        return wait_until(holds, timeout=timeout, interval=0.1, what=what)[0]
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n--- controller\n{controller.log()[-4000:]}") from exc


def test_shards_follow_services_and_endpoint_slices_through_the_real_api(
        etcd, controller, members, namespace):
    process, prefix = controller
    foo, bar = members["foo"], members["bar"]
    for kube, ip, external in ((foo, "10.0.30.64", "104.32.64.128"), (bar, "10.0.40.20", "104.32.64.130")):
        kube.apply(service(namespace, "myservice", labels=LABEL, type="LoadBalancer", cluster_ip=ip,
                           load_balancer_ips=[external]))
        kube.apply(endpoint_slice(namespace, "myservice", ready=2))
    found = wait_shards(etcd, prefix, namespace, lambda s: set(s) == {"myservice/foo", "myservice/bar"}
                        and all(r.get("ready") == 2 for r in s.values()), "both shards, 2 ready", process)
    assert found["myservice/foo"]["clusterIP"] == "10.0.30.64"
    assert found["myservice/foo"]["externalIP"] == "104.32.64.128"
    assert found["myservice/bar"]["clusterIP"] == "10.0.40.20"

    foo.apply(endpoint_slice(namespace, "myservice", ready=0, not_ready=2))
    wait_shards(etcd, prefix, namespace, lambda s: s.get("myservice/foo", {}).get("ready") == 0,
                "foo's shard at 0 ready", process)

    bar.delete("Service", namespace, "myservice")
    found = wait_shards(etcd, prefix, namespace, lambda s: set(s) == {"myservice/foo"}, "bar's shard gone", process)
    assert found["myservice/foo"]["clusterIP"] == "10.0.30.64"
    foo.delete("Service", namespace, "myservice")
    wait_shards(etcd, prefix, namespace, lambda s: not s, "no shard left", process)


def test_a_service_export_selects_an_unlabelled_service(etcd, controller, members, namespace):
    process, prefix = controller
    foo = members["foo"]
    foo.apply(service(namespace, "exported", cluster_ip="10.0.31.7"))
    foo.apply(endpoint_slice(namespace, "exported", ready=1))
    foo.apply(service(namespace, "private", cluster_ip="10.0.31.8"))
    foo.apply(service_export(namespace, "exported"))
    found = wait_shards(etcd, prefix, namespace, lambda s: "exported/foo" in s, "the exported shard", process)
    assert found["exported/foo"]["clusterIP"] == "10.0.31.7"
    assert "private/foo" not in found
    foo.delete("ServiceExport", namespace, "exported")
    wait_shards(etcd, prefix, namespace, lambda s: not s, "the shard gone with its export", process)


def test_the_controller_resumes_after_the_api_server_restarts(etcd, controller, members, namespace):
    process, prefix = controller
    bar = members["bar"]
    bar.apply(service(namespace, "before", labels=LABEL, cluster_ip="10.0.41.1"))
    wait_shards(etcd, prefix, namespace, lambda s: "before/bar" in s, "the shard made before", process)
    bar.restart()
    bar.apply(service(namespace, "after", labels=LABEL, cluster_ip="10.0.41.2"))
    bar.delete("Service", namespace, "before")
    found = wait_shards(etcd, prefix, namespace, lambda s: set(s) == {"after/bar"},
                        "the change made after the restart", process, timeout=40)
    assert found["after/bar"]["clusterIP"] == "10.0.41.2"
    assert process.child.running
    bar.delete("Service", namespace, "after")


def test_the_controller_role_is_all_it_has(members):
    """The ServiceAccount can list what the controller reads, and cannot read Secrets or write Services."""
    foo = members["foo"]
    kubeconfig = foo.write_kubeconfig(foo.directory / "sa-check.kubeconfig",
                                      token=foo.service_account_token("feddns-system", "feddns-controller"))
    def can(*args: str) -> str:
        return foo.kubectl("auth", "can-i", *args, kubeconfig=kubeconfig, check=False).stdout.strip()
    assert can("watch", "services", "--all-namespaces") == "yes"
    assert can("list", "endpointslices.discovery.k8s.io", "--all-namespaces") == "yes"
    assert can("watch", "serviceexports.multicluster.x-k8s.io", "--all-namespaces") == "yes"
    assert can("get", "secrets", "--all-namespaces") == "no"
    assert can("create", "services", "-n", "default") == "no"
