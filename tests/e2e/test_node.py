"""feddns as deployed, on two real clusters (harness/node.py): the image built from the Dockerfile,
both charts installed with the real helm the way docs/operations.md says, and pods that look names
up through their cluster's DNS (kubeadm's CoreDNS) and connect by them. The tests see feddns only
through what pods print and what the API servers hold.

foo hosts Federated-DNS (feddns-federation: serve, the controller, the chart's own 3-member etcd on
PersistentVolumes) and is a member (feddns-member: the stub-zone endpoint behind a ClusterIP
Service, the controller's access, the links webhook); bar is a member whose endpoint the controller
reaches through bar's load-balancer address across the link, and whose CoreDNS reaches serve
through serve's. The clusters play the cloud: every Service of type LoadBalancer gets an address
of its cluster's range, routed through its node (harness/node.py, ``Link``).

In each cluster, Deployment myns/myservice answers HTTP with its cluster's name, has a readiness
probe (a file), and is behind a Service of type LoadBalancer; pods in each cluster print what the
federated name resolves to (``dig``, every 0.2 s) and who answers it over HTTP. Join and leave are
timed from the endpoint's write of its ConfigMap (STUB_ZONES; its managedFields time) to the first
answer, or the first lack of one; failover from the pod's Ready condition (or the test's flip of
the probe, whichever is first) to what pods print. foo's cluster DNS imports its stub zone
(kubeadm mode: a ConfigMap volume, so its join waits for kubelet's sync); bar runs the member chart's
forwarder mode, whose CoreDNS in the endpoint's pods is fed through the API (a join in seconds).
The figures are printed (``e2e figure:``) and recorded in docs/operations.md and docs/performance.md.
"""

import base64
import contextlib
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import dns.rdatatype
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness import images, peers
from harness.node import Node, kubeadm_coredns_objects
from harness.process import child_env
from tests.e2e.conftest import Clusters
from tests.e2e.figures import FIGURES, record

REPO = Path(__file__).parents[2]
FEDERATION_NS = "feddns-myfederation"
MEMBER_NS = "feddns-system"
LINKS_NS = "feddns-links"
APP_NS = "myns"
QNAME = "myservice.myns.myfederation.svc.federation."
LOOP_SECONDS = 0.2
PROBE_INTERVAL = 5
"""Seconds between the endpoint's _whoami probes (clusterDNS.probeInterval; the chart's default is 30)."""
ANSWER_TTL = int(yaml.safe_load((REPO / "deploy/helm/feddns-federation/values.yaml").read_text())["serve"]["ttl"])
"""Seconds: the TTL of serve's answers as the federation chart installs it (serve.ttl), which is also the
longest the members' stub zones hold an answer (the member chart's stubzone.cacheMinTTL is 0)."""
UPGRADED_TTL = ANSWER_TTL + 1
"""Seconds: the serve TTL that the upgrade test changes to (a new ReplicaSet rolls), kept by the tests after it."""
ZONES = {"foo": ("zone-a", "region-1"), "bar": ("zone-b", "region-1")}
"""Each cluster's zone and region in the controller's config."""


def lb_address(node: Node, last: int) -> str:
    """Address ``.last`` of the cluster's load-balancer range."""
    return node.ranges.load_balancer_range.split("/")[0].rsplit(".", 1)[0] + f".{last}"


@dataclass
class Federation:
    """What the install made: both clusters, the files, myservice's clusterIP and load-balancer
    address in each cluster, serve's address and the join times."""

    node: Node
    bar: Node
    clusters: Clusters
    directory: Path
    cluster_ip: str
    """foo's clusterIP of myns/myservice."""
    values: dict[str, Any]
    serve_ip: str
    bar_cluster_ip: str = ""
    lb: dict[str, str] = field(default_factory=dict)
    """myns/myservice's load-balancer address, by cluster."""
    join_seconds: float = 0.0
    leave_seconds: float | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def cluster(self, name: str) -> Node:
        return self.node if name == "foo" else self.bar

    def cluster_ip_of(self, name: str) -> str:
        return self.cluster_ip if name == "foo" else self.bar_cluster_ip


def sh(node: Node, *args: str, input: str | None = None) -> str:
    """A command of docs/operations.md, run as a user runs it: kubectl, helm and feddns on PATH,
    the cluster's admin kubeconfig (its context is the cluster's name). RuntimeError with its
    output if it fails."""
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


STUB_ZONES = {"foo": "coredns-feddns", "bar": "feddns-forwarder-zones"}
"""The ConfigMap (in kube-system) each cluster's stub-zone endpoint writes: foo is kubeadm mode (its CoreDNS
mounts and imports coredns-feddns), bar forwarder mode (clusterDNS.platform forwarder: its CoreDNS forwards
the federation zone to feddns-forwarder, the CoreDNS in the endpoint's pods, fed through the API)."""


def stub_zone_written(node: Node) -> float:
    """When the stub-zone endpoint wrote the federation's key into the cluster's STUB_ZONES ConfigMap:
    the ``time`` of the managedFields entry that owns ``data.myfederation.server``, in Unix seconds
    (the API server's clock, which is this machine's)."""
    name = STUB_ZONES[node.cluster]
    obj = node.api.get("ConfigMap", "kube-system", name) or {}
    times = [entry["time"] for entry in obj.get("metadata", {}).get("managedFields", [])
             if "f:myfederation.server" in entry.get("fieldsV1", {}).get("f:data", {}) and entry.get("time")]
    assert times, f"ConfigMap {name} has no myfederation.server written: {obj.get('metadata')}"
    return max(api_time(t) for t in times)


def api_time(text: str) -> float:
    """An API server's RFC 3339 time (``2026-11-28T17:30:00Z``) in Unix seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


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


FETCH_SCRIPT = """
import http.client, sys, time
host = sys.argv[1]
while True:
    began = time.time()
    try:
        conn = http.client.HTTPConnection(host, 80, timeout=2)
        conn.request("GET", "/")
        peer = conn.sock.getpeername()[0]
        body = conn.getresponse().read().decode().strip() or "-"
        conn.close()
    except Exception as exc:
        peer, body = "-", "ERROR:" + type(exc).__name__
    print(f"{began:.3f} {peer} {body}", flush=True)
    time.sleep(%s)
"""


def fetch_loop_pod(name: str, host: str) -> dict[str, Any]:
    """A pod that GETs ``http://<host>/`` every LOOP_SECONDS (the name resolved anew each time,
    by the C library, through the cluster DNS) and prints ``<unix time> <address connected to>
    <body>``: the body is the answering cluster's name."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": APP_NS},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "fetch", "image": images.BASE, "imagePullPolicy": "Never",
                "command": ["python3", "-u", "-c", FETCH_SCRIPT % LOOP_SECONDS, host]}]}}


@dataclass(frozen=True)
class Answer:
    at: float
    rcode: str
    addresses: tuple[str, ...]


