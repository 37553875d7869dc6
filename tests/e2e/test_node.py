"""feddns as deployed, on a real node (harness/node.py): the image built from the Dockerfile, both
charts installed with the real helm the way docs/operations.md says, and pods that look names up
through the node's cluster DNS (kubeadm's CoreDNS). The tests see feddns only through what pods
print and what the API server holds.

The node is its own single-cluster federation: cluster foo hosts Federated-DNS (feddns-federation:
serve, the controller, the chart's own 3-member etcd on PersistentVolumes) and is its member
(feddns-member: the stub-zone endpoint, the controller's access, the links webhook). The test plays
the cloud's load-balancer controller: it gives Service feddns an address (Node.assign_load_balancer),
which the controller follows (``nameservers.fromService``) and POSTs to foo's endpoint.

Join and leave are timed from the endpoint's write of ConfigMap coredns-feddns (its managedFields
time) to the first answer, or the first lack of one, in a pod that asks every 0.2 s: what a user
waits for, through kubelet's ConfigMap sync and CoreDNS's ``reload``. The figures are printed and
recorded in docs/operations.md.
"""

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import images, peers
from harness.node import LOAD_BALANCER_RANGE, Node, kubeadm_coredns_objects
from harness.process import child_env
from tests.e2e.figures import FIGURES

REPO = Path(__file__).parents[2]
FEDERATION_NS = "feddns-myfederation"
MEMBER_NS = "feddns-system"
LINKS_NS = "feddns-links"
APP_NS = "myns"
QNAME = "myservice.myns.myfederation.svc.federation."
SERVE_IP = LOAD_BALANCER_RANGE.replace("0/24", "53")
LOOP_SECONDS = 0.2
PROBE_INTERVAL = 5
"""Seconds between the endpoint's _whoami probes (clusterDNS.probeInterval; the chart's default is 30)."""


@dataclass
class Federation:
    """What the install made: the node, its files, the service's clusterIP and the join time."""

    node: Node
    directory: Path
    cluster_ip: str
    join_seconds: float
    values: dict[str, Any]
    leave_seconds: float | None = None
    timings: dict[str, float] = field(default_factory=dict)


def sh(node: Node, *args: str, input: str | None = None) -> str:
    """A command of docs/operations.md, run as a user runs it: kubectl, helm and feddns on PATH,
    the node's admin kubeconfig. RuntimeError with its output if it fails."""
    path = os.pathsep.join([str(Path(peers.binary("kubectl")).parent), str(Path(peers.binary("helm")).parent),
                            str(Path(sys.executable).parent), os.environ["PATH"]])
    env = child_env(PATH=path, KUBECONFIG=node.kubeconfig, HOME=str(node.directory),
                    HELM_CACHE_HOME=str(node.directory / "helm-cache"),
                    HELM_CONFIG_HOME=str(node.directory / "helm-config"),
                    HELM_DATA_HOME=str(node.directory / "helm-data"))
    done = subprocess.run(list(args), input=input, capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def stub_zone_written(node: Node) -> float:
    """When the stub-zone endpoint wrote the federation's key into ConfigMap coredns-feddns: the
    ``time`` of the managedFields entry that owns ``data.myfederation.server``, in Unix seconds
    (the API server's clock, which is this machine's)."""
    obj = node.api.get("ConfigMap", "kube-system", "coredns-feddns") or {}
    times = [entry["time"] for entry in obj.get("metadata", {}).get("managedFields", [])
             if "f:myfederation.server" in entry.get("fieldsV1", {}).get("f:data", {}) and entry.get("time")]
    assert times, f"ConfigMap coredns-feddns has no myfederation.server written: {obj.get('metadata')}"
    return max(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in times)


def dig_loop_pod(name: str, qname: str) -> dict[str, Any]:
    """A pod that asks ``qname`` through its resolv.conf (the cluster DNS) every LOOP_SECONDS and
    prints ``<unix time> <rcode> <addresses>``, one line an answer."""
    script = (f"while true; do out=$(dig +tries=1 +time=1 +noall +comments +answer {qname} A 2>&1); "
              "rcode=$(echo \"$out\" | sed -n 's/.*status: \\([A-Z]*\\).*/\\1/p'); "
              "ips=$(echo \"$out\" | awk '$4 == \"A\" {printf \"%s \", $5}'); "
              f"echo \"$(date +%s.%N) ${{rcode:-TIMEOUT}} $ips\"; sleep {LOOP_SECONDS}; done")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": APP_NS},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "dig", "image": images.DNSUTILS, "imagePullPolicy": "Never",
                "command": ["bash", "-c", script]}]}}


