"""The member chart on each platform (``clusterDNS.platform``), with the real helm and a real kube-apiserver.

tests/deploy/test_charts.py lints, renders and dry-runs every sample, samples/<platform>.yaml included;
this module holds each platform's render to what docs/operations.md ("Join a cluster") promises:

* the endpoint's backend and its flags (:data:`PLATFORMS`);
* RBAC on exactly the objects that backend writes (``resourceNames``), get and update only;
* no object the platform owns: not its CoreDNS, not ``coredns-custom``, not ``kube-dns``, not the DNS
  operator's ``DNS default``;
* OpenShift's pods ask for no user or group (its restricted SCC assigns them), the others run as 65532;
* rke2: kubeadm's ConfigMap, which a HelmChartConfig (deploy/cluster-dns/rke2/) has RKE2's CoreDNS import;
* eks, forwarder and openshift: the chart's own CoreDNS, feddns-forwarder, as the second container of
  the endpoint's pods, serving only the blocks the endpoint writes into the directory they share
  (``--mirror-dir``, an ``emptyDir``: no ConfigMap volume, no kubelet sync to wait for) on 1053
  behind a Service on 53; no Deployment or PodDisruptionBudget of its own;
* the forwarder's Corefile, run by the real CoreDNS with a block the coredns backend renders for its
  port, forwards the federation's stub domain tagged with the cluster's name and refuses the rest;
  and with the real endpoint, as the chart runs it against the real API server with the chart's Role,
  a POST reaches it through the mirrored directory and a DELETE takes it out;
* the pre-delete hook runs the endpoint's own arguments with ``--remove-all``; and ``feddns stubzone
  --remove-all`` itself, run with the installed release's hook arguments as the chart's ServiceAccount
  against the real API server, deletes the federations and keeps every other key.
"""

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.edns
import dns.message
import dns.query
import dns.rcode
import dns.rrset
import pytest
import yaml

from harness import peers
from harness.kubecluster import KubeCluster
from harness.platformdns import OpenShiftOperator
from harness.ports import free_port
from harness.process import ChildProcess
from harness.serve import ServeProcess, write_records
from harness.stubzone import Pki, StubzoneProcess, make_pki
from stubzone.backends import BACKENDS
from stubzone.backends.corefile import parse, render
from stubzone.model import Nameserver
from tests.deploy.manifests import REPO, containers, find, flag
from tests.deploy.test_charts import MEMBER, PLATFORMS, Obj, helm, script_env
from tests.stubzone import platforms as stubzone_platforms

CHART_NAMESPACE = "kube-system"
"""``stubzone.namespace`` of the samples but openshift's."""
OWNED_BY_PLATFORMS = {("ConfigMap", "coredns"), ("ConfigMap", "coredns-custom"), ("ConfigMap", "kube-dns"),
                      ("Deployment", "coredns"), ("DNS", "default"), ("HelmChartConfig", "rke2-coredns")}
"""What the platforms' own reconcilers keep as they ship it; the chart renders none of them."""


@dataclass(frozen=True)
class Platform:
    """What the chart renders for one ``clusterDNS.platform``."""

    backend: str
    flags: dict[str, list[str]]
    """Flags of the endpoint's backend, as ``flag()`` reads them (``--configmap``, ``--coredns-port``)."""
    rules: tuple[str, str, tuple[Obj, ...]]
    """(kind, namespace, rules) of the endpoint's one Role or ClusterRole (namespace "" for a ClusterRole)."""
    forwarder: bool = False


def _configmap_rule(name: str, *more: str) -> Obj:
    return {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name],
            "verbs": ["get", "update", *more]}


MIRROR_DIR = "/etc/coredns/feddns"
"""Where the endpoint writes the blocks in forwarder mode (``--mirror-dir``) and feddns-forwarder imports them."""
FORWARDER = Platform("coredns", {"configmap": ["kube-system/feddns-forwarder-zones"], "coredns-port": ["1053"],
                                 "mirror-dir": [MIRROR_DIR]},
                     ("Role", "kube-system", (_configmap_rule("feddns-forwarder-zones", "list", "watch"),)),
                     forwarder=True)
CUSTOM = Platform("coredns-custom", {"configmap": ["kube-system/coredns-custom"], "coredns-port": [],
                                     "mirror-dir": []},
                  ("Role", "kube-system", (_configmap_rule("coredns-custom"),)))
CHART_CONFIGMAP = Platform("coredns", {"configmap": ["kube-system/coredns-feddns"], "coredns-port": [],
                                       "mirror-dir": []},
                           ("Role", "kube-system", (_configmap_rule("coredns-feddns"),)))
PLATFORMS_RENDER = {
    "kubeadm": CHART_CONFIGMAP,
    "aks": CUSTOM,
    "k3s": CUSTOM,
    "gke": Platform("kube-dns", {"configmap": ["kube-system/kube-dns"], "coredns-port": []},
                    ("Role", "kube-system", (_configmap_rule("kube-dns"),))),
    "openshift": Platform("coredns", {"configmap": ["feddns-system/feddns-forwarder-zones"], "coredns-port": ["1053"],
                                      "mirror-dir": [MIRROR_DIR]},
                          ("Role", "feddns-system", (_configmap_rule("feddns-forwarder-zones", "list", "watch"),)),
                          forwarder=True),
    "eks": FORWARDER,
    "rke2": CHART_CONFIGMAP,
    "forwarder": FORWARDER,
}
assert set(PLATFORMS_RENDER) == set(PLATFORMS)


def template(platform: str, *values: str) -> list[Obj]:
    """``helm template`` of the member chart with samples/<platform>.yaml (and ``--set`` ``values``)."""
    sets = [arg for value in values for arg in ("--set", value)]
    done = helm("template", "feddns-member", str(MEMBER), "--namespace", "feddns-system",
                "--values", str(MEMBER / "samples" / f"{platform}.yaml"), *sets)
    assert done.returncode == 0, done.stderr
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


@pytest.fixture(scope="module")
def renders() -> dict[str, list[Obj]]:
    return {platform: template(platform) for platform in PLATFORMS}