def answers(node: Node, pod: str) -> list[Answer]:
    """What the dig loop pod printed so far (for the fetch loop: its address connected to and the body)."""
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
            raise AssertionError(f"no such answer in pod {node.cluster}/{pod} within {timeout}s; the last: "
                                 f"{seen[-5:]}\n{node.describe(APP_NS)}")
        time.sleep(1)


def wait_running(node: Node, namespace: str, pod: str, timeout: float = 120) -> None:
    done = node.kubectl("-n", namespace, "wait", "--for=condition=Ready", f"pod/{pod}", f"--timeout={timeout}s",
                        check=False)
    assert done.returncode == 0, (f"pod {node.cluster}/{namespace}/{pod} not Ready: {done.stderr}\n"
                                  f"{node.describe(namespace)}")


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


def install(clusters: Clusters, directory: Path) -> Federation:
    """docs/operations.md's "Install a federation", step by step: foo and bar's member parts, then
    the federation in foo."""
    node, bar = clusters.foo, clusters.bar
    began = time.monotonic()
    timings: dict[str, float] = {}
    pki, kubeconfigs = directory / "pki", directory / "clusters"
    # 1. The stub-zone PKI.
    sh(node, "feddns", "certs", "init", "--dir", str(pki))
    sh(node, "feddns", "certs", "issue-client", "--dir", str(pki), "--cn", "feddns-controller")
    # 2. bar, as "Add a member cluster" says: its endpoint behind its load-balancer address (the
    # cloud's static address, reserved so that the certificate names it), open to the
    # controller's address as bar sees it (foo's node: what leaves foo is masqueraded), and a
    # kubeconfig with the address the controller reaches bar's API server by.
    bar_stubzone = lb_address(bar, 8)
    bar.reserve_load_balancer("kube-system", "feddns-stubzone", bar_stubzone)
    sh(bar, "feddns", "certs", "issue-server", "--dir", str(pki), "--name", "bar", "--ip", bar_stubzone)
    bar_values = {"cluster": "bar", "clusterDNS": {"platform": "forwarder", "probeInterval": PROBE_INTERVAL},
                  "forwarder": {"image": images.coredns_ref()},  # the node's CoreDNS image (no registry here)
                  "stubzone": {"service": {"loadBalancerSourceRanges": [f"{node.ranges.node_ip}/32"]}}}
    (directory / "bar.yaml").write_text(yaml.safe_dump(bar_values))
    sh(bar, "helm", "install", "feddns-member", "deploy/helm/feddns-member", "-n", MEMBER_NS, "--create-namespace",
       "-f", str(directory / "bar.yaml"),
       "--set-file", f"stubzone.tls.cert={pki / 'bar.crt'},stubzone.tls.key={pki / 'bar.key'},"
                     f"stubzone.tls.ca={pki / 'ca.crt'}")
    reloaded = forward_zone_to_the_forwarder(bar)  # waited for after foo's steps: its reload overlaps them
    # 3. foo's stub-zone endpoint (its Service's in-cluster name: foo hosts the controller), the
    #    controller's access, the links webhook, then both kubeconfigs for the controller.
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
    sh(node, "bash", "deploy/cluster-dns/coredns/coredns-import.sh", "--context", "foo")
    # the kubeconfigs last: each member's token controller has filled its token Secret by now
    kubeconfigs.mkdir()
    (kubeconfigs / "bar.kubeconfig").write_text(sh(
        bar, "bash", "deploy/member/kubeconfig.sh", "--context", "bar", "--name", "bar",
        "--server", f"https://{bar.ranges.node_ip}:6443"))
    (kubeconfigs / "foo.kubeconfig").write_text(sh(
        node, "bash", "deploy/member/kubeconfig.sh", "--context", "foo", "--name", "foo",
        "--server", "https://kubernetes.default.svc"))
    reloaded()
    timings["members"] = time.monotonic() - began
    # 4. The kubeconfigs and the client certificate as Secrets, then the federation.
    sh(node, "kubectl", "create", "namespace", FEDERATION_NS)
    sh(node, "kubectl", "-n", FEDERATION_NS, "create", "secret", "generic", "feddns-clusters",
       f"--from-file={kubeconfigs}")
    sh(node, "kubectl", "-n", FEDERATION_NS, "create", "secret", "generic", "feddns-stubzone-client",
       f"--from-file=tls.crt={pki / 'client.crt'}", f"--from-file=tls.key={pki / 'client.key'}",
       f"--from-file=ca.crt={pki / 'ca.crt'}")
    persistent_volumes(node, 3)
    federation_values = {
        "federation": "myfederation",
        "clusters": [{"name": "foo", "zone": ZONES["foo"][0], "region": ZONES["foo"][1],
                      "stubzone": {"url": "https://feddns-stubzone.kube-system.svc"}},
                     {"name": "bar", "zone": ZONES["bar"][0], "region": ZONES["bar"][1],
                      "stubzone": {"url": f"https://{bar_stubzone}"}}],
        "nameservers": {"fromService": {"cluster": "foo"}},
    }
    (directory / "myfederation.yaml").write_text(yaml.safe_dump(federation_values))
    serve_ip = lb_address(node, 53)
    node.reserve_load_balancer(FEDERATION_NS, "feddns", serve_ip)
    sh(node, "helm", "install", "myfederation", "deploy/helm/feddns-federation", "-n", FEDERATION_NS,
       "-f", str(directory / "myfederation.yaml"))
    for kind, name in (("StatefulSet", "feddns-etcd"), ("Deployment", "feddns"), ("Deployment", "feddns-controller")):
        node.wait_rollout(FEDERATION_NS, kind, name, 240)
    for kind, name, namespace in (("Deployment", "feddns-stubzone", "kube-system"),
                                  ("Deployment", "feddns-links", LINKS_NS), ("Deployment", "coredns", "kube-system")):
        node.wait_rollout(namespace, kind, name, 180)
    for kind, name in (("Deployment", "feddns-stubzone"), ("Deployment", "coredns")):
        bar.wait_rollout("kube-system", kind, name, 180)
    timings["federation"] = time.monotonic() - began - timings["members"]
    return Federation(node, bar, clusters, directory, "", federation_values, serve_ip, timings=timings)