@dataclass(frozen=True)
class Answer:
    at: float
    rcode: str
    addresses: tuple[str, ...]


def answers(node: Node, pod: str) -> list[Answer]:
    """What the dig loop pod printed so far."""
    found = []
    for line in node.pod_logs(APP_NS, pod).splitlines():
        parts = line.split()
        if len(parts) >= 2 and re.fullmatch(r"\d+\.\d+", parts[0]):
            found.append(Answer(float(parts[0]), parts[1], tuple(parts[2:])))
    return found


def wait_for_answer(node: Node, pod: str, predicate: Any, after: float, timeout: float) -> Answer:
    """The first answer printed at or after ``after`` that ``predicate`` accepts; AssertionError with
    the last answers after ``timeout`` seconds."""
    return wait_for_steady(node, pod, predicate, after, timeout, steady=0)[0]


def wait_for_steady(node: Node, pod: str, predicate: Any, after: float, timeout: float,
                    steady: float = 10.0) -> tuple[Answer, Answer]:
    """The first answer at or after ``after`` that ``predicate`` accepts, and the first from which on
    every answer does, for at least ``steady`` seconds (the cluster DNS has two replicas, which
    reload apart). AssertionError with the last answers after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        seen = [a for a in answers(node, pod) if a.at >= after]
        first = next((a for a in seen if predicate(a)), None)
        wrong = [i for i, a in enumerate(seen) if not predicate(a)]
        settled = seen[wrong[-1] + 1:] if wrong else seen
        if first is not None and settled and settled[-1].at - settled[0].at >= steady:
            return first, settled[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"no such answer in pod {pod} within {timeout}s; the last: {seen[-5:]}\n"
                                 f"{node.describe(APP_NS)}")
        time.sleep(1)


def wait_running(node: Node, namespace: str, pod: str, timeout: float = 120) -> None:
    done = node.kubectl("-n", namespace, "wait", "--for=condition=Ready", f"pod/{pod}", f"--timeout={timeout}s",
                        check=False)
    assert done.returncode == 0, f"pod {namespace}/{pod} not Ready: {done.stderr}\n{node.describe(namespace)}"


def persistent_volumes(node: Node, count: int) -> None:
    """``count`` hostPath PersistentVolumes for the chart's etcd, owned by its user (65532), as an
    operator of a cluster without a provisioner makes them (docs/operations.md)."""
    for index in range(count):
        path = node.directory / "volumes" / f"etcd-{index}"
        path.mkdir(parents=True)
        os.chown(path, 65532, 65532)
        node.api.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"feddns-etcd-{index}"},
                        "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                                 "persistentVolumeReclaimPolicy": "Retain",
                                 "hostPath": {"path": str(path), "type": "Directory"}}})


def install(node: Node, directory: Path) -> Federation:
    """docs/operations.md's "Install a federation", step by step, for cluster foo."""
    began = time.monotonic()
    timings: dict[str, float] = {}
    pki, clusters = directory / "pki", directory / "clusters"
    # 1. The stub-zone PKI.
    sh(node, "feddns", "certs", "init", "--dir", str(pki))
    sh(node, "feddns", "certs", "issue-client", "--dir", str(pki), "--cn", "feddns-controller")
    # 2. foo's stub-zone endpoint (its Service's in-cluster name: foo hosts the controller), the
    #    controller's access, the links webhook, then foo's kubeconfig for the controller.
    sh(node, "feddns", "certs", "issue-server", "--dir", str(pki), "--name", "foo",
       "--dns", "feddns-stubzone.kube-system.svc")
    links = directory / "links"
    sh(node, "bash", "deploy/links/certs.sh", str(links))
    member_values = {
        "cluster": "foo",
        "clusterDNS": {"probeInterval": PROBE_INTERVAL},
        "stubzone": {"service": {"type": "ClusterIP"}},
        "links": {"enabled": True, "namespace": LINKS_NS, "createNamespace": True,
                  "caBundle": base64.b64encode((links / "ca.crt").read_bytes()).decode(),
                  "policies": [{"name": "myservice", "namespace": APP_NS, "selector": {"matchLabels": {"links": "yes"}},
                                "links": [{"prefix": "MYSERVICE", "service": "myservice.myns.myfederation",
                                           "ports": [{"name": "http", "port": 80}]}]}]},
    }
    (directory / "foo.yaml").write_text(yaml.safe_dump(member_values))
    sh(node, "helm", "install", "feddns-member", "deploy/helm/feddns-member", "-n", MEMBER_NS, "--create-namespace",
       "-f", str(directory / "foo.yaml"),
       "--set-file", f"stubzone.tls.cert={pki / 'foo.crt'},stubzone.tls.key={pki / 'foo.key'},"
                     f"stubzone.tls.ca={pki / 'ca.crt'},links.tls.cert={links / 'server.crt'},"
                     f"links.tls.key={links / 'server.key'}")
    sh(node, "bash", "deploy/cluster-dns/coredns/coredns-import.sh", "--context", "node")
    clusters.mkdir()
    (clusters / "foo.kubeconfig").write_text(sh(
        node, "bash", "deploy/member/kubeconfig.sh", "--context", "node", "--name", "foo",
        "--server", "https://kubernetes.default.svc"))
    timings["member"] = time.monotonic() - began
    # 3. The kubeconfigs and the client certificate as Secrets, then the federation.
    sh(node, "kubectl", "create", "namespace", FEDERATION_NS)
    sh(node, "kubectl", "-n", FEDERATION_NS, "create", "secret", "generic", "feddns-clusters",
       f"--from-file={clusters}")
    sh(node, "kubectl", "-n", FEDERATION_NS, "create", "secret", "generic", "feddns-stubzone-client",
       f"--from-file=tls.crt={pki / 'client.crt'}", f"--from-file=tls.key={pki / 'client.key'}",
       f"--from-file=ca.crt={pki / 'ca.crt'}")
    persistent_volumes(node, 3)
    federation_values = {
        "federation": "myfederation",
        "clusters": [{"name": "foo", "zone": "zone-a", "region": "region-1",
                      "stubzone": {"url": "https://feddns-stubzone.kube-system.svc"}}],
        "nameservers": {"fromService": {"cluster": "foo"}},
    }
    (directory / "myfederation.yaml").write_text(yaml.safe_dump(federation_values))
    sh(node, "helm", "install", "myfederation", "deploy/helm/feddns-federation", "-n", FEDERATION_NS,
       "-f", str(directory / "myfederation.yaml"))
    node.assign_load_balancer(FEDERATION_NS, "feddns", SERVE_IP)
    for kind, name in (("StatefulSet", "feddns-etcd"), ("Deployment", "feddns"), ("Deployment", "feddns-controller")):
        node.wait_rollout(FEDERATION_NS, kind, name, 240)
    for kind, name, namespace in (("Deployment", "feddns-stubzone", "kube-system"),
                                  ("Deployment", "feddns-links", LINKS_NS), ("Deployment", "coredns", "kube-system")):
        node.wait_rollout(namespace, kind, name, 180)
    timings["federation"] = time.monotonic() - began - timings["member"]
    return Federation(node, directory, "", 0.0, federation_values, timings=timings)