def stubzone_args(objects: list[Obj], kind: str = "Deployment") -> list[str]:
    (container,) = [c for c in containers(objects) if c.is_feddns and c.workload["kind"] == kind
                    and c.spec["args"][0] == "stubzone"]
    return list(container.spec["args"])


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_endpoint_runs_the_platforms_backend(renders: dict[str, list[Obj]], platform: str) -> None:
    args = stubzone_args(renders[platform])
    expected = PLATFORMS_RENDER[platform]
    assert flag(args, "backend") == [expected.backend]
    assert flag(args, "cluster") == ["foo"]
    for name, values in expected.flags.items():
        assert flag(args, name) == values, name


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_endpoints_rights_name_only_what_its_backend_writes(renders: dict[str, list[Obj]], platform: str) -> None:
    """Named after the endpoint's namespace, so two member releases never write one Role."""
    kind, namespace, rules = PLATFORMS_RENDER[platform].rules
    release_namespace = "feddns-system" if platform == "openshift" else CHART_NAMESPACE
    name = f"feddns-stubzone-{release_namespace}"
    roles = [o for o in renders[platform] if o["kind"] in ("Role", "ClusterRole")
             and o["metadata"]["name"].startswith("feddns-stubzone") and "probe" not in o["metadata"]["name"]]
    assert [(r["kind"], r["metadata"]["name"], r["metadata"].get("namespace", "")) for r in roles] == [
        (kind, name, namespace)]
    assert roles[0]["rules"] == list(rules)
    (binding,) = [o for o in renders[platform] if o["kind"] == kind + "Binding" and o["metadata"]["name"] == name]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "feddns-stubzone",
                                    "namespace": release_namespace}]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_no_object_the_platform_owns_is_rendered(renders: dict[str, list[Obj]], platform: str) -> None:
    rendered = {(o["kind"], o["metadata"]["name"]) for o in renders[platform]}
    assert not rendered & OWNED_BY_PLATFORMS
    chart_configmaps = {name for kind, name in rendered if kind == "ConfigMap"}
    assert chart_configmaps == {"kubeadm": {"coredns-feddns"}, "eks": {"feddns-forwarder", "feddns-forwarder-zones"},
                                "rke2": {"coredns-feddns"},
                                "openshift": {"feddns-forwarder", "feddns-forwarder-zones"},
                                "forwarder": {"feddns-forwarder", "feddns-forwarder-zones"}}.get(platform, set())


@pytest.mark.parametrize("platform", PLATFORMS)
def test_openshift_pods_ask_for_no_user_and_the_others_run_as_65532(
        renders: dict[str, list[Obj]], platform: str) -> None:
    workloads = {(o["kind"], o["metadata"]["name"]): o["spec"]["template"]["spec"] for o in renders[platform]
                 if o["kind"] in ("Deployment", "Job")}
    assert set(workloads) == {("Deployment", "feddns-stubzone"), ("Job", "feddns-stubzone-remove-all")}
    endpoint = workloads[("Deployment", "feddns-stubzone")]
    assert [c["name"] for c in endpoint["containers"]] == (
        ["stubzone", "coredns"] if PLATFORMS_RENDER[platform].forwarder else ["stubzone"])
    for pod in (spec["securityContext"] for spec in workloads.values()):
        assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}
        if platform == "openshift":
            assert "runAsUser" not in pod and "runAsGroup" not in pod, pod
        else:
            assert (pod["runAsUser"], pod["runAsGroup"]) == (65532, 65532), pod


RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
"""The volume types OpenShift's restricted-v2 SCC allows (its ``volumes``)."""


def restricted_scc_refusals(pod: Obj) -> list[str]:
    """What OpenShift's restricted-v2 SCC would refuse in the pod spec ``pod`` (no OpenShift runs here, so its
    rules, as the SCC object states them, checked field by field): no host namespaces, ports or paths; no
    privilege or its escalation; capabilities dropped (ALL) and none added but NET_BIND_SERVICE; user, fsGroup
    and SELinux options left to the SCC (MustRunAsRange, MustRunAs: a fixed one outside the namespace's
    range is refused, and the range is not known before the namespace exists); seccomp runtime/default."""
    refusals = [f"spec.{field}" for field in ("hostNetwork", "hostPID", "hostIPC") if pod.get(field)]
    refusals += [f"volume {v['name']}" for v in pod.get("volumes", []) if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    contexts = [("pod", pod.get("securityContext") or {})]
    for container in pod.get("initContainers", []) + pod["containers"]:
        context = container.get("securityContext") or {}
        contexts.append((container["name"], context))
        caps = context.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []) or not set(caps.get("add", [])) <= {"NET_BIND_SERVICE"}:
            refusals.append(f"{container['name']}: capabilities {caps}")
        if context.get("privileged") or context.get("allowPrivilegeEscalation", True):
            refusals.append(f"{container['name']}: privilege escalation not turned off")
        refusals += [f"{container['name']}: hostPort" for port in container.get("ports", []) if "hostPort" in port]
    for where, context in contexts:
        refusals += [f"{where}: {field}" for field in ("runAsUser", "fsGroup", "seLinuxOptions") if field in context]
        if context.get("seccompProfile", {"type": "RuntimeDefault"}) != {"type": "RuntimeDefault"}:
            refusals.append(f"{where}: seccompProfile {context['seccompProfile']}")
    return refusals