def forward_zone_to_the_forwarder(node: Node) -> Callable[[], None]:
    """The one static edit the member chart's NOTES print in forwarder mode ("Add to the cluster DNS's
    configuration"), made to kubeadm's Corefile as a user would: a server block that forwards the
    federation zone to Service feddns-forwarder's clusterIP. Returns a function that returns once both
    CoreDNS pods have reloaded it (kubelet's sync of their ConfigMap volume, then ``reload``: up to
    about a minute, once, before the cluster joins), so that the join is timed from the endpoint's
    write alone; the caller does other work meanwhile."""
    address = node.api.get("Service", "kube-system", "feddns-forwarder")["spec"]["clusterIP"]
    block = f"federation.:53 {{\n    forward . {address}\n}}\n"
    configmap = node.api.get("ConfigMap", "kube-system", "coredns")
    corefile = configmap["data"]["Corefile"]
    patch = [{"op": "test", "path": "/data/Corefile", "value": corefile},
             {"op": "replace", "path": "/data/Corefile", "value": corefile.rstrip("\n") + "\n" + block}]
    sh(node, "kubectl", "-n", "kube-system", "patch", "configmap", "coredns", "--type", "json",
       "--patch", json.dumps(patch))
    deadline = time.monotonic() + 180

    def reloaded() -> None:
        while True:
            pods = node.api.request("GET", "/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dkube-dns")[
                "items"]
            loaded = [p for p in pods if node.pod_logs("kube-system", p["metadata"]["name"]).count(
                "plugin/reload: Running configuration") >= 2]
            if pods and len(loaded) == len(pods):
                return
            assert time.monotonic() < deadline, f"CoreDNS in {node.cluster} did not reload the forwarding block"
            time.sleep(1)
    return reloaded


READY_FILE = "/tmp/ready"
"""myservice's readiness probe checks this file; a test removes it with kubectl exec to fail the probe."""