def make_service(node: Node) -> str:
    """Federated service myns/myservice in foo: a Deployment of one pod (the pause image) and its
    Service, labelled for the federation. Its clusterIP."""
    node.api.ensure_namespace(APP_NS)
    node.api.apply({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "myservice", "namespace": APP_NS},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "myservice"}},
                             "template": {"metadata": {"labels": {"app": "myservice"}},
                                          "spec": {"containers": [{"name": "app", "image": images.PAUSE,
                                                                   "imagePullPolicy": "Never"}]}}}})
    service = node.api.apply({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "myservice", "namespace": APP_NS, "labels": {"federation.feddns.io/name": "myfederation"}},
        "spec": {"selector": {"app": "myservice"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
    node.wait_rollout(APP_NS, "Deployment", "myservice", 120)
    return str(service["spec"]["clusterIP"])


@pytest.fixture(scope="module")
def federation(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """The federation installed, the service made, and a pod that asks for it from the start: the
    join is timed from the endpoint's write to the first answer with foo's clusterIP."""
    directory = tmp_path_factory.mktemp("federation")
    made = install(node, directory)
    made.cluster_ip = make_service(node)
    node.api.apply(dig_loop_pod("asker", QNAME))
    wait_running(node, APP_NS, "asker")
    first, every = wait_for_steady(node, "asker", lambda a: a.addresses[:1] == (made.cluster_ip,), 0, 420)
    written = stub_zone_written(node)
    made.join_seconds = every.at - written
    FIGURES["join"] = (f"{first.at - written:.1f} s from the endpoint's write of coredns-feddns to the pod's first "
                       f"answer with foo's clusterIP, {made.join_seconds:.1f} s to every answer (both CoreDNS "
                       "replicas reloaded)")
    FIGURES["install"] = ", ".join(f"{part} {seconds:.0f} s" for part, seconds in made.timings.items())
    yield made


def test_a_pod_gets_its_own_clusters_shard_first_through_the_cluster_dns(federation: Federation) -> None:
    """A pod's resolver (the node's CoreDNS, forwarding the federation with foo's tag) answers
    myservice with foo's clusterIP first; the tag is what makes it the clusterIP."""
    node = federation.node
    pod = dig_loop_pod("one-query", QNAME)
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["containers"][0]["command"] = ["dig", "+short", QNAME]
    node.api.apply(pod)
    deadline = time.monotonic() + 60
    while (phase := (node.api.get("Pod", APP_NS, "one-query") or {}).get("status", {}).get("phase")) != "Succeeded":
        assert phase != "Failed" and time.monotonic() < deadline, node.describe(APP_NS)
        time.sleep(0.5)
    printed = node.pod_logs(APP_NS, "one-query").split()
    assert printed[:1] == [federation.cluster_ip], printed
    resolv = node.kubectl("-n", APP_NS, "exec", "asker", "--", "cat", "/etc/resolv.conf").stdout
    assert "nameserver 198.19.0.10" in resolv
    FIGURES["a pod's /etc/resolv.conf"] = " | ".join(resolv.strip().splitlines())
    FIGURES[f"a pod's dig +short {QNAME}"] = (" ".join(printed)
                                              + f" (foo's clusterIP of myns/myservice: {federation.cluster_ip})")


def test_the_join_takes_what_kubelet_and_coredns_reload_take(federation: Federation) -> None:
    """The join's delay is kubelet's ConfigMap sync (up to its syncFrequency, 60 s, plus the cache
    TTL) and CoreDNS's ``reload`` (30 s ± 15 s): docs/operations.md promises at most 2 minutes."""
    assert 0 < federation.join_seconds < 120, federation.join_seconds


def path_checks(node: Node) -> dict[str, tuple[float | None, str]]:
    """Each stub-zone endpoint pod's ``feddns_stubzone_path_ok`` for myfederation (None: not probed yet) and
    its /health body, read through the API server's proxy to the pod's metrics port, as Prometheus scrapes."""
    pods = node.api.request("GET", "/api/v1/namespaces/kube-system/pods?labelSelector="
                                   "app.kubernetes.io%2Fname%3Dfeddns-stubzone")["items"]
    found = {}
    for pod in pods:
        if pod["status"].get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            continue
        proxy = f"/api/v1/namespaces/kube-system/pods/{pod['metadata']['name']}:9155/proxy"
        metrics = node.kubectl("get", "--raw", f"{proxy}/metrics").stdout
        health = node.kubectl("get", "--raw", f"{proxy}/health", check=False).stdout
        value = re.search(r'^feddns_stubzone_path_ok\{federation="myfederation"\} (\S+)$', metrics, re.MULTILINE)
        found[pod["metadata"]["name"]] = (float(value.group(1)) if value else None, health)
    return found


def wait_for_path(node: Node, ok: float, timeout: float) -> dict[str, tuple[float | None, str]]:
    """Until every endpoint pod reports path_ok ``ok``; TimeoutError with what they report."""
    deadline = time.monotonic() + timeout
    while not (checks := path_checks(node)) or any(value != ok for value, _ in checks.values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the endpoints did not report path_ok {ok} within {timeout:.0f} s: {checks}")
        time.sleep(0.5)
    return checks


def test_the_path_check_sees_kubeadm_upgrade_drop_the_mount_and_the_import_script_mend_it(
        federation: Federation) -> None:
    """``kubeadm upgrade apply`` writes CoreDNS's Deployment again as kubeadm ships it (an update of the
    whole object), which drops the mount of coredns-feddns: the import line then matches nothing and
    the federation is lost in silence. The endpoint's probe of _whoami through the cluster DNS Service
    reports it within the probe interval plus a few seconds of the new CoreDNS pods, /health says why,
    and running coredns-import.sh again (docs/operations.md, "kubeadm") mends it."""
    node = federation.node
    checks = wait_for_path(node, 1.0, 120)
    assert all("path myfederation: ok" in health for _, health in checks.values()), checks
    (shipped,) = [o for o in kubeadm_coredns_objects(images.coredns_ref()) if o["kind"] == "Deployment"]
    node.api.request("PUT", "/apis/apps/v1/namespaces/kube-system/deployments/coredns", shipped)
    node.wait_rollout("kube-system", "Deployment", "coredns", 180)
    rolled = time.monotonic()
    checks = wait_for_path(node, 0.0, PROBE_INTERVAL + 60)
    FIGURES["path lost"] = (f"{time.monotonic() - rolled:.1f} s from kubeadm's CoreDNS rolled out (no mount) to "
                            f"every endpoint reporting path_ok 0 (probe interval {PROBE_INTERVAL} s)")
    assert all("path myfederation: broken" in health for _, health in checks.values()), checks
    sh(node, "bash", "deploy/cluster-dns/coredns/coredns-import.sh", "--context", "node")
    node.wait_rollout("kube-system", "Deployment", "coredns", 180)
    mended = time.time()
    wait_for_path(node, 1.0, PROBE_INTERVAL + 120)
    wait_for_steady(node, "asker", lambda a: a.addresses[:1] == (federation.cluster_ip,), mended, 120)


NODE_LOCAL_DNS = "169.254.20.10"
"""The link-local address node-cache listens on (the upstream manifest's default)."""


def node_local_dns_objects(upstream_ip: str) -> list[dict[str, Any]]:
    """NodeLocal DNSCache as its install page sets it up in kube-proxy's IPVS form (only the link-local
    address bound; kubelet's --cluster-dns would name it): the upstream ConfigMap and a DaemonSet that runs
    the CoreDNS image on the host network. node-cache's own part, filling in the kube-dns-upstream address
    (``upstream_ip``) and the node's resolvers when it starts, is an init container's sed."""
    (configmap,) = [o for o in yaml.safe_load_all((REPO / "tests/deploy/stock/nodelocaldns.yaml").read_text())
                    if o["kind"] == "ConfigMap"]
    corefile = configmap["data"]["Corefile"].replace(f"bind {NODE_LOCAL_DNS} 10.96.0.10", f"bind {NODE_LOCAL_DNS}")
    configmap["data"]["Corefile"] = corefile
    fill = (f"sed -e 's/__PILLAR__CLUSTER__DNS__/{upstream_ip}/g' "
            "-e 's#__PILLAR__UPSTREAM__SERVERS__#/etc/resolv.conf#g' /etc/coredns/Corefile.base "
            "> /run/node-local-dns/Corefile")
    mounts = [{"name": "config", "mountPath": "/etc/coredns"}, {"name": "run", "mountPath": "/run/node-local-dns"}]
    daemonset = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "node-local-dns", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"k8s-app": "node-local-dns"}}, "template": {
            "metadata": {"labels": {"k8s-app": "node-local-dns"}},
            "spec": {"hostNetwork": True, "dnsPolicy": "Default", "terminationGracePeriodSeconds": 1,
                     "initContainers": [{"name": "pillars", "image": images.DNSUTILS, "imagePullPolicy": "Never",
                                         "command": ["sh", "-c", fill], "volumeMounts": mounts}],
                     "containers": [{"name": "node-cache", "image": images.coredns_ref(), "imagePullPolicy": "Never",
                                     "args": ["-conf", "/run/node-local-dns/Corefile"], "volumeMounts": mounts}],
                     "volumes": [{"name": "config", "configMap": {"name": "node-local-dns",
                                                                  "items": [{"key": "Corefile",
                                                                             "path": "Corefile.base"}]}},
                                 {"name": "run", "emptyDir": {}}]}}}}
    return [configmap, daemonset]


def test_node_local_dns_in_front_sends_the_federation_to_coredns_which_tags_it(federation: Federation) -> None:
    """docs/operations.md, "NodeLocal DNSCache": with the upstream node-local-dns in front of CoreDNS as pods,
    node-local-dns-import.sh makes a pod that asks the cache get foo's clusterIP first (CoreDNS tags it)."""
    node = federation.node
    upstream = node.api.apply({"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "kube-dns-upstream", "namespace": "kube-system"}, "spec": {
        "selector": {"k8s-app": "kube-dns"}, "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                                                      {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}})
    configmap, daemonset = node_local_dns_objects(upstream["spec"]["clusterIP"])
    node.api.apply(configmap)
    # node-cache's -setupinterface puts the address on a dummy interface; this kernel has no dummy module.
    node.netns.run("ip", "addr", "add", f"{NODE_LOCAL_DNS}/32", "dev", "lo")
    try:
        sh(node, "bash", "deploy/cluster-dns/node-local-dns/node-local-dns-import.sh", "--context", "node")
        node.api.apply(daemonset)
        node.wait_rollout("kube-system", "DaemonSet", "node-local-dns", 120)
        pod = dig_loop_pod("cached", QNAME)
        pod["spec"].update(dnsPolicy="None", dnsConfig={"nameservers": [NODE_LOCAL_DNS]})
        node.api.apply(pod)
        wait_running(node, APP_NS, "cached")
        first, _ = wait_for_steady(node, "cached", lambda a: a.addresses[:1] == (federation.cluster_ip,), 0, 120)
        FIGURES["through node-local-dns"] = f"{first.rcode} {' '.join(first.addresses)} (foo's clusterIP first)"
    finally:
        node.kubectl("-n", APP_NS, "delete", "pod", "cached", "--wait=false", check=False)
        node.kubectl("-n", "kube-system", "delete", "daemonset/node-local-dns", "configmap/node-local-dns",
                     "service/kube-dns-upstream", check=False)
        node.netns.run("ip", "addr", "del", f"{NODE_LOCAL_DNS}/32", "dev", "lo")


CAPABILITY_MASK = re.compile(r"^Cap(Inh|Prm|Eff|Bnd|Amb):\s+([0-9a-f]+)$", re.MULTILINE)


@dataclass(frozen=True)
class Container:
    namespace: str
    pod: str
    name: str
    app: str
    """What the pod runs: feddns (serve), feddns-controller, feddns-etcd, feddns-stubzone, feddns-links."""
    container_id: str


def chart_containers(node: Node) -> list[Container]:
    """Every running container of both charts."""
    found = []
    for namespace, selector in ((FEDERATION_NS, "app.kubernetes.io/instance=myfederation"),
                                ("kube-system", "app.kubernetes.io/name=feddns-stubzone"),
                                (LINKS_NS, "app.kubernetes.io/name=feddns-links")):
        listing = json.loads(node.kubectl("-n", namespace, "get", "pods", "-l", selector, "-o", "json").stdout)
        found += [Container(namespace, pod["metadata"]["name"], status["name"], _app(pod["metadata"]["labels"]),
                            status["containerID"].removeprefix("containerd://"))
                  for pod in listing["items"] for status in pod["status"].get("containerStatuses", [])]
    return found


def _app(labels: dict[str, str]) -> str:
    """feddns (serve), feddns-controller, feddns-etcd, feddns-stubzone or feddns-links."""
    name = labels["app.kubernetes.io/name"]
    return "feddns-controller" if labels.get("app.kubernetes.io/component") == "controller" else name


def process_view(node: Node, container: Container) -> tuple[str, str]:
    """``/proc/self/status`` and ``/proc/self/mounts`` as the container's own process reads them:
    from inside (kubectl exec of the image's python3), or, for etcd, whose image has nothing but
    etcd, the same files of its main process read from the node (its PID from containerd)."""
    if container.app == "feddns-etcd":
        pid = next(line.split()[1] for line in node.ctr("tasks", "ls").splitlines()[1:]
                   if line.split()[0] == container.container_id)
        return Path(f"/proc/{pid}/status").read_text(), Path(f"/proc/{pid}/mounts").read_text()
    script = "print(open('/proc/self/status').read()); print('=' * 8); print(open('/proc/self/mounts').read())"
    out = node.kubectl("-n", container.namespace, "exec", container.pod, "-c", container.name, "--",
                       "python3", "-c", script).stdout
    status, _, mounts = out.partition("=" * 8)
    return status, mounts


def test_the_runtime_enforces_the_charts_security_context_in_every_container(federation: Federation) -> None:
    """In each container of both charts (serve, the controller, etcd, the stub-zone endpoint, links):
    user and group 65532, no capability in any set, no_new_privs, and a read-only root that refuses
    a write."""
    node = federation.node
    containers = chart_containers(node)
    assert {c.app for c in containers} == {"feddns", "feddns-controller", "feddns-etcd", "feddns-stubzone",
                                           "feddns-links"}, containers
    for container in containers:
        where = f"{container.namespace}/{container.pod}/{container.name}"
        status, mounts = process_view(node, container)
        assert re.search(r"^Uid:\s+65532\s+65532\s+65532\s+65532$", status, re.MULTILINE), (where, status)
        assert re.search(r"^Gid:\s+65532\s+65532\s+65532\s+65532$", status, re.MULTILINE), (where, status)
        assert re.search(r"^NoNewPrivs:\s+1$", status, re.MULTILINE), (where, status)
        masks = dict(CAPABILITY_MASK.findall(status))
        assert set(masks) == {"Inh", "Prm", "Eff", "Bnd", "Amb"}, (where, masks)
        assert {int(v, 16) for v in masks.values()} == {0}, (where, masks)
        root = [line.split() for line in mounts.splitlines() if line.split()[1:2] == ["/"]]
        assert root and "ro" in root[-1][3].split(","), (where, root)
        if container.app != "feddns-etcd":
            write = node.kubectl("-n", container.namespace, "exec", container.pod, "-c", container.name, "--",
                                 "python3", "-c", "open('/probe', 'w')", check=False)
            assert write.returncode != 0 and "Read-only file system" in write.stderr, (where, write.stderr)


def test_the_etcd_members_run_as_the_chart_says_with_their_probes_and_volumes(federation: Federation) -> None:
    """The chart's etcd: 3 members Ready (its /readyz probe answers), each on a bound
    PersistentVolume, running as 65532 (checked from the host: its image has no shell)."""
    node = federation.node
    statefulset = node.api.request("GET", f"/apis/apps/v1/namespaces/{FEDERATION_NS}/statefulsets/feddns-etcd")
    assert statefulset["status"].get("readyReplicas") == 3
    claims = node.api.request("GET", f"/api/v1/namespaces/{FEDERATION_NS}/persistentvolumeclaims")["items"]
    assert sorted(c["status"]["phase"] for c in claims) == ["Bound"] * 3
    for index in range(3):
        pod = node.api.get("Pod", FEDERATION_NS, f"feddns-etcd-{index}") or {}
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])
        assert (node.directory / "volumes" / f"etcd-{index}" / "member").is_dir()
        assert (node.directory / "volumes" / f"etcd-{index}" / "member").stat().st_uid == 65532


def test_serve_pods_fork_their_workers_from_one_read_of_etcd(federation: Federation) -> None:
    """The chart's ``--workers 2`` under the chart's security context and the runtime's default
    seccomp profile: each serve pod's template reads etcd once and forks both workers from it
    (docs/serve.md, "Workers"), rather than falling back to a read per worker, which it would do
    where pidfds or ``prctl`` are refused."""
    node = federation.node
    listing = json.loads(node.kubectl("-n", FEDERATION_NS, "get", "pods", "-l",
                                      "app.kubernetes.io/component=serve", "-o", "json").stdout)
    pods = [pod["metadata"]["name"] for pod in listing["items"]]
    assert pods
    for pod in pods:
        log = node.pod_logs(FEDERATION_NS, pod)
        assert "cannot read etcd before forking" not in log, log
        assert "every value parsed: forking the workers from them" in log, log
        assert "listening on udp+tcp" in log and "(2 workers)" in log, log


def test_the_links_webhook_gives_an_opted_in_pod_its_variables(federation: Federation) -> None:
    """The links webhook, a pod behind its Service: a pod created in a namespace labelled
    ``links.feddns.io/enabled=true`` that its policy selects prints the injected variables."""
    node = federation.node
    node.kubectl("label", "namespace", APP_NS, "links.feddns.io/enabled=true", "--overwrite")
    node.api.apply({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "legacy-app", "namespace": APP_NS, "labels": {"links": "yes"}},
                    "spec": {"restartPolicy": "Never", "containers": [{
                        "name": "app", "image": images.DNSUTILS, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", "env | grep ^MYSERVICE_ | sort"]}]}})
    deadline = time.monotonic() + 60
    while (node.api.get("Pod", APP_NS, "legacy-app") or {}).get("status", {}).get("phase") != "Succeeded":
        assert time.monotonic() < deadline, node.describe(APP_NS)
        time.sleep(0.5)
    printed = dict(line.split("=", 1) for line in node.pod_logs(APP_NS, "legacy-app").splitlines() if "=" in line)
    # kubelet's own service links for the local Service myservice (MYSERVICE_PORT=tcp://...) are
    # there too; the webhook's variables, explicit env, take the place of kubelet's of the same name.
    injected = {key: printed.get(key) for key in ("MYSERVICE_SERVICE_HOST", "MYSERVICE_SERVICE_PORT",
                                                  "MYSERVICE_SERVICE_PORT_HTTP")}
    assert injected == {"MYSERVICE_SERVICE_HOST": QNAME, "MYSERVICE_SERVICE_PORT": "80",
                        "MYSERVICE_SERVICE_PORT_HTTP": "80"}, printed


def leader(node: Node) -> str:
    """The controller pod that holds the lease (its log says it leads, the others wait)."""
    listing = json.loads(node.kubectl("-n", FEDERATION_NS, "get", "pods", "-l",
                                      "app.kubernetes.io/component=controller", "-o", "json").stdout)
    for pod in listing["items"]:
        name = pod["metadata"]["name"]
        log = node.pod_logs(FEDERATION_NS, name)
        if log.rfind("leading: this replica writes") > log.rfind("stepping down"):
            return str(name)
    raise AssertionError("no controller pod says it leads")


def test_no_query_fails_through_an_upgrade_and_deleted_pods(federation: Federation) -> None:
    """A pod asking every 0.2 s sees no failed query while ``helm upgrade`` changes a value (serve's
    TTL: a new ReplicaSet rolls), a serve pod is deleted, and the controller's leader is deleted
    (its successor takes over within the lease and keeps the stub zone)."""
    node = federation.node
    began = time.time()
    values = {**federation.values, "serve": {"ttl": 20}}
    (federation.directory / "myfederation.yaml").write_text(yaml.safe_dump(values))
    sh(node, "helm", "upgrade", "myfederation", "deploy/helm/feddns-federation", "-n", FEDERATION_NS,
       "-f", str(federation.directory / "myfederation.yaml"))
    node.wait_rollout(FEDERATION_NS, "Deployment", "feddns", 240)
    serve_pods = json.loads(node.kubectl("-n", FEDERATION_NS, "get", "pods", "-l", "app.kubernetes.io/component=serve",
                                         "-o", "json").stdout)["items"]
    node.kubectl("-n", FEDERATION_NS, "delete", "pod", serve_pods[0]["metadata"]["name"], "--wait=true")
    node.wait_rollout(FEDERATION_NS, "Deployment", "feddns", 240)
    old_leader = leader(node)
    node.kubectl("-n", FEDERATION_NS, "delete", "pod", old_leader, "--wait=true")
    node.wait_rollout(FEDERATION_NS, "Deployment", "feddns-controller", 240)
    time.sleep(20)  # the lease (15 s) runs out for a leader that died without resigning
    ended = time.time()
    during = [a for a in answers(node, "asker") if began <= a.at <= ended]
    assert len(during) > 100, len(during)
    failed = [a for a in during if a.rcode != "NOERROR" or a.addresses[:1] != (federation.cluster_ip,)]
    FIGURES["query loop"] = (f"{len(during)} queries over {ended - began:.0f} s through helm upgrade, a deleted "
                             f"serve pod and a deleted leader: {len(failed)} failed")
    assert not failed, failed[:10]
    assert leader(node) != old_leader


def test_leaving_the_federation_stops_the_forwarding_and_is_timed(federation: Federation) -> None:
    """docs/operations.md's "Remove a member cluster" for foo's stub zone: the controller DELETEs it,
    and the pod's next answers are not the federation's. Timed as the join is."""
    node = federation.node
    values = {**federation.values, "serve": {"ttl": 20},
              "clusters": [{k: v for k, v in c.items() if k != "stubzone"} for c in federation.values["clusters"]]}
    values.pop("nameservers")
    (federation.directory / "myfederation.yaml").write_text(yaml.safe_dump(values))
    began = time.time()
    sh(node, "helm", "upgrade", "myfederation", "deploy/helm/feddns-federation", "-n", FEDERATION_NS,
       "-f", str(federation.directory / "myfederation.yaml"))
    deadline = time.monotonic() + 180
    # Seen by polling (the key's managedFields entry goes with the key): at most 0.2 s late.
    while "myfederation.server" in (node.api.get("ConfigMap", "kube-system", "coredns-feddns") or {}).get("data", {}):
        assert time.monotonic() < deadline, "the controller did not delete foo's stub zone"
        time.sleep(0.2)
    written = time.time()
    gone, every = wait_for_steady(node, "asker", lambda a: a.addresses[:1] != (federation.cluster_ip,), began, 300)
    federation.leave_seconds = every.at - written
    FIGURES["leave"] = (f"{gone.at - written:.1f} s from the endpoint's removal of the stub zone to the pod's first "
                        f"answer without the federation ({gone.rcode}), {federation.leave_seconds:.1f} s to every "
                        "answer")
    assert 0 < federation.leave_seconds < 120


def test_uninstall_leaves_nothing_the_charts_made(federation: Federation) -> None:
    """``helm uninstall`` of both releases and the documented undo of the CoreDNS import: no object
    either chart made is left, and CoreDNS no longer imports the stub zones."""
    node = federation.node
    made = {}
    for release, namespace in (("myfederation", FEDERATION_NS), ("feddns-member", MEMBER_NS)):
        manifest = sh(node, "helm", "get", "manifest", release, "-n", namespace)
        made[release] = [(o["kind"], o["metadata"].get("namespace", namespace), o["metadata"]["name"])
                         for o in yaml.safe_load_all(manifest) if o]
        sh(node, "helm", "uninstall", release, "-n", namespace, "--wait")
    sh(node, "bash", "deploy/cluster-dns/coredns/coredns-import.sh", "--context", "node", "--undo")
    left = [(kind, namespace, name) for objects in made.values() for kind, namespace, name in objects
            if kind != "Namespace" and node.api.get(kind, namespace, name) is not None]
    assert not left, left
    corefile = (node.api.get("ConfigMap", "kube-system", "coredns") or {})["data"]["Corefile"]
    assert "feddns" not in corefile
    node.wait_rollout("kube-system", "Deployment", "coredns", 120)