def test_every_openshift_pod_is_one_the_restricted_scc_admits(renders: dict[str, list[Obj]]) -> None:
    """The endpoint with feddns-forwarder in its pod (their shared emptyDir included) and its uninstall hook;
    kubeadm's fixed user is what the check refuses."""
    pods = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in renders["openshift"]
            if o["kind"] in ("Deployment", "Job")}
    assert set(pods) == {"feddns-stubzone", "feddns-stubzone-remove-all"}
    assert [c["name"] for c in pods["feddns-stubzone"]["containers"]] == ["stubzone", "coredns"]
    assert {"name": "stub-zones", "emptyDir": {}} in pods["feddns-stubzone"]["volumes"]
    for name, pod in pods.items():
        assert restricted_scc_refusals(pod) == [], name
    kubeadm = next(o for o in renders["kubeadm"] if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert restricted_scc_refusals(kubeadm) == ["pod: runAsUser"]


def test_openshift_without_the_forwarder_writes_the_dns_operators_object_untagged() -> None:
    """The fallback for a cluster that cannot run feddns-forwarder: --backend openshift, a ClusterRole on
    DNS default only, no forwarder."""
    objects = template("openshift", "clusterDNS.openshift.forwarder=false")
    args = stubzone_args(objects)
    assert (flag(args, "backend"), flag(args, "configmap"), flag(args, "coredns-port")) == (["openshift"], [], [])
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"
               and o["metadata"]["name"] == "feddns-stubzone-feddns-system"]
    assert role["rules"] == [{"apiGroups": ["operator.openshift.io"], "resources": ["dnses"],
                              "resourceNames": ["default"], "verbs": ["get", "update"]}]
    assert not [o for o in objects if o["metadata"]["name"].startswith("feddns-forwarder")]


def pod_containers(objects: list[Obj], namespace: str) -> dict[str, Obj]:
    """The containers of the endpoint's pod template, by name."""
    pod = find(objects, "Deployment", namespace, "feddns-stubzone")["spec"]["template"]["spec"]
    return {container["name"]: container for container in pod["containers"]}