def make_service(node: Node) -> tuple[str, str]:
    """Federated service myns/myservice in the cluster: a Deployment of one pod that answers HTTP
    on 8080 with the cluster's name (python3's http.server in the base image), ready while
    READY_FILE exists (an exec probe every second), behind a Service of type LoadBalancer
    labelled for the federation. Its clusterIP and load-balancer address."""
    node.api.ensure_namespace(APP_NS)
    serve = (f"mkdir -p /srv && echo {node.cluster} > /srv/index.html && touch {READY_FILE} && "
             "exec python3 -m http.server 8080 --directory /srv")
    node.api.apply({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "myservice", "namespace": APP_NS},
                    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "myservice"}},
                             "template": {"metadata": {"labels": {"app": "myservice"}}, "spec": {
                                 "terminationGracePeriodSeconds": 1,
                                 "containers": [{
                                     "name": "app", "image": images.BASE, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", serve], "ports": [{"containerPort": 8080}],
                                     "readinessProbe": {"exec": {"command": ["test", "-f", READY_FILE]},
                                                        "periodSeconds": 1, "failureThreshold": 1}}]}}}})
    service = node.api.apply({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "myservice", "namespace": APP_NS, "labels": {"federation.feddns.io/name": "myfederation"}},
        "spec": {"type": "LoadBalancer", "selector": {"app": "myservice"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
    node.wait_rollout(APP_NS, "Deployment", "myservice", 120)
    return str(service["spec"]["clusterIP"]), node.load_balancer_ip(APP_NS, "myservice")


@pytest.fixture(scope="module")
def federation(clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """The federation installed, the service made in both clusters, and in each a pod that asks for
    it from the start and one that fetches it: each join is timed from the endpoint's write to the
    first answer with the cluster's own clusterIP first."""
    directory = tmp_path_factory.mktemp("federation")
    # The service and the asking pods first, so that a join is timed by pods already asking.
    services = {}
    for node in (clusters.foo, clusters.bar):
        services[node.cluster] = make_service(node)
        node.api.apply(dig_loop_pod("asker", QNAME))
        node.api.apply(fetch_loop_pod("fetcher", QNAME))
    made = install(clusters, directory)
    made.cluster_ip, made.lb["foo"] = services["foo"]
    made.bar_cluster_ip, made.lb["bar"] = services["bar"]
    for node in (made.node, made.bar):
        wait_running(node, APP_NS, "asker")
        wait_running(node, APP_NS, "fetcher")
    joins = []
    for node in (made.node, made.bar):
        own = made.cluster_ip_of(node.cluster)
        first, every = wait_for_steady(node, "asker", lambda a, own=own: a.addresses[:1] == (own,), 0, 420)
        written = stub_zone_written(node)
        record("join-first-answer", first.at - written)
        record("join-every-answer", every.at - written)
        joins.append(every.at - written)
        FIGURES[f"join {node.cluster}"] = (
            f"{first.at - written:.1f} s from the endpoint's write of {STUB_ZONES[node.cluster]} to the pod's first "
            "answer "
            f"with {node.cluster}'s clusterIP, {every.at - written:.1f} s to every answer (both CoreDNS replicas "
            "reloaded)")
    made.join_seconds = max(joins)
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
    assert f"nameserver {node.ranges.dns_ip}" in resolv
    FIGURES["a pod's /etc/resolv.conf"] = " | ".join(resolv.strip().splitlines())
    FIGURES[f"a pod's dig +short {QNAME}"] = (" ".join(printed)
                                              + f" (foo's clusterIP of myns/myservice: {federation.cluster_ip})")


def test_the_join_takes_what_kubelet_and_coredns_reload_take(federation: Federation) -> None:
    """The join's delay is kubelet's ConfigMap sync (up to its syncFrequency, 60 s, plus the cache
    TTL) and CoreDNS's ``reload`` (30 s ± 15 s): docs/operations.md promises at most 2 minutes."""
    assert 0 < federation.join_seconds < 120, federation.join_seconds


def test_each_clusters_pods_get_and_reach_their_own_shard_first(federation: Federation) -> None:
    """Through two real clusters' DNS: a pod in foo gets foo's clusterIP first and bar's
    load-balancer address after it, a pod in bar the other way round; each pod's HTTP requests
    to the federated name are answered by its own cluster."""
    for node in (federation.node, federation.bar):
        other = "bar" if node.cluster == "foo" else "foo"
        own_ip = federation.cluster_ip_of(node.cluster)
        printed = node.kubectl("-n", APP_NS, "exec", "asker", "--", "dig", "+short", QNAME).stdout.split()
        assert printed == [own_ip, federation.lb[other]], (node.cluster, printed)
        # The fetcher's C library asks the cluster DNS anew for each request: 5 s of them, all answered
        # by the pod's own cluster, through its clusterIP.
        _, steady = wait_for_steady(node, "fetcher", lambda a, own=node.cluster: a.addresses == (own,), 0, 60, 5)
        assert steady.rcode == own_ip, steady
        FIGURES[f"{node.cluster}: dig +short {QNAME}"] = (
            " ".join(printed) + f" ({node.cluster}'s clusterIP, then {other}'s load-balancer address)")
        FIGURES[f"{node.cluster}: fetcher printed"] = f"{steady.rcode} {' '.join(steady.addresses)}"


def ready_pods(node: Node) -> bool:
    """Whether a pod of myns/myservice is Ready in the cluster (its API: status.conditions)."""
    pods = node.api.request("GET", f"/api/v1/namespaces/{APP_NS}/pods?labelSelector=app%3Dmyservice")["items"]
    return any(c["type"] == "Ready" and c["status"] == "True" for pod in pods
               if not pod["metadata"].get("deletionTimestamp") for c in pod["status"].get("conditions") or [])


def ready_endpoints(node: Node) -> bool:
    """Whether an EndpointSlice of myns/myservice has a ready endpoint (endpoints[].conditions.ready)."""
    slices = node.api.request("GET", f"/apis/discovery.k8s.io/v1/namespaces/{APP_NS}/endpointslices"
                                     "?labelSelector=kubernetes.io%2Fservice-name%3Dmyservice")["items"]
    return any((e.get("conditions") or {}).get("ready") for s in slices for e in s.get("endpoints") or [])


def serve_answer(federation: Federation) -> tuple[str, ...]:
    """Serve's answer to the external client (untagged, through serve's load-balancer address
    across the link): every ready shard's load-balancer address."""
    query = dns.message.make_query(QNAME, "A")
    sock = federation.clusters.client.socket_in(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        sock.setblocking(False)  # dnspython waits on a socket given to it with its own timeout
        reply = dns.query.udp(query, federation.serve_ip, timeout=1, sock=sock)
    return tuple(sorted(item.address for rrset in reply.answer for item in rrset if hasattr(item, "address")))


@dataclass
class Seen:
    """When the test first saw each stage of a transition in the API and at serve (Unix seconds)."""

    pod: float | None = None
    slice: float | None = None
    serve: float | None = None


def watch_stages(federation: Federation, ready: bool, deadline: float, seen: Seen) -> None:
    """Poll every 0.1 s until ``deadline`` (monotonic) or all three are seen: foo's myservice pods
    Ready ``ready`` (the API), its EndpointSlices with a ready endpoint or none, serve's answer
    with foo's load-balancer address or without it."""
    node, lb = federation.node, federation.lb["foo"]
    while time.monotonic() < deadline and None in (seen.pod, seen.slice, seen.serve):
        now = time.time()
        if seen.pod is None and ready_pods(node) == ready:
            seen.pod = now
        if seen.slice is None and ready_endpoints(node) == ready:
            seen.slice = now
        if seen.serve is None:
            try:
                if (lb in serve_answer(federation)) == ready:
                    seen.serve = time.time()
            except (OSError, dns.exception.DNSException):
                pass
        time.sleep(0.1)


def etcd_written(federation: Federation, after: float) -> float | None:
    """When the controller's leader logged its write of foo's shard of myns/myservice to etcd
    (its ``etcd: N keys written`` line, times in UTC with milliseconds), at or after ``after``."""
    for line in federation.node.pod_logs(FEDERATION_NS, leader(federation.node)).splitlines():
        if "etcd:" in line and "written" in line and "shard myns/myservice in foo" in line:
            at = api_time(line.split()[0])
            if at >= after:
                return at
    return None


def ready_transition_time(node: Node, ready: bool) -> float | None:
    """The lastTransitionTime of the Ready condition of foo's myservice pod now in state ``ready``
    (whole seconds: the API's precision)."""
    pods = node.api.request("GET", f"/api/v1/namespaces/{APP_NS}/pods?labelSelector=app%3Dmyservice")["items"]
    times = [api_time(c["lastTransitionTime"]) for pod in pods for c in pod["status"].get("conditions") or []
             if c["type"] == "Ready" and (c["status"] == "True") == ready and c.get("lastTransitionTime")]
    return min(times) if times else None


def measure_transition(federation: Federation, ready: bool, flip: Callable[[], None], cause: str = "probe",
                       timeout: float = 150) -> dict[str, float]:
    """Flip foo's shard (``flip``: the readiness ``cause`` is ``probe`` or ``scale``) to ``ready``
    and time what follows (module doc); record the figures ``unready-*`` or ``ready-*`` with their
    stages. Returns each figure's seconds, after waiting until every cache holding the old answer
    has expired (so that the next transition starts clean)."""
    node, bar = federation.node, federation.bar
    kind = "ready" if ready else "unready"
    seen = Seen()
    watcher = threading.Thread(target=watch_stages, args=(federation, ready, time.monotonic() + timeout, seen),
                               name=f"watch {kind}")
    flipped = time.time()
    watcher.start()
    flip()
    watcher.join()
    assert None not in (seen.pod, seen.slice, seen.serve), (kind, seen)
    assert seen.pod is not None and seen.slice is not None and seen.serve is not None
    changed = ready_transition_time(node, ready)
    # lastTransitionTime has whole seconds: one from this transition is at most 1 s before the flip.
    began = min(flipped, changed) if changed is not None and changed >= flipped - 1 else flipped
    foo_ip, foo_lb, bar_lb = federation.cluster_ip, federation.lb["foo"], federation.lb["bar"]
    same = (lambda a: a.addresses[:1] == (foo_ip,)) if ready else (lambda a: a.addresses[:1] == (bar_lb,))
    other = ((lambda a: a.rcode == "NOERROR" and foo_lb in a.addresses) if ready
             else (lambda a: a.rcode == "NOERROR" and foo_lb not in a.addresses))
    http = (lambda a: a.addresses == ("foo",)) if ready else (lambda a: a.addresses == ("bar",))
    same_first = wait_for_answer(node, "asker", same, flipped, timeout)
    other_first = wait_for_answer(bar, "asker", other, flipped, timeout)
    http_first = wait_for_answer(node, "fetcher", http, flipped, timeout)
    # Every cache that held the old answer has expired ANSWER_TTL after serve changed (CoreDNS's
    # cache holds nothing past the TTL): then every answer reflects it, and the next transition
    # starts clean. One second more for the TTL's whole seconds.
    time.sleep(max(0.0, seen.serve + ANSWER_TTL + 1 - time.time()))
    every = max(wait_for_steady(node, "asker", same, flipped, 60, steady=0)[1].at,
                wait_for_steady(bar, "asker", other, flipped, 60, steady=0)[1].at)
    written = etcd_written(federation, flipped - 1)
    stages = {f"{cause}-to-Ready": seen.pod - began, "Ready-to-EndpointSlice": seen.slice - seen.pod}
    if written is not None:
        stages.update({"slice-to-etcd": written - seen.slice, "etcd-to-serve": seen.serve - written})
    else:
        stages["slice-to-serve"] = seen.serve - seen.slice
    for name, end in (("same-cluster-answer", same_first.at), ("other-cluster-answer", other_first.at)):
        record(f"{kind}-{name}", end - began, {**stages, "member-cache": end - seen.serve})
    record(f"{kind}-every-answer", every - began)
    record(f"{kind}-http", http_first.at - began)
    return {"same-cluster-answer": same_first.at - began, "other-cluster-answer": other_first.at - began,
            "every-answer": every - began, "http": http_first.at - began}


def set_probe(node: Node, ready: bool) -> None:
    """Make the cluster's myservice pods pass (``ready``) or fail their readiness probe: kubectl exec
    creates or removes READY_FILE in each."""
    pods = node.api.request("GET", f"/api/v1/namespaces/{APP_NS}/pods?labelSelector=app%3Dmyservice")["items"]
    for pod in pods:
        command = ["touch", READY_FILE] if ready else ["rm", "-f", READY_FILE]
        node.kubectl("-n", APP_NS, "exec", pod["metadata"]["name"], "--", *command)


FAILOVERS = 10
"""Transitions of each kind timed through the readiness probe: with the scale test's one, each figure is
over at least 10 (docs/performance.md); each takes about ANSWER_TTL + 4 s."""


def test_a_failing_probe_sends_foos_pods_to_bar_across_the_link_and_back(federation: Federation) -> None:
    """foo's backends fail their readiness probe: kubelet, the EndpointSlice controller and the
    feddns controller follow, and a pod in foo then gets bar's load-balancer address first and
    is answered by bar over HTTP, across the link; bar's pods no longer get foo's address.
    Ready again, everything comes back. Timed FAILOVERS times each way."""
    node = federation.node
    for _ in range(FAILOVERS):
        measure_transition(federation, False, lambda: set_probe(node, False))
        measure_transition(federation, True, lambda: set_probe(node, True))
    printed = node.kubectl("-n", APP_NS, "exec", "asker", "--", "dig", "+short", QNAME).stdout.split()
    assert printed[:1] == [federation.cluster_ip], printed


def test_scaling_foo_to_zero_sends_its_pods_to_bar_and_back(federation: Federation) -> None:
    """``kubectl scale --replicas=0`` in foo, then back to 1: the same failover, timed once each way."""
    node = federation.node

    def scale(replicas: int) -> Callable[[], None]:
        def run() -> None:
            sh(node, "kubectl", "-n", APP_NS, "scale", "deployment/myservice", f"--replicas={replicas}")
        return run

    down = measure_transition(federation, False, scale(0), "scale")
    try:
        # From now on (every cache past the old answer), each request of foo's pod is answered by bar.
        _, steady = wait_for_steady(node, "fetcher", lambda a: a.addresses == ("bar",), time.time(), 30, steady=3)
        FIGURES["foo scaled to 0: fetcher printed"] = f"{steady.rcode} {' '.join(steady.addresses)}"
    finally:
        up = measure_transition(federation, True, scale(1), "scale")
    for name, times in (("scale to 0", down), ("scale to 1", up)):
        FIGURES[name] = ", ".join(f"{figure} {seconds:.1f} s" for figure, seconds in times.items())


def serve_counter(federation: Federation, name: str, **labels: str) -> float:
    """The counter ``name`` (its ``_total`` sample) with ``labels`` among its labels, summed over serve's
    pods and their label sets, read through foo's API server's proxy to each pod's metrics port, as
    Prometheus scrapes."""
    node = federation.node
    pods = node.api.request("GET", f"/api/v1/namespaces/{FEDERATION_NS}/pods?labelSelector="
                                   "app.kubernetes.io%2Fname%3Dfeddns,app.kubernetes.io%2Fcomponent%3Dserve")["items"]
    total = 0.0
    for pod in pods:
        if pod["status"].get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            continue
        text = node.kubectl("get", "--raw", f"/api/v1/namespaces/{FEDERATION_NS}/pods/"
                                            f"{pod['metadata']['name']}:9153/proxy/metrics").stdout
        total += sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                     if sample.name == f"{name}_total" and labels.items() <= sample.labels.items())
    return total


def serve_answers_to(federation: Federation, cluster: str) -> float:
    """Serve's answers to ``cluster``'s names so far: ``feddns_dns_answers_first_tier_total{source_cluster}``."""
    return serve_counter(federation, "feddns_dns_answers_first_tier", source_cluster=cluster)


LOAD_SECONDS = 30
"""How long serve's answers to foo are counted to measure what the short TTL costs."""


def test_serve_hears_from_each_cluster_dns_replica_about_once_a_ttl_a_name(federation: Federation) -> None:
    """What the short TTL costs serve: over LOAD_SECONDS, foo's pods ask for myservice many times a
    second (the asker's A every LOOP_SECONDS, the fetcher's A and AAAA for each request), and the
    queries that reach serve from foo's CoreDNS (its replicas, each with its stub zone's cache) are
    at most about one per replica, qtype and TTL (A and AAAA: serve's AAAA is NODATA, held for the
    negative TTL), with room for a refresh that lands in the window's both ends."""
    node = federation.node
    replicas = int((node.api.get("Deployment", "kube-system", "coredns") or {})["spec"]["replicas"])
    began, before = time.time(), serve_answers_to(federation, "foo")
    time.sleep(LOAD_SECONDS)
    after, ended = serve_answers_to(federation, "foo"), time.time()
    asked = sum(1 for pod in ("asker", "fetcher") for a in answers(node, pod) if began <= a.at <= ended)
    reached = (after - before) / (ended - began)
    bound = replicas * 2 / ANSWER_TTL + 1
    FIGURES["serve's load from foo"] = (
        f"{reached:.2f} queries/s reached serve from foo's {replicas} CoreDNS replicas while foo's pods asked "
        f"{asked / (ended - began):.1f} times/s (TTL {ANSWER_TTL} s; at most {bound:.1f}/s expected)")
    assert asked / (ended - began) > 2 * bound, asked
    assert 0 < reached <= bound, reached


def test_every_shard_unready_in_both_clusters_still_answers_every_shard_and_is_counted(
        federation: Federation) -> None:
    """Every backend of myservice fails its probe in both clusters at once (a shared dependency, say):
    serve fails open (docs/reference.md section 2), so each cluster's pods still get every shard, in the
    usual order (their own clusterIP first), and ``feddns_dns_answers_none_ready_total`` counts those
    answers. Ready again, the answers are the ordinary ones."""
    node, bar = federation.node, federation.bar
    expected = {"foo": [federation.cluster_ip, federation.lb["bar"]],
                "bar": [federation.bar_cluster_ip, federation.lb["foo"]]}
    before = serve_counter(federation, "feddns_dns_answers_none_ready")
    began = time.time()
    try:
        for cluster in (node, bar):
            set_probe(cluster, False)
        deadline = time.monotonic() + 60
        while ready_endpoints(node) or ready_endpoints(bar):
            assert time.monotonic() < deadline, (node.describe(APP_NS), bar.describe(APP_NS))
            time.sleep(0.2)
        unready = time.time()
        # serve has seen both shards unready within a second of the slices; then past every cache.
        time.sleep(ANSWER_TTL + 2)
        for cluster in (node, bar):
            printed = cluster.kubectl("-n", APP_NS, "exec", "asker", "--", "dig", "+short", QNAME).stdout.split()
            assert printed == expected[cluster.cluster], (cluster.cluster, printed)
            late = [a for a in answers(cluster, "asker") if a.at >= unready + ANSWER_TTL + 1]
            assert late and all(a.rcode == "NOERROR" and list(a.addresses) == expected[cluster.cluster]
                                for a in late), (cluster.cluster, late[-5:])
        counted = serve_counter(federation, "feddns_dns_answers_none_ready") - before
        assert counted > 0, counted
        FIGURES["every shard unready"] = (
            f"foo's pods got {' '.join(expected['foo'])}, bar's {' '.join(expected['bar'])}; "
            f"feddns_dns_answers_none_ready_total rose by {counted:.0f} in {time.time() - began:.0f} s")
    finally:
        for cluster in (node, bar):
            set_probe(cluster, True)
    for cluster in (node, bar):
        own = federation.cluster_ip_of(cluster.cluster)
        wait_for_steady(cluster, "asker", lambda a, own=own: a.addresses[:1] == (own,), time.time(), 60, steady=0)
    after = serve_counter(federation, "feddns_dns_answers_none_ready")
    time.sleep(ANSWER_TTL + 2)
    assert serve_counter(federation, "feddns_dns_answers_none_ready") == after, "still failing open once ready"


def test_an_external_client_gets_every_shards_address_from_serve_and_connects(federation: Federation) -> None:
    """A client outside both clusters, on the link, asks serve through its load-balancer address:
    the answer holds every shard's load-balancer address (and no clusterIP), and an HTTP request to
    the first is answered by that shard's cluster."""
    client = federation.clusters.client
    printed = client.run("dig", "+short", f"@{federation.serve_ip}", QNAME).split()
    assert sorted(printed) == sorted(federation.lb.values()), printed
    body = client.run("curl", "-sS", "--max-time", "5", f"http://{printed[0]}/").strip()
    owner = next(name for name, ip in federation.lb.items() if ip == printed[0])
    assert body == owner, (printed, body)
    FIGURES["external client: dig +short @serve"] = f"{' '.join(printed)}; curl http://{printed[0]}/ printed {body}"


def path_checks(node: Node, namespace: str = "kube-system") -> dict[str, tuple[float | None, str]]:
    """Each stub-zone endpoint pod's (in ``namespace``) ``feddns_stubzone_path_ok`` for myfederation (None: not
    probed yet) and its /health body, read through the API server's proxy to the pod's metrics port, as
    Prometheus scrapes."""
    pods = node.api.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector="
                                   "app.kubernetes.io%2Fname%3Dfeddns-stubzone")["items"]
    found = {}
    for pod in pods:
        if pod["status"].get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            continue
        proxy = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}:9155/proxy"
        metrics = node.kubectl("get", "--raw", f"{proxy}/metrics").stdout
        health = node.kubectl("get", "--raw", f"{proxy}/health", check=False).stdout
        value = re.search(r'^feddns_stubzone_path_ok\{federation="myfederation"\} (\S+)$', metrics, re.MULTILINE)
        found[pod["metadata"]["name"]] = (float(value.group(1)) if value else None, health)
    return found


def wait_for_path(node: Node, ok: float, timeout: float, says: str = "",
                  namespace: str = "kube-system") -> dict[str, tuple[float | None, str]]:
    """Until every endpoint pod (in ``namespace``) reports path_ok ``ok`` and its /health body holds ``says``;
    TimeoutError with what they report."""
    deadline = time.monotonic() + timeout
    while (not (checks := path_checks(node, namespace))
           or any(value != ok or says not in health for value, health in checks.values())):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the endpoints did not report path_ok {ok} ({says!r}) within {timeout:.0f} s: "
                               f"{checks}")
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
    (shipped,) = [o for o in kubeadm_coredns_objects(images.coredns_ref(), node.ranges.dns_ip)
                  if o["kind"] == "Deployment"]
    node.api.request("PUT", "/apis/apps/v1/namespaces/kube-system/deployments/coredns", shipped)
    node.wait_rollout("kube-system", "Deployment", "coredns", 180)
    rolled = time.monotonic()
    checks = wait_for_path(node, 0.0, PROBE_INTERVAL + 60)
    FIGURES["path lost"] = (f"{time.monotonic() - rolled:.1f} s from kubeadm's CoreDNS rolled out (no mount) to "
                            f"every endpoint reporting path_ok 0 (probe interval {PROBE_INTERVAL} s)")
    assert all("path myfederation: broken" in health for _, health in checks.values()), checks
    sh(node, "bash", "deploy/cluster-dns/coredns/coredns-import.sh", "--context", "foo")
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


@contextlib.contextmanager
def node_local_dns(node: Node) -> Iterator[dict[str, Any]]:
    """docs/operations.md, "NodeLocal DNSCache", in foo: Service kube-dns-upstream, the upstream ConfigMap
    node-local-dns with the federation's block added by node-local-dns-import.sh, the DaemonSet rolled out,
    and pod ``cached`` in APP_NS asking QNAME through the cache (dig_loop_pod). Yields the ConfigMap as the
    upstream manifest ships it (no federation block); takes all of it away after."""
    upstream = node.api.apply({"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "kube-dns-upstream", "namespace": "kube-system"}, "spec": {
        "selector": {"k8s-app": "kube-dns"}, "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                                                      {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}})
    configmap, daemonset = node_local_dns_objects(upstream["spec"]["clusterIP"])
    node.api.apply(configmap)
    # node-cache's -setupinterface puts the address on a dummy interface; this kernel has no dummy module.
    node.netns.run("ip", "addr", "add", f"{NODE_LOCAL_DNS}/32", "dev", "lo")
    try:
        sh(node, "bash", "deploy/cluster-dns/node-local-dns/node-local-dns-import.sh", "--context", "foo")
        node.api.apply(daemonset)
        node.wait_rollout("kube-system", "DaemonSet", "node-local-dns", 120)
        pod = dig_loop_pod("cached", QNAME)
        pod["spec"].update(dnsPolicy="None", dnsConfig={"nameservers": [NODE_LOCAL_DNS]})
        node.api.apply(pod)
        wait_running(node, APP_NS, "cached")
        yield configmap
    finally:
        # Until the pods are gone: the next test's pod of the same name, and the next cache's bind of the
        # address, would meet them still terminating.
        node.kubectl("-n", APP_NS, "delete", "pod", "cached", "--timeout=120s", check=False)
        node.kubectl("-n", "kube-system", "delete", "--cascade=foreground", "--timeout=120s",
                     "daemonset/node-local-dns", "configmap/node-local-dns", "service/kube-dns-upstream", check=False)
        node.netns.run("ip", "addr", "del", f"{NODE_LOCAL_DNS}/32", "dev", "lo")


def test_node_local_dns_in_front_sends_the_federation_to_coredns_which_tags_it(federation: Federation) -> None:
    """docs/operations.md, "NodeLocal DNSCache": with the upstream node-local-dns in front of CoreDNS as pods,
    node-local-dns-import.sh makes a pod that asks the cache get foo's clusterIP first (CoreDNS tags it)."""
    node = federation.node
    with node_local_dns(node):
        first, _ = wait_for_steady(node, "cached", lambda a: a.addresses[:1] == (federation.cluster_ip,), 0, 120)
        FIGURES["through node-local-dns"] = f"{first.rcode} {' '.join(first.addresses)} (foo's clusterIP first)"


WHOAMI = "_whoami.myfederation.svc.federation."
"""The name the endpoint's path check asks (TXT): serve says how it found the asker (docs/reference.md)."""


def probe_node_local_dns(node: Node, enabled: bool) -> None:
    """``helm upgrade`` of foo's member release with ``nodeLocalDNS.enabled`` (the path check asks the cache's
    address, else the DNS Service), its other values kept; until its endpoint has rolled out."""
    sh(node, "helm", "upgrade", "feddns-member", "deploy/helm/feddns-member", "-n", MEMBER_NS, "--reuse-values",
       "--set", f"nodeLocalDNS.enabled={str(enabled).lower()}")
    node.wait_rollout("kube-system", "Deployment", "feddns-stubzone", 180)


def restart_node_local_dns(node: Node) -> float:
    """The stand-in for node-cache renders its Corefile from ConfigMap node-local-dns once, as it starts (its
    init container): restarted, it serves the ConfigMap as it is now. When the new pod had rolled out (Unix
    seconds)."""
    node.kubectl("-n", "kube-system", "rollout", "restart", "daemonset/node-local-dns")
    node.wait_rollout("kube-system", "DaemonSet", "node-local-dns", 120)
    return time.time()


def test_the_path_check_asks_node_local_dns_and_sees_its_federation_block_go_and_come_back(
        federation: Federation) -> None:
    """docs/operations.md, "NodeLocal DNSCache", with the member chart's ``nodeLocalDNS.enabled``: the endpoint
    asks _whoami at the cache's address. When the cache's Corefile loses its federation block (the upstream
    ConfigMap applied again, as the addon manager does to a ``Reconcile`` object), the pods asking the cache
    lose the federation and, within two probe intervals of the first such answer, the endpoint reports the
    path broken, though the DNS Service (CoreDNS) still answers _whoami tagged; node-local-dns-import.sh puts
    the block back and the path is reported whole again."""
    node = federation.node
    through_cache = f"path myfederation: ok: cluster foo by option via {NODE_LOCAL_DNS}:53"
    with node_local_dns(node) as shipped:
        try:
            probe_node_local_dns(node, True)
            wait_for_path(node, 1.0, PROBE_INTERVAL + 60, says=through_cache)
            node.api.apply(shipped)
            restarted = restart_node_local_dns(node)
            lost = wait_for_answer(node, "cached", lambda a: a.rcode != "TIMEOUT" and not a.addresses, restarted, 120)
            checks = wait_for_path(node, 0.0, 2 * PROBE_INTERVAL, says="path myfederation: broken: answered")
            FIGURES["path lost at node-local-dns"] = (
                f"{time.time() - lost.at:.1f} s from a pod's first answer from node-local-dns without its federation "
                f"block ({lost.rcode}) to every endpoint reporting path_ok 0 (probe interval {PROBE_INTERVAL} s)")
            tagged = node.kubectl("-n", APP_NS, "exec", "asker", "--", "dig", "+short", f"@{node.ranges.dns_ip}",
                                  WHOAMI, "TXT").stdout
            assert '"cluster=foo" "by=option"' in tagged, (tagged, checks)
            sh(node, "bash", "deploy/cluster-dns/node-local-dns/node-local-dns-import.sh", "--context", "foo")
            restarted = restart_node_local_dns(node)
            wait_for_answer(node, "cached", lambda a: a.addresses[:1] == (federation.cluster_ip,), restarted, 120)
            wait_for_path(node, 1.0, 2 * PROBE_INTERVAL, says=through_cache)
        finally:
            probe_node_local_dns(node, False)
    wait_for_path(node, 1.0, PROBE_INTERVAL + 60, says=f"via {node.ranges.dns_ip}:53")


PLAIN_NS = "feddns-plain"
"""Where the plain manifests' stub-zone endpoint runs, beside the chart's in kube-system."""


def plain_stubzone_objects(pki: Path, namespace: str) -> list[dict[str, Any]]:
    """deploy/cluster-dns/coredns/stubzone.yaml with its Secret's placeholders filled in with foo's certificate
    (docs/operations.md, "The plain manifests"), moved beside the chart's endpoint: its objects in
    ``namespace``, but its Roles and RoleBindings, which stay where they grant (kube-system) under names of their
    own, and ConfigMap coredns-feddns, which is left out: the chart's, which holds the federation, is read by
    both endpoints."""
    moved = []
    for obj in yaml.safe_load_all((REPO / "deploy/cluster-dns/coredns/stubzone.yaml").read_text()):
        kind, meta = obj["kind"], obj["metadata"]
        if kind == "ConfigMap":
            continue
        if kind in ("Role", "RoleBinding"):
            meta["name"] = f"{meta['name']}-{namespace}"
        else:
            meta["namespace"] = namespace
        if kind == "RoleBinding":
            obj["roleRef"]["name"] = f"{obj['roleRef']['name']}-{namespace}"
            for subject in obj["subjects"]:
                subject["namespace"] = namespace
        if kind == "Secret":
            obj["stringData"] = {"tls.crt": (pki / "foo.crt").read_text(), "tls.key": (pki / "foo.key").read_text(),
                                 "ca.crt": (pki / "ca.crt").read_text()}
        moved.append(obj)
    return moved


def test_the_plain_manifests_endpoint_finds_the_cluster_dns_service_itself_and_sees_the_path(
        federation: Federation) -> None:
    """docs/operations.md, "The plain manifests": deploy/cluster-dns/coredns/stubzone.yaml applied with kubectl,
    no Helm (plain_stubzone_objects). Given no address to ask, its endpoint finds the cluster DNS Service
    through the API (``--probe-service``, kubeadm's labels) and reports the path ok there: foo's CoreDNS,
    tagged. Deleted after, nothing of it is left."""
    node = federation.node
    objects = plain_stubzone_objects(federation.directory / "pki", PLAIN_NS)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--probe-service=kube-system/k8s-app=kube-dns" in args, args
    assert not any(arg.startswith("--probe-server") for arg in args), args
    manifest = yaml.safe_dump_all(objects)
    sh(node, "kubectl", "create", "namespace", PLAIN_NS)
    try:
        sh(node, "kubectl", "apply", "-f", "-", input=manifest)
        node.wait_rollout(PLAIN_NS, "Deployment", "feddns-stubzone", 180)
        checks = wait_for_path(node, 1.0, 120, namespace=PLAIN_NS,
                               says=f"path myfederation: ok: cluster foo by option via {node.ranges.dns_ip}:53")
        assert len(checks) == deployment["spec"]["replicas"], checks
    finally:
        node.kubectl("delete", "--cascade=foreground", "-f", "-", "--timeout=120s", input=manifest, check=False)
        node.kubectl("delete", "namespace", PLAIN_NS, "--timeout=120s", check=False)
    left = [(o["kind"], o["metadata"]["name"]) for o in objects
            if node.api.get(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) is not None]
    assert not left, left
    assert node.api.get("Namespace", None, PLAIN_NS) is None
    wait_for_path(node, 1.0, PROBE_INTERVAL + 60, says=f"via {node.ranges.dns_ip}:53")


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
    """A pod fetching by name every 0.2 s sees no failed request, and a pod asking with dig never two
    failed queries in a row, while ``helm upgrade`` changes a value (serve's TTL: a new ReplicaSet
    rolls), a serve pod is deleted, and the controller's leader is deleted (its successor takes over
    within the lease and keeps the stub zone)."""
    node = federation.node
    began = time.time()
    values = {**federation.values, "serve": {"ttl": UPGRADED_TTL}}
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
    bad = [a.rcode != "NOERROR" or a.addresses[:1] != (federation.cluster_ip,) for a in during]
    failed = [a for a, wrong in zip(during, bad, strict=True) if wrong]
    fetched = [a for a in answers(node, "fetcher") if began <= a.at <= ended]
    unanswered = [a for a in fetched if a.addresses != ("foo",)]
    FIGURES["query loop"] = (f"{len(during)} queries over {ended - began:.0f} s through helm upgrade, a deleted "
                             f"serve pod and a deleted leader: {len(failed)} failed (dig, one try of 1 s); "
                             f"{len(fetched)} HTTP requests by name (the C library's resolver): "
                             f"{len(unanswered)} failed")
    # What an application sees: every request by name answered by foo (the C library retries a
    # question, as resolvers do). dig's single 1 s try may miss one answer while a serve pod goes (CI
    # saw one TIMEOUT in 194: a forward to the going pod that times out before the stub zone gives its
    # stale answer, most likely), never two in a row.
    assert len(fetched) > 50 and not unanswered, unanswered[:10]
    assert not any(one and two for one, two in itertools.pairwise(bad)), failed[:10]
    assert leader(node) != old_leader


def upgrade_until_stub_zone_gone(federation: Federation, values: dict[str, Any], member: Node) -> tuple[float, float]:
    """``helm upgrade`` of the federation with ``values`` (docs/operations.md, "Remove a member
    cluster"), then until the controller has deleted ``member``'s stub zone. When the upgrade began
    and when the key was seen gone (Unix seconds; seen by polling, as the key's managedFields entry
    goes with the key: at most 0.2 s late)."""
    (federation.directory / "myfederation.yaml").write_text(yaml.safe_dump(values))
    federation.values = values
    began = time.time()
    sh(federation.node, "helm", "upgrade", "myfederation", "deploy/helm/feddns-federation", "-n", FEDERATION_NS,
       "-f", str(federation.directory / "myfederation.yaml"))
    deadline = time.monotonic() + 180
    zones = STUB_ZONES[member.cluster]
    while "myfederation.server" in (member.api.get("ConfigMap", "kube-system", zones) or {}).get("data", {}):
        assert time.monotonic() < deadline, f"the controller did not delete {member.cluster}'s stub zone"
        time.sleep(0.2)
    return began, time.time()


def test_when_bar_leaves_no_answer_in_foo_includes_its_addresses(federation: Federation) -> None:
    """docs/operations.md's "Remove a member cluster" for bar: the controller DELETEs bar's stub
    zone (bar's pods stop getting the federation's answers; timed as the join is) and bar's
    shards, and from then on no answer in foo carries bar's load-balancer address."""
    node, bar = federation.node, federation.bar
    values = {**federation.values, "serve": {"ttl": UPGRADED_TTL},
              "clusters": [c for c in federation.values["clusters"] if c["name"] != "bar"]}
    began, written = upgrade_until_stub_zone_gone(federation, values, bar)
    # serve drops bar's shards at once, so bar's pod is first answered with foo's address alone; the
    # leave is done when bar's DNS no longer forwards the federation: no address at all.
    gone, every = wait_for_steady(bar, "asker", lambda a: not a.addresses, began, 300)
    record("leave-first", gone.at - written)
    record("leave-every", every.at - written)
    FIGURES["leave bar"] = (f"{gone.at - written:.1f} s from the endpoint's removal of bar's stub zone to bar's pod's "
                            f"first answer without the federation ({gone.rcode}), {every.at - written:.1f} s to every "
                            "answer")
    bar_lb = federation.lb["bar"]
    first, _ = wait_for_steady(node, "asker", lambda a: bar_lb not in a.addresses, began, 120, steady=0)
    # Once serve has dropped bar's shard, a CoreDNS cache can hold the old answer for its TTL at most
    # (UPGRADED_TTL: the stub zone holds nothing past it); after that, no answer in foo may carry bar's address.
    held = UPGRADED_TTL + 1
    time.sleep(max(0.0, first.at + held - time.time()) + 2)
    late = [a for a in answers(node, "asker") if a.at >= first.at + held and bar_lb in a.addresses]
    assert not late, late[:5]
    printed = node.kubectl("-n", APP_NS, "exec", "asker", "--", "dig", "+short", QNAME).stdout.split()
    assert printed == [federation.cluster_ip], printed
    FIGURES["foo after bar left: dig +short"] = " ".join(printed)


def test_leaving_the_federation_stops_the_forwarding_and_is_timed(federation: Federation) -> None:
    """docs/operations.md's "Remove a member cluster" for foo's stub zone: the controller DELETEs it,
    and the pod's next answers are not the federation's. Timed as the join is."""
    node = federation.node
    values = {**federation.values, "serve": {"ttl": UPGRADED_TTL},
              "clusters": [{k: v for k, v in c.items() if k != "stubzone"} for c in federation.values["clusters"]]}
    values.pop("nameservers")
    began, written = upgrade_until_stub_zone_gone(federation, values, node)
    gone, every = wait_for_steady(node, "asker", lambda a: a.addresses[:1] != (federation.cluster_ip,), began, 300)
    federation.leave_seconds = every.at - written
    record("leave-first", gone.at - written)
    record("leave-every", every.at - written)
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
    sh(node, "bash", "deploy/cluster-dns/coredns/coredns-import.sh", "--context", "foo", "--undo")
    left = [(kind, namespace, name) for objects in made.values() for kind, namespace, name in objects
            if kind != "Namespace" and node.api.get(kind, namespace, name) is not None]
    assert not left, left
    corefile = (node.api.get("ConfigMap", "kube-system", "coredns") or {})["data"]["Corefile"]
    assert "feddns" not in corefile
    node.wait_rollout("kube-system", "Deployment", "coredns", 120)