@pytest.mark.parametrize("platform", [p for p in PLATFORMS if PLATFORMS_RENDER[p].forwarder])
def test_the_forwarder_runs_in_the_endpoints_pods_and_serves_its_blocks_and_nothing_else(
        renders: dict[str, list[Obj]], platform: str) -> None:
    objects = renders[platform]
    namespace = "feddns-system" if platform == "openshift" else CHART_NAMESPACE
    corefile = parse(find(objects, "ConfigMap", namespace, "feddns-forwarder")["data"]["Corefile"])
    assert corefile.imports == (f"{MIRROR_DIR}/*.server",)
    (block,) = corefile.blocks
    assert block.keys == ("federation.:1053",)  # no catch-all ".:1053": nothing else is resolved
    assert [(d.name, d.args) for d in block.directives] == [
        ("health", (":8080",)), ("ready", (":8181",)), ("reload", ("2s", "1s"))]  # the least CoreDNS takes
    # One pod: the endpoint writes the directory feddns-forwarder imports; no ConfigMap volume of the blocks.
    pod = find(objects, "Deployment", namespace, "feddns-stubzone")["spec"]["template"]["spec"]
    endpoint, coredns = pod_containers(objects, namespace)["stubzone"], pod_containers(objects, namespace)["coredns"]
    assert {"name": "stub-zones", "mountPath": MIRROR_DIR} in endpoint["volumeMounts"]
    assert flag(endpoint["args"], "mirror-dir") == [MIRROR_DIR]
    assert {"name": "stub-zones", "mountPath": MIRROR_DIR, "readOnly": True} in coredns["volumeMounts"]
    assert {"name": "corefile", "mountPath": "/etc/coredns", "readOnly": True} in coredns["volumeMounts"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["stub-zones"] == {"name": "stub-zones", "emptyDir": {}}
    assert volumes["corefile"]["configMap"]["name"] == "feddns-forwarder"
    assert not [v for v in pod["volumes"] if v.get("configMap", {}).get("name") == "feddns-forwarder-zones"]
    assert {(p["name"], p["containerPort"], p["protocol"]) for p in coredns["ports"]} >= {
        ("dns", 1053, "UDP"), ("dns-tcp", 1053, "TCP")}
    assert (coredns["readinessProbe"]["httpGet"], coredns["livenessProbe"]["httpGet"]) == (
        {"path": "/ready", "port": "ready"}, {"path": "/health", "port": "health"})
    service = find(objects, "Service", namespace, "feddns-forwarder")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == pod_labels(objects, namespace)
    assert {(p["port"], p["targetPort"], p["protocol"]) for p in service["spec"]["ports"]} == {
        (53, "dns", "UDP"), (53, "dns-tcp", "TCP")}
    # The endpoint writes its blocks on the port the forwarder serves.
    (port,) = flag(stubzone_args(objects), "coredns-port")
    written = parse(render("f", "f.svc.federation.", "foo", (Nameserver.parse("203.0.113.53"),), int(port)))
    assert written.blocks[0].keys == ("f.svc.federation.:1053",)
    # The endpoint's replicas and PodDisruptionBudget are the forwarder's: it has none of its own.
    assert not [o for o in objects if o["kind"] in ("Deployment", "PodDisruptionBudget")
                and o["metadata"]["name"] == "feddns-forwarder"]
    assert find(objects, "PodDisruptionBudget", namespace, "feddns-stubzone")["spec"]["selector"]["matchLabels"] == \
        pod_labels(objects, namespace)
    # Its DNS port is let in past the endpoint's NetworkPolicy, from anywhere.
    policy = find(objects, "NetworkPolicy", namespace, "feddns-stubzone")
    assert {"ports": [{"port": 1053, "protocol": "UDP"}, {"port": 1053, "protocol": "TCP"}]} in \
        policy["spec"]["ingress"]


@pytest.mark.parametrize(("shorter", "refusal"), [
    ("reload 1s 1s", "interval value must be greater or equal to 2s"),
    ("reload 2s 500ms", "jitter value must be 0 or greater or equal to 1s"),
])
def test_the_forwarders_reload_is_the_shortest_the_real_coredns_takes(
        renders: dict[str, list[Obj]], tmp_path: Path, shorter: str, refusal: str) -> None:
    """The Corefile's ``reload 2s 1s`` runs (test below); anything shorter, the real CoreDNS refuses."""
    corefile = find(renders["eks"], "ConfigMap", CHART_NAMESPACE, "feddns-forwarder")["data"]["Corefile"]
    assert "reload 2s 1s" in corefile
    path = tmp_path / "Corefile"
    path.write_text(corefile.replace("reload 2s 1s", shorter).replace(":1053", f":{free_port()}").replace(
        ":8080", f":{free_port()}").replace(":8181", f":{free_port()}").replace(MIRROR_DIR, str(tmp_path)))
    done = subprocess.run([peers.binary("coredns"), "-conf", str(path)], capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode != 0 and refusal in done.stdout + done.stderr, done.stdout + done.stderr


def pod_labels(objects: list[Obj], namespace: str) -> Obj:
    labels: Obj = find(objects, "Deployment", namespace, "feddns-stubzone")["spec"]["template"]["metadata"]["labels"]
    return labels


@pytest.mark.parametrize("platform", [p for p in PLATFORMS if not PLATFORMS_RENDER[p].forwarder])
def test_without_the_forwarder_the_endpoint_runs_alone_and_mirrors_nothing(
        renders: dict[str, list[Obj]], platform: str) -> None:
    objects = renders[platform]
    assert list(pod_containers(objects, CHART_NAMESPACE)) == ["stubzone"]
    assert flag(stubzone_args(objects), "mirror-dir") == []
    policy = find(objects, "NetworkPolicy", CHART_NAMESPACE, "feddns-stubzone")
    assert [rule["ports"] for rule in policy["spec"]["ingress"]] == [
        [{"port": 8443, "protocol": "TCP"}], [{"port": 9155, "protocol": "TCP"}]]


class Upstream:
    """A DNS server on a UDP port of 127.0.0.1 standing in for Federated-DNS: answers every A query with
    192.0.2.7 and keeps the EDNS0 options of each query it got."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)  # how soon close() is seen
        self.port = self.sock.getsockname()[1]
        self.options: list[list[dns.edns.Option]] = []
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="upstream DNS", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closing.is_set():
            try:
                wire, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            query = dns.message.from_wire(wire)
            self.options.append(list(query.options))
            reply = dns.message.make_response(query)
            reply.answer.append(dns.rrset.from_text(query.question[0].name, 30, "IN", "A", "192.0.2.7"))
            self.sock.sendto(reply.to_wire(), peer)

    def close(self) -> None:
        self._closing.set()
        self._thread.join()
        self.sock.close()


@dataclass
class ForwarderRun:
    """feddns-forwarder's CoreDNS, run: ``child`` answers on 127.0.0.1:``port``; ``ready`` its /ready port."""

    child: ChildProcess
    port: int
    ready: int


def run_forwarder(objects: list[Obj], namespace: str, directory: Path, federation: str | None, upstream: int = 0,
                  dns_port: int | None = None) -> ForwarderRun:
    """The real CoreDNS on the chart's Corefile with its ports moved to free ones (its DNS port to ``dns_port``
    when given) and its import directory to ``directory``/feddns, with the block the endpoint writes for
    ``federation`` (rendered for the endpoint's ``--coredns-port``) forwarding to 127.0.0.1:``upstream``
    (``federation`` ``None``: no block; the endpoint's ``--mirror-dir`` writes them)."""
    corefile = find(objects, "ConfigMap", namespace, "feddns-forwarder")["data"]["Corefile"]
    (port,) = flag(stubzone_args(objects), "coredns-port")
    dns_port, health, ready = dns_port or free_port(), free_port(), free_port()
    imports = directory / "feddns"
    imports.mkdir(exist_ok=True)
    (directory / "Corefile").write_text(corefile.replace(f":{port}", f":{dns_port}").replace(
        ":8080", f":{health}").replace(":8181", f":{ready}").replace(MIRROR_DIR, str(imports)))
    if federation is not None:
        block = render(federation, f"{federation}.svc.federation.", "foo",
                       (Nameserver.parse(f"127.0.0.1:{upstream}"),), int(port))
        (imports / f"{federation}.server").write_text(block.replace(f":{port} {{", f":{dns_port} {{"))
    child = ChildProcess([peers.binary("coredns"), "-conf", str(directory / "Corefile")], ready=r"^CoreDNS-\d",
                         name="coredns (feddns-forwarder)", log_path=directory / "coredns.log")
    child.start(timeout=30)
    return ForwarderRun(child, dns_port, ready)


def test_the_real_coredns_runs_the_forwarders_corefile_and_tags_what_it_forwards(
        renders: dict[str, list[Obj]], tmp_path: Path) -> None:
    upstream = Upstream()
    forwarder = run_forwarder(renders["eks"], CHART_NAMESPACE, tmp_path, "f", upstream.port)
    dns_port, ready, coredns = forwarder.port, forwarder.ready, forwarder.child
    try:
        def ask(qname: str) -> dns.message.Message:
            return dns.query.udp(dns.message.make_query(qname, "A"), "127.0.0.1", port=dns_port, timeout=5)

        answer = ask("myservice.myns.f.svc.federation.")
        assert [str(rr) for rrset in answer.answer for rr in rrset] == ["192.0.2.7"]
        assert [(o.otype, o.to_wire()) for o in upstream.options[-1]] == [(0xFEDD, b"foo")]
        assert ask("myservice.myns.g.svc.federation.").rcode() == dns.rcode.REFUSED  # no federation g here
        assert ask("example.com.").rcode() == dns.rcode.REFUSED  # no catch-all: nothing else is resolved
        with urllib.request.urlopen(f"http://127.0.0.1:{ready}/ready", timeout=5) as response:
            assert response.status == 200
    finally:
        coredns.stop()
        upstream.close()


WAIT = 60.0
"""Seconds a join or a leave may take to reach the forwarder before the test fails: a bound for a broken
path (two reload intervals and a watch event are far less), not a measure of it."""


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT:g} s: {what}")
        time.sleep(0.1)


def endpoint_as_the_chart_runs_it(objects: list[Obj], kube: KubeCluster, namespace: str, pki: Pki,
                                  mirror: Path, dns_port: int) -> StubzoneProcess:
    """The real endpoint with the Deployment's backend flags, as its ServiceAccount (the chart's Role applied
    for real); its ``--mirror-dir`` moved to ``mirror`` and ``--coredns-port`` to ``dns_port``, where the
    forwarder listens here (1053 in the pod); loopback nameservers let in (the upstream is on 127.0.0.1)."""
    role = f"feddns-stubzone-{namespace}"  # the chart names it after the endpoint's namespace
    for obj in objects:
        if (obj["kind"], obj["metadata"]["name"]) in {("ServiceAccount", "feddns-stubzone"),
                                                      ("Role", role), ("RoleBinding", role),
                                                      ("ConfigMap", "feddns-forwarder-zones")}:
            kube.apply(obj)
    kubeconfig = kube.write_kubeconfig(mirror.parent / "stubzone.kubeconfig",
                                       token=kube.service_account_token(namespace, "feddns-stubzone"))
    args = stubzone_args(objects)
    backend = [arg for name in ("backend", "cluster", "configmap", "cluster-domain", "federation-zone")
               for value in flag(args, name) for arg in (f"--{name}", value)]
    return StubzoneProcess(pki, *backend, "--coredns-port", str(dns_port), "--mirror-dir", str(mirror),
                           "--kubeconfig", kubeconfig, "--allow-loopback-nameservers")


def test_a_join_reaches_the_real_forwarder_through_the_mirror_and_a_leave_takes_it_out(
        kube_foo: KubeCluster, tmp_path: Path) -> None:
    """EKS's render: the endpoint (its flags, its Role on the real API server) and the real CoreDNS on the
    forwarder's Corefile share one directory, as the pod's emptyDir. No kubelet and no ConfigMap volume
    here: a POST's block reaches CoreDNS only through the endpoint's watch and its files, and a query to the
    forwarder then goes to the upstream tagged with the cluster's name. The DELETE takes it out again."""
    namespace = f"feddns-forwarder-{uuid.uuid4().hex[:8]}"
    objects = template("eks", f"stubzone.namespace={namespace}")
    upstream = Upstream()
    dns_port = free_port()
    forwarder = run_forwarder(objects, namespace, tmp_path, None, dns_port=dns_port)
    qname = "myservice.myns.f.svc.federation."
    try:
        assert query(forwarder.port, qname).rcode() == dns.rcode.REFUSED  # no federation yet
        with endpoint_as_the_chart_runs_it(objects, kube_foo, namespace, make_pki(tmp_path / "pki"),
                                           tmp_path / "feddns", forwarder.port) as endpoint:
            answer = endpoint.request("POST", "/federations/f", {"nameservers": [f"127.0.0.1:{upstream.port}"]})
            assert answer.status == 200, answer
            wait_until(lambda: answers(forwarder.port, qname) == ["192.0.2.7"], "the join served by the forwarder")
            assert [(o.otype, o.to_wire()) for o in upstream.options[-1]] == [(0xFEDD, b"foo")]
            assert endpoint.request("DELETE", "/federations/f").status == 200
            wait_until(lambda: query(forwarder.port, qname).rcode() == dns.rcode.REFUSED, "the leave served")
        assert forwarder.child.running
    finally:
        forwarder.child.stop()
        upstream.close()
        kube_foo.request("DELETE", f"/api/v1/namespaces/{namespace}")


def query(port: int, qname: str) -> dns.message.Message:
    return dns.query.udp(dns.message.make_query(qname, "A"), "127.0.0.1", port=port, timeout=5)


def answers(port: int, qname: str) -> list[str]:
    reply = query(port, qname)
    return [str(rr) for rrset in reply.answer for rr in rrset]


def notes(cluster: KubeCluster, platform: str, *values: str) -> str:
    """The chart's NOTES for samples/<platform>.yaml (and ``--set`` ``values``), as helm install prints them.
    In namespaces of their own and without the controller's access: even a client-side dry run refuses to
    print them over objects of the same names that other tests made in the shared cluster (the endpoint's
    Roles in kube-system are named after that namespace, so they never are)."""
    ns = f"feddns-notes-{uuid.uuid4().hex[:8]}"
    sets = [arg for value in (f"stubzone.namespace={ns}", "controllerAccess.enabled=false", *values)
            for arg in ("--set", value)]
    done = subprocess.run([peers.binary("helm"), "install", "feddns-member", str(MEMBER), "--dry-run=client",
                           "--namespace", ns, "--values", str(MEMBER / "samples" / f"{platform}.yaml"),
                           *sets], capture_output=True, text=True, timeout=120, check=False, env=script_env(cluster))
    assert done.returncode == 0, done.stderr
    return done.stdout[done.stdout.index("NOTES:"):]


class OperatorOf(OpenShiftOperator):
    """The DNS operator's CoreDNS for a ``DNS default`` whose ``spec.servers`` are ``servers`` (no CRD needed)."""

    def __init__(self, kube: KubeCluster, servers: list[Obj]) -> None:
        super().__init__(kube)
        self.servers = servers

    def sync(self) -> None:
        self.corefile.write_text(self.render({"spec": {"servers": self.servers}}))


def whoami(port: int, federation: str) -> dict[str, str]:
    """What Federated-DNS says of the asker of ``_whoami.<federation>.svc.federation.`` TXT through 127.0.0.1:port."""
    reply = dns.query.udp(dns.message.make_query(f"_whoami.{federation}.svc.federation.", "TXT"), "127.0.0.1",
                          port=port, timeout=5)
    assert reply.rcode() == dns.rcode.NOERROR, reply
    words = [raw.decode() for rrset in reply.answer for rr in rrset for raw in rr.strings]
    return dict(word.split("=", 1) for word in words)


def test_openshift_the_dns_operator_forwards_to_the_forwarder_and_serve_names_the_cluster_by_option(
        kube_foo: KubeCluster, renders: dict[str, list[Obj]], tmp_path: Path) -> None:
    """The spec.servers entry the NOTES print, rendered as the DNS operator does and run by the real CoreDNS;
    feddns-forwarder's real CoreDNS behind it (kube-proxy's part, the Service address to its port, played by
    the test); a real feddns serve whose foo cidrs do not match the loopback: by=option, the forwarder's
    tag. The same entry straight to serve (the untagged fallback): no cluster."""
    printed = notes(kube_foo, "openshift", "forwarder.clusterIP=10.0.0.53")
    (patch,) = re.findall(r"oc patch dns.operator.openshift.io/default --type json --patch '(.*)'", printed)
    ((operation,),) = [json.loads(patch)]
    assert (operation["op"], operation["path"]) == ("add", "/spec/servers/-")
    entry = operation["value"]
    assert (entry["zones"], entry["forwardPlugin"]["upstreams"]) == (["federation"], ["10.0.0.53:53"])
    with ServeProcess(records=write_records(stubzone_platforms.records(["10.240.0.0/16"]))) as serve:
        forwarder = run_forwarder(renders["openshift"], "feddns-system", tmp_path, "myfederation", serve.port)
        routes = {"10.0.0.53:53": f"127.0.0.1:{forwarder.port}"}  # the forwarder Service's address, as kube-proxy
        tagged = {**entry, "forwardPlugin": {"upstreams": [routes[u] for u in entry["forwardPlugin"]["upstreams"]]}}
        untagged = {**entry, "name": "untagged", "zones": ["svc.federation"],
                    "forwardPlugin": {"upstreams": [f"127.0.0.1:{serve.port}"]}}
        operator = OperatorOf(kube_foo, [tagged])
        direct = OperatorOf(kube_foo, [untagged])
        try:
            operator.start()
            direct.start()
            said = whoami(operator.port, "myfederation")
            assert (said["cluster"], said["by"]) == ("foo", "option")
            said = whoami(direct.port, "myfederation")
            assert (said["cluster"], said["by"]) == ("", "none")
        finally:
            operator.close()
            direct.close()
            forwarder.child.stop()


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_notes_say_when_a_mode_cannot_tag(kube_foo: KubeCluster, platform: str) -> None:
    untagged = "THIS MODE CANNOT TAG" in notes(kube_foo, platform)
    assert untagged == (platform == "gke")
    if platform == "openshift":
        assert "THIS MODE CANNOT TAG" in notes(kube_foo, platform, "clusterDNS.openshift.forwarder=false")


def test_with_nodelocal_dnscache_the_notes_name_the_way_that_lasts(kube_foo: KubeCluster) -> None:
    """kubeadm: the import script; RKE2, whose chart renders node-local-dns again at each upgrade (the script
    refuses it): the HelmChartConfig's nodelocal values."""
    kubeadm = notes(kube_foo, "kubeadm", "nodeLocalDNS.enabled=true")
    rke2 = notes(kube_foo, "rke2", "nodeLocalDNS.enabled=true")
    assert "node-local-dns-import.sh" in kubeadm and "extraClusterDomains" not in kubeadm
    assert "nodelocal.extraClusterDomains" in rke2 and "node-local-dns-import.sh" not in rke2


OPERATIONS = REPO / "docs" / "operations.md"
TABLE_HEAD = ("| platform | what is written where | tagged or by `cidrs` | what its upgrade does "
              "| how the path check sees it |")


def platform_table() -> list[list[str]]:
    """The rows of docs/operations.md's platform table ("Join a cluster"), each as its five cells."""
    lines = OPERATIONS.read_text().splitlines()
    start = lines.index(TABLE_HEAD) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        assert len(cells) == 5, line
        rows.append(cells)
    return rows


def _named(cell: str, what: str) -> list[str]:
    """The backticked names that follow ``what`` in ``cell`` (``ConfigMap `ns/name```: ``ns/name``)."""
    return re.findall(rf"{what} `([^`]+)`", cell)


@pytest.mark.parametrize("row", platform_table(), ids=lambda row: row[0].replace("`", ""))
def test_the_platform_table_names_what_the_chart_renders(row: list[str]) -> None:
    """What docs/operations.md's table says of each platform (and value) is what the chart renders: the
    backend, the ConfigMap written (the chart's, or the platform's that it must not render), the forwarder's
    Service, tagged or not, and where the path check asks."""
    platform, *values = re.findall(r"`([^`]+)`", row[0])
    objects = template(platform, *values)
    args = stubzone_args(objects)
    written, tagged, probe = row[1], row[2], row[4]
    (backend,) = re.findall(r"^`--backend ([a-z-]+)`", written)
    assert flag(args, "backend") == [backend]
    chart_owned = {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objects if o["kind"] == "ConfigMap"}
    configmaps = [c for c in _named(written, "ConfigMap") if "node-local-dns" not in c]
    assert flag(args, "configmap") == configmaps[:1], written  # the one it writes; none for openshift's object
    for configmap in configmaps:
        assert (configmap in chart_owned) == ("(the chart's)" in written or "feddns-forwarder" in configmap), configmap
    services = {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objects if o["kind"] == "Service"}
    assert set(_named(written, "Service")) <= services
    assert ("feddns-forwarder" in " ".join(services)) == bool(_named(written, "Service"))
    assert tagged == ("tagged" if BACKENDS[backend].tags else "by `cidrs`")
    (where,) = re.findall(r"^`--(probe-server|probe-service) ([^`]+)`", probe)
    assert flag(args, where[0]) == [where[1]]


SECTIONS = {"kubeadm": "#### kubeadm", "eks": "#### EKS", "aks": "#### AKS", "k3s": "#### AKS", "rke2": "#### RKE2",
            "gke": "#### GKE", "openshift": "#### OpenShift", "forwarder": "#### EKS"}
"""Each platform's section of docs/operations.md ("Join a cluster"); k3s's says "As AKS", forwarder's "as EKS"."""


def section(heading: str) -> str:
    """The text of docs/operations.md from the line that starts with ``heading`` to the next heading."""
    text = OPERATIONS.read_text()
    start = text.index("\n" + heading) + 1
    return text[start:text.index("\n#", start + 1)]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_each_platforms_section_names_the_backend_and_the_configmap_rendered(
        renders: dict[str, list[Obj]], platform: str) -> None:
    text = section(SECTIONS[platform])
    args = stubzone_args(renders[platform])
    (backend,) = flag(args, "backend")
    assert f"--backend {backend}" in text
    for configmap in flag(args, "configmap"):
        assert f"`{configmap.split('/')[1]}`" in text or f"`{configmap}`" in text, configmap


def test_the_platform_table_has_a_row_for_every_platform() -> None:
    assert {re.findall(r"`([^`]+)`", row[0])[0] for row in platform_table()} == set(PLATFORMS)


def test_the_forwarders_image_and_address_are_values(renders: dict[str, list[Obj]]) -> None:
    def forwarder(objects: list[Obj]) -> tuple[str, Any, int]:
        container = pod_containers(objects, CHART_NAMESPACE)["coredns"]
        replicas = find(objects, "Deployment", CHART_NAMESPACE, "feddns-stubzone")["spec"]["replicas"]
        return container["image"], find(objects, "Service", CHART_NAMESPACE, "feddns-forwarder")["spec"].get(
            "clusterIP"), replicas

    assert forwarder(renders["eks"]) == ("registry.k8s.io/coredns/coredns:v1.12.1", None, 2)
    assert forwarder(renders["forwarder"]) == ("registry.example.net/coredns/coredns:v1.12.1", "10.0.0.53", 3)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_uninstall_hook_runs_the_endpoints_arguments_with_remove_all(
        renders: dict[str, list[Obj]], platform: str) -> None:
    objects = renders[platform]
    job = find(objects, "Job", "feddns-system" if platform == "openshift" else CHART_NAMESPACE,
               "feddns-stubzone-remove-all")
    assert job["metadata"]["annotations"] == {"helm.sh/hook": "pre-delete",
                                              "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}
    assert stubzone_args(objects, "Job") == [*stubzone_args(objects), "--remove-all"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "feddns-stubzone"]
    pod, hook = deployment["spec"]["template"]["spec"], job["spec"]["template"]["spec"]
    assert hook["serviceAccountName"] == pod["serviceAccountName"]
    assert hook["securityContext"] == pod["securityContext"]
    assert hook["containers"][0]["image"] == pod["containers"][0]["image"]
    assert hook["containers"][0]["securityContext"] == pod["containers"][0]["securityContext"]


PROBE_SERVICES = {
    "kubeadm": "kube-system/k8s-app=kube-dns", "aks": "kube-system/k8s-app=kube-dns",
    "k3s": "kube-system/k8s-app=kube-dns", "gke": "kube-system/k8s-app=kube-dns",
    "eks": "kube-system/k8s-app=kube-dns", "forwarder": "kube-system/k8s-app=kube-dns",
    "rke2": "kube-system/app.kubernetes.io/instance=rke2-coredns",
    "openshift": "openshift-dns/dns.operator.openshift.io/owning-dns=default",
}
"""``--probe-service`` of each platform: the labels its cluster DNS Service ships with (docs/stubzone.md)."""
assert set(PROBE_SERVICES) == set(PLATFORMS)


def probe_role(objects: list[Obj]) -> tuple[Obj, Obj] | None:
    """The Role and RoleBinding feddns-stubzone-probe-<release namespace> (``None`` when not rendered)."""
    found = [o for o in objects if o["metadata"]["name"].startswith("feddns-stubzone-probe-")]
    if not found:
        return None
    (role,) = [o for o in found if o["kind"] == "Role"]
    (binding,) = [o for o in found if o["kind"] == "RoleBinding"]
    assert len(found) == 2, found  # the Role and its binding, nothing else
    return role, binding


@pytest.mark.parametrize("platform", PLATFORMS)
def test_helm_template_renders_the_path_check_finding_the_platforms_dns_service(
        renders: dict[str, list[Obj]], platform: str) -> None:
    """No API server at render time, still a probe: ``--probe-service`` with the platform's labels, and a Role
    that lets the endpoint list Services in that namespace, nothing else."""
    args = stubzone_args(renders[platform])
    assert flag(args, "probe-service") == [PROBE_SERVICES[platform]]
    assert flag(args, "probe-server") == []
    assert flag(args, "probe-interval") == ["60" if platform == "gke" else "30"]
    found = probe_role(renders[platform])
    assert found is not None
    role, binding = found
    namespace = PROBE_SERVICES[platform].partition("/")[0]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    assert role["rules"] == [{"apiGroups": [""], "resources": ["services"], "verbs": ["list"]}]
    release_namespace = "feddns-system" if platform == "openshift" else CHART_NAMESPACE
    assert role["metadata"]["name"] == f"feddns-stubzone-probe-{release_namespace}"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": f"feddns-stubzone-probe-{release_namespace}"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "feddns-stubzone",
                                    "namespace": release_namespace}]


PROBE_SERVERS = {
    "NodeLocal DNSCache's default address": (("nodeLocalDNS.enabled=true",), "169.254.20.10:53"),
    "NodeLocal DNSCache's address set": (("nodeLocalDNS.enabled=true", "nodeLocalDNS.address=169.254.0.10"),
                                         "169.254.0.10:53"),
    "NodeLocal DNSCache on IPv6": (("nodeLocalDNS.enabled=true", "nodeLocalDNS.address=fd00::10"), "[fd00::10]:53"),
    "a fixed address over NodeLocal DNSCache": (("nodeLocalDNS.enabled=true", "clusterDNS.probeServer=10.96.0.10:53"),
                                                "10.96.0.10:53"),
}


@pytest.mark.parametrize("case", list(PROBE_SERVERS))
def test_with_nodelocal_dnscache_the_path_check_asks_the_cache(case: str) -> None:
    """Pods ask the cache (IPVS mode: only its link-local address); so does the probe, and needs no Role."""
    values, server = PROBE_SERVERS[case]
    objects = template("kubeadm", *values)
    args = stubzone_args(objects)
    assert (flag(args, "probe-server"), flag(args, "probe-service")) == ([server], [])
    assert probe_role(objects) is None


def test_helm_install_renders_the_same_probe_as_helm_template(kube_foo: KubeCluster,
                                                              renders: dict[str, list[Obj]]) -> None:
    """Against the real API server (``--dry-run=server``, as install reads it), with the platform's DNS
    Service present, the probe's flags are those of ``helm template``: nothing depends on a lookup."""
    kube_foo.ensure_namespace("openshift-dns")
    kube_foo.apply({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "dns-default", "namespace": "openshift-dns",
                                 "labels": {"dns.operator.openshift.io/owning-dns": "default"}},
                    "spec": {"selector": {"dns.operator.openshift.io/daemonset-dns": "default"},
                             "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}})
    try:
        done = subprocess.run([peers.binary("helm"), "template", "feddns-member", str(MEMBER), "--namespace",
                               "feddns-system", "--dry-run=server", "--values", str(MEMBER / "samples/openshift.yaml")],
                              capture_output=True, text=True, timeout=120, check=False, env=script_env(kube_foo))
        assert done.returncode == 0, done.stderr
        installed = [o for o in yaml.safe_load_all(done.stdout) if o]
        assert stubzone_args(installed) == stubzone_args(renders["openshift"])
    finally:
        kube_foo.delete("Service", "openshift-dns", "dns-default")


# -- uninstall, against the real API server -------------------------------------------------------

@pytest.fixture
def installed(kube_foo: KubeCluster, tmp_path: Path) -> Iterator[tuple[KubeCluster, str]]:
    """The member chart installed for real (platform kubeadm) by helm, its endpoint in a namespace of
    its own: (cluster, namespace). Uninstalled with --no-hooks: the hook Job needs a pod, which a bare
    API server never runs, so the tests run its arguments themselves."""
    ns = f"feddns-uninstall-{uuid.uuid4().hex[:8]}"
    env = script_env(kube_foo)
    values = {"cluster": "foo", "clusterDNS": {"platform": "kubeadm"}, "stubzone": {"namespace": ns},
              "controllerAccess": {"enabled": False}}

    def helm_against(*args: str) -> None:
        done = subprocess.run([peers.binary("helm"), *args, "--namespace", ns], capture_output=True, text=True,
                              input=yaml.safe_dump(values), timeout=120, check=False, env=env)
        assert done.returncode == 0, done.stdout + done.stderr

    helm_against("install", "feddns-member", str(MEMBER), "--create-namespace", "--values", "-")
    try:
        yield kube_foo, ns
    finally:
        helm_against("uninstall", "feddns-member", "--no-hooks")
        kube_foo.request("DELETE", f"/api/v1/namespaces/{ns}")


def hook_args(cluster: KubeCluster, namespace: str) -> list[str]:
    """The arguments of the pre-delete hook Job helm stored with the release (``helm get hooks``)."""
    done = subprocess.run([peers.binary("helm"), "get", "hooks", "feddns-member", "--namespace", namespace],
                          capture_output=True, text=True, timeout=60, check=False, env=script_env(cluster))
    assert done.returncode == 0, done.stderr
    (job,) = [o for o in yaml.safe_load_all(done.stdout) if o and o["kind"] == "Job"]
    return list(job["spec"]["template"]["spec"]["containers"][0]["args"])


def test_remove_all_takes_out_the_federations_and_keeps_every_other_key(
        installed: tuple[KubeCluster, str], tmp_path: Path) -> None:
    """The hook's own command, as the chart's ServiceAccount (its Role: get and update of one ConfigMap),
    on the ConfigMap the chart made: the endpoint's blocks go, a key someone else wrote stays as it was."""
    cluster, ns = installed
    path = f"/api/v1/namespaces/{ns}/configmaps/coredns-feddns"
    block = render("myfederation", "myfederation.svc.federation.", "foo", (Nameserver.parse("203.0.113.53"),))
    other = "# a key the endpoint did not write\n"
    cluster.request("PATCH", path, {"data": {"myfederation.server": block, "notes.override": other}},
                    "application/merge-patch+json")
    kubeconfig = cluster.write_kubeconfig(tmp_path / "stubzone.kubeconfig",
                                          token=cluster.service_account_token(ns, "feddns-stubzone"))
    args = hook_args(cluster, ns)
    assert args[-1] == "--remove-all" and f"--configmap={ns}/coredns-feddns" in args

    def remove_all() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "feddns", *args, "--kubeconfig", kubeconfig],
                              capture_output=True, text=True, timeout=120, check=False, cwd=REPO)

    done = remove_all()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ("removed myfederation: stub domain myfederation.svc.federation., "
                           "nameservers 203.0.113.53\n")
    assert cluster.request("GET", path)["data"] == {"notes.override": other}
    again = remove_all()
    assert (again.returncode, again.stdout) == (0, ""), again.stderr


def test_the_hook_runs_where_the_endpoint_and_its_forwarder_run_and_one_replica_blocks_no_drain() -> None:
    """stubzone.nodeSelector, tolerations and affinity place the uninstall hook's Job too (a Windows node, or a
    tainted pool, would leave the hook unscheduled and the uninstall failing), and the endpoint's pods carry
    feddns-forwarder with them; one replica has no PodDisruptionBudget, which would block every node drain."""
    objects = template("eks", "stubzone.replicas=1", "stubzone.tolerations[0].key=dedicated",
                       "stubzone.tolerations[0].operator=Exists")
    pods = {(o["kind"], o["metadata"]["name"]): o["spec"]["template"]["spec"] for o in objects
            if o["kind"] in ("Deployment", "Job")}
    assert set(pods) == {("Deployment", "feddns-stubzone"), ("Job", "feddns-stubzone-remove-all")}
    endpoint, hook = pods[("Deployment", "feddns-stubzone")], pods[("Job", "feddns-stubzone-remove-all")]
    assert endpoint["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert [c["name"] for c in endpoint["containers"]] == ["stubzone", "coredns"]
    assert (hook.get("nodeSelector"), hook.get("tolerations")) == (endpoint["nodeSelector"], endpoint["tolerations"])
    assert not [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert [o["metadata"]["name"] for o in template("eks") if o["kind"] == "PodDisruptionBudget"] == \
        ["feddns-stubzone"]
