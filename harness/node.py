"""A real single-node Kubernetes cluster for the e2e tier, inside a network namespace of its own.

``Node().start()`` runs, each inside ``NetworkNamespace`` (harness/netns.py) and in this order:

=========================  ==================================================================
part                       how
=========================  ==================================================================
etcd                       Debian's etcd on the namespace's 127.0.0.1:2379
kube-apiserver             the peer build, on the node's address, port 6443; the test reaches it through a
                           loopback port forwarded into the namespace (``url``)
kube-controller-manager    service accounts, the root CA ConfigMaps, Deployments, StatefulSets,
kube-scheduler             PersistentVolume binding, garbage collection, ...
containerd                 Debian's containerd 1.6 with runc, CNI ``bridge`` + ``host-local`` +
                           ``portmap`` (containernetworking-plugins), the images of
                           harness/images.py imported with ``ctr images import``
kubelet                    cgroupfs driver on this cgroup v1 host (``failCgroupV1: false``), its
                           pods under the cgroup ``/<name>`` of every hierarchy
kube-proxy                 iptables mode, inside the namespace
cluster DNS                kubeadm's own CoreDNS Deployment, Service and Corefile (the release's
                           ``manifests.go``), at ``dns_ip``
=========================  ==================================================================

Addresses come from the benchmarking range 198.18.0.0/15 (RFC 2544), per cluster
(:class:`ClusterRanges`, :func:`cluster_ranges`: none of two clusters' ranges overlap): pods in
``pod_subnet``, Services in ``service_cidr``, load-balancer addresses from
``load_balancer_range``, the node at ``node_ip``. Alone, the node has its address on the
namespace's ``lo`` and no route out, so no packet leaves it. On a :class:`Link` (the network
between two clouds' regions: a namespace of its own with a bridge), the node's address is on its
veth there, the other clusters' load-balancer ranges are routed through their nodes, and what a
pod sends out is masqueraded to the node's address (as a cloud's NAT does); pod and Service ranges
stay private to their cluster. The node plays the cloud's load-balancer controller: every Service
of type LoadBalancer gets an address of its range in ``status.loadBalancer`` (a reserved one,
``spec.loadBalancerIP``, or the next free one), which kube-proxy (iptables mode) serves where it
arrives at the node.

A part that fails to start raises :class:`NodeError` naming it, with the tail of its log.
``stop()`` tears everything down: the pods' processes (killed through their cgroups), every
process it started (by PID), containerd's shims, every mount under its directory, the cgroups,
the network namespace, and the directory.

What this root lacks decides three settings (docs/development.md, "The node"): containerd's
``restrict_oom_score_adj`` (no CAP_SYS_RESOURCE), runc rather than crun (the hybrid cgroup
layout), and ``nsenter --net`` rather than ``ip netns exec``.
"""

import contextlib
import ipaddress
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness import images, peers
from harness.kubecluster import KubeCluster
from harness.netns import Forwarder, NetworkNamespace
from harness.process import LOG_TAIL, ChildProcess, child_env, descendants

LINK_SUBNET = "198.19.255.0/24"
"""The link between clusters (:class:`Link`): each node's address, and the external client's."""
EXTERNAL_CLIENT_IP = "198.19.255.100"


@dataclass(frozen=True)
class ClusterRanges:
    """One cluster's addresses, all dotted-quad IPv4 strings or CIDRs inside 198.18.0.0/15.

    ``cluster_cidr`` holds the pods (kube-controller-manager's and kube-proxy's clusterCIDR);
    ``pod_subnet`` the node's share of it, ``pod_gateway`` the bridge's address there;
    ``service_cidr`` the Services (``api_service_ip`` the ``kubernetes`` Service, ``dns_ip`` the
    cluster DNS); ``load_balancer_range`` what the cloud gives Services of type LoadBalancer;
    ``node_ip`` the node's address (on the link, when there is one)."""

    cluster_cidr: str
    pod_subnet: str
    pod_gateway: str
    service_cidr: str
    api_service_ip: str
    dns_ip: str
    load_balancer_range: str
    node_ip: str


def cluster_ranges(index: int) -> ClusterRanges:
    """The ranges of cluster number ``index`` (0..3): pods 198.18.<64 i>.0/18, Services
    198.18.<128 + 16 i>.0/20, load balancers 198.19.<i>.0/24, the node 198.19.255.<2 + i>.
    ValueError for another index."""
    if not 0 <= index < 4:
        raise ValueError(f"cluster index {index}: only 0 to 3 have ranges")
    services = 128 + 16 * index
    return ClusterRanges(cluster_cidr=f"198.18.{64 * index}.0/18", pod_subnet=f"198.18.{64 * index}.0/24",
                         pod_gateway=f"198.18.{64 * index}.1", service_cidr=f"198.18.{services}.0/20",
                         api_service_ip=f"198.18.{services}.1", dns_ip=f"198.18.{services}.10",
                         load_balancer_range=f"198.19.{index}.0/24", node_ip=f"198.19.255.{2 + index}")


CLUSTER_DOMAIN = "cluster.local"
API_PORT = 6443
CGROUP_ROOT = Path("/sys/fs/cgroup")
TMPFS_SIZE = "6g"
"""The node's directory is a tmpfs this large (it holds about 2.5 GB: images, pods, etcd)."""
SESSION = " (session)"
"""In the name of every reader thread: the node outlives the test that started it."""


class NodeError(RuntimeError):
    """A part of the node did not start: ``part`` names it; the message quotes its log's tail."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(f"node: {part}: {message}")
        self.part = part


class NodeApiServer(KubeCluster):
    """The node's kube-apiserver: KubeCluster's API client and credentials, run inside the
    namespace on the node's address with the node's Service range, reached through ``forwarder``.
    Its kubeconfig's context is the cluster's name."""

    def __init__(self, node: "Node") -> None:
        self.node = node
        self.SERVING_IPS = ("127.0.0.1", node.ranges.node_ip, node.ranges.api_service_ip)
        super().__init__(node.cluster, "http://127.0.0.1:2379", node.directory / "apiserver")
        self.child = ChildProcess(node.netns.command(self._args()), name=f"kube-apiserver{SESSION}",
                                  log_path=self.directory / "kube-apiserver.log")
        self.port = node.forwarder.add(node.ranges.node_ip, API_PORT)
        self.kubeconfig = self.write_kubeconfig(self.directory / "admin.kubeconfig", token=self.admin_token)

    def _args(self) -> list[str]:
        args = [a for a in super()._args() if not a.startswith((
            "--bind-address", "--advertise-address", "--secure-port", "--service-cluster-ip-range",
            "--endpoint-reconciler-type", "--etcd-prefix"))]
        ranges = self.node.ranges
        return [*args, "--bind-address=0.0.0.0", f"--advertise-address={ranges.node_ip}", f"--secure-port={API_PORT}",
                f"--service-cluster-ip-range={ranges.service_cidr}", "--etcd-prefix=/registry",
                "--kubelet-preferred-address-types=InternalIP", "--allow-privileged=true"]

    def in_cluster_kubeconfig(self, path: Path) -> str:
        """A kubeconfig for the node's own programs: the admin at ``https://<node_ip>:6443``."""
        self.write_kubeconfig(path)
        config = yaml.safe_load(path.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://{self.node.ranges.node_ip}:{API_PORT}"
        path.write_text(yaml.safe_dump(config))
        return str(path)


class Node:
    """One node (see the module doc). ``api`` is its API server's client (a :class:`KubeCluster`);
    ``timings`` the seconds each part took to start; ``kubeconfig`` the admin's, for kubectl
    and helm on this machine."""

    def __init__(self, name: str | None = None, directory: Path | None = None, *, cluster: str = "foo",
                 ranges: ClusterRanges | None = None, link: "Link | None" = None) -> None:
        self.name = name or f"feddns-node-{uuid.uuid4().hex[:8]}"
        self.cluster = cluster
        """The cluster's name: its kubeconfig's context, and what the tests call it."""
        self.ranges = ranges or cluster_ranges(0)
        self.link = link
        self._reserved: dict[tuple[str, str], str] = {}
        self._stopping = threading.Event()
        self._balancer: threading.Thread | None = None
        self.balancer_error = ""
        """The last error of the load-balancer controller's loop (it keeps going), for a test's message."""
        self.directory = directory or Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        # Everything of the node (containerd's unpacked images among it) on a tmpfs of its own: the
        # teardown is an unmount, where removing a gigabyte of small files took over a minute.
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755", "tmpfs", str(self.directory)],
                       check=True, capture_output=True)
        self.netns = NetworkNamespace(self.name)
        self.forwarder = Forwarder(self.netns, f"{self.name} forwarder{SESSION}")
        self.children: dict[str, ChildProcess] = {}
        self.timings: dict[str, float] = {}
        self.api = NodeApiServer(self)
        self.kubeconfig = self.api.kubeconfig
        self.containerd_socket = self.directory / "containerd" / "containerd.sock"
        self.cgroup = f"/{self.name}"

    # -- start ------------------------------------------------------------------------------------

    def start(self, image_list: list[images.Image], timeout: float = 300.0) -> "Node":
        """Start every part (module doc), import ``image_list``, and return once the node is Ready
        and kubeadm's CoreDNS answers. NodeError naming the part that failed, after a full stop()."""
        began = time.monotonic()
        try:
            self._timed("network", self._network)
            self._timed("etcd", self._etcd)
            self._timed("kube-apiserver", lambda: self.api.start(timeout=120))
            self._balancer = threading.Thread(target=self._load_balancers, daemon=True,
                                              name=f"{self.name} load balancers{SESSION}")
            self._balancer.start()
            in_cluster = self.api.in_cluster_kubeconfig(self.directory / "node.kubeconfig")
            self._timed("kube-controller-manager", lambda: self._controller_manager(in_cluster))
            self._timed("kube-scheduler", lambda: self._scheduler(in_cluster))
            self._timed("containerd", lambda: self._containerd(image_list))
            self._timed("kubelet", lambda: self._kubelet(in_cluster))
            self._timed("kube-proxy", lambda: self._kube_proxy(in_cluster))
            self._timed("node Ready", lambda: self._wait_ready(began + timeout))
            self._timed("cluster DNS", lambda: self._cluster_dns(began + timeout))
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - began
        return self

    def _timed(self, part: str, action: Callable[[], object]) -> None:
        began = time.monotonic()
        try:
            action()
        except NodeError:
            raise
        except Exception as exc:
            raise NodeError(part, f"{exc}{self._tail(part)}") from exc
        self.timings[part] = time.monotonic() - began

    def _tail(self, part: str) -> str:
        child = self.children.get(part)
        if child is None:
            return ""
        return f"\nthe last lines of {part}'s log:\n{child.log[-LOG_TAIL:]}"

    def _network(self) -> None:
        run = self.netns.run
        run("ip", "link", "set", "lo", "up")
        ranges = self.ranges
        if self.link is None:
            run("ip", "addr", "add", f"{ranges.node_ip}/32", "dev", "lo")
        else:
            self.link.attach(self.netns, self.cluster, ranges.node_ip)
            # What pods send across the link leaves with the node's address, as a cloud's NAT does:
            # their range stays private to the cluster.
            run("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", ranges.cluster_cidr, "-o", LINK_INTERFACE,
                "-j", "MASQUERADE")
        # Service and load-balancer addresses: only kube-proxy's DNAT gives them meaning; a packet
        # to one it has no rule for goes to lo and ends there.
        run("ip", "route", "add", ranges.service_cidr, "dev", "lo")
        run("ip", "route", "add", ranges.load_balancer_range, "dev", "lo")
        run("sysctl", "-qw", "net.ipv4.ip_forward=1")
        run("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
        (self.directory / "resolv.conf").write_text(f"nameserver {ranges.node_ip}\n")
        for subsystem in self._hierarchies():
            path = CGROUP_ROOT / subsystem / self.cgroup.lstrip("/")
            path.mkdir(exist_ok=True)
            if subsystem == "cpuset":
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (path / name).write_text((CGROUP_ROOT / "cpuset" / name).read_text())

    @staticmethod
    def _hierarchies() -> list[str]:
        return sorted(p.name for p in CGROUP_ROOT.iterdir() if p.is_dir() and p.name != "unified"
                      and (p / "cgroup.procs").exists())

    def _spawn(self, part: str, args: list[str], ready: str | None = None, timeout: float = 60.0,
               env: dict[str, str] | None = None) -> ChildProcess:
        child = ChildProcess(self.netns.command(args), ready=ready, name=f"{part}{SESSION}",
                             log_path=self.directory / "logs" / f"{part}.log", env=env)
        (self.directory / "logs").mkdir(exist_ok=True)
        self.children[part] = child
        child.start(timeout=timeout)
        return child

    def _etcd(self) -> None:
        self._spawn("etcd", ["etcd", "--name", "node", "--data-dir", str(self.directory / "etcd"),
                             "--listen-client-urls", "http://127.0.0.1:2379",
                             "--advertise-client-urls", "http://127.0.0.1:2379",
                             "--listen-peer-urls", "http://127.0.0.1:2380", "--logger", "zap"],
                    ready="serving client traffic")

    def _controller_manager(self, kubeconfig: str) -> None:
        d = self.api.directory
        self._spawn("kube-controller-manager", [
            peers.binary("kube-controller-manager"), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            f"--service-account-private-key-file={d / 'sa.key'}", f"--root-ca-file={d / 'ca.crt'}",
            "--use-service-account-credentials=false", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--cluster-cidr={self.ranges.cluster_cidr}", f"--service-cluster-ip-range={self.ranges.service_cidr}",
            "--controllers=*", "--v=1"])

    def _scheduler(self, kubeconfig: str) -> None:
        self._spawn("kube-scheduler", [
            peers.binary("kube-scheduler"), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", "--v=1"])

    def _containerd(self, image_list: list[images.Image]) -> None:
        root = self.directory / "containerd"
        (self.directory / "cni" / "net.d").mkdir(parents=True)
        root.mkdir(exist_ok=True)
        config = root / "config.toml"
        template = (images.NODEFILES / "containerd.toml").read_text()
        config.write_text(template.format(root=root, sandbox_image=images.PAUSE, cni=self.directory / "cni"))
        (self.directory / "cni" / "net.d" / "10-feddns-node.conflist").write_text(json.dumps(self._cni_config()))
        self._spawn("containerd", ["containerd", "--config", str(config)], ready="containerd successfully booted")
        for image in image_list:
            self.ctr("images", "import", "--no-unpack", str(image.archive))

    def _cni_config(self) -> dict[str, Any]:
        return {"cniVersion": "0.4.0", "name": "feddns-node", "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(self.directory / "cni" / "ipam"),
                      "ranges": [[{"subnet": self.ranges.pod_subnet, "gateway": self.ranges.pod_gateway}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}

    def ctr(self, *args: str) -> str:
        """``ctr -n k8s.io ARGS`` against the node's containerd; its output (RuntimeError if it fails)."""
        done = subprocess.run(["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *args],
                              capture_output=True, text=True, check=False, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def _kubelet(self, kubeconfig: str) -> None:
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": self.cgroup, "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDNS": [self.ranges.dns_ip], "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(self.directory / "resolv.conf"),
            "address": self.ranges.node_ip, "readOnlyPort": 0, "healthzBindAddress": "127.0.0.1",
            "podLogsDir": str(self.directory / "pod-logs"),
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "serializeImagePulls": False, "protectKernelDefaults": False,
        }
        path = self.directory / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn("kubelet", [
            peers.binary("kubelet"), f"--config={path}", f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.directory / 'kubelet'}", f"--cert-dir={self.directory / 'kubelet-pki'}",
            "--hostname-override=feddns-node", f"--node-ip={self.ranges.node_ip}", "--v=1"])

    def _kube_proxy(self, kubeconfig: str) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "iptables", "clusterCIDR": self.ranges.cluster_cidr, "hostnameOverride": "feddns-node",
            "clientConnection": {"kubeconfig": kubeconfig}, "bindAddress": self.ranges.node_ip,
            "metricsBindAddress": "127.0.0.1:10249", "healthzBindAddress": "127.0.0.1:10256",
            # 0: leave the kernel's conntrack table size and timeouts as they are (they are not
            # all this namespace's to set).
            "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }
        path = self.directory / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn("kube-proxy", [peers.binary("kube-proxy"), f"--config={path}", "--v=1"])

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            for part, child in self.children.items():
                if not child.running:
                    raise NodeError(part, f"exited with {child.proc.returncode if child.proc else None}"
                                          f"{self._tail(part)}")
            node = self.api.get("Node", None, "feddns-node") or {}
            conditions = node.get("status", {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return
            time.sleep(0.5)
        raise NodeError("kubelet", f"node feddns-node not Ready{self._tail('kubelet')}")

    def _cluster_dns(self, deadline: float) -> None:
        for obj in kubeadm_coredns_objects(images.coredns_ref(), self.ranges.dns_ip):
            self.api.apply(obj)
        self.wait_rollout("kube-system", "Deployment", "coredns", deadline - time.monotonic())

    # -- use ----------------------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The real kubectl as the admin (KubeCluster.kubectl)."""
        return self.api.kubectl(*args, input=input, check=check, timeout=timeout)

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """The real helm as the admin; with ``check`` a failure raises RuntimeError with its output."""
        env = child_env(KUBECONFIG=self.kubeconfig, HOME=str(self.directory),
                        HELM_CACHE_HOME=str(self.directory / "helm-cache"),
                        HELM_CONFIG_HOME=str(self.directory / "helm-config"),
                        HELM_DATA_HOME=str(self.directory / "helm-data"))
        done = subprocess.run([peers.binary("helm"), *args], capture_output=True, text=True, env=env,
                              timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    def wait_rollout(self, namespace: str, kind: str, name: str, timeout: float = 180.0) -> None:
        """``kubectl rollout status`` of a Deployment or StatefulSet; RuntimeError with the pods'
        state and events if it is not complete within ``timeout`` seconds."""
        done = self.kubectl("-n", namespace, "rollout", "status", f"{kind.lower()}/{name}",
                            f"--timeout={max(1, int(timeout))}s", check=False, timeout=timeout + 30)
        if done.returncode != 0:
            raise RuntimeError(f"{kind} {namespace}/{name} did not roll out: {done.stderr.strip()}\n"
                               f"{self.describe(namespace)}")

    def describe(self, namespace: str) -> str:
        """The pods of ``namespace`` and its recent events, for an error message."""
        pods = self.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False).stdout
        events = self.kubectl("-n", namespace, "get", "events", "--sort-by=.lastTimestamp", check=False).stdout
        return f"{pods}\n{events[-3000:]}"

    def reserve_load_balancer(self, namespace: str, name: str, ip: str) -> None:
        """The address Service ``namespace/name`` gets when it is of type LoadBalancer (as a
        cloud's static IP would be), so that a certificate can name it before the Service exists.
        ValueError if ``ip`` is outside the cluster's ``load_balancer_range``."""
        if ipaddress.ip_address(ip) not in ipaddress.ip_network(self.ranges.load_balancer_range):
            raise ValueError(f"{ip} is not in {self.cluster}'s load-balancer range {self.ranges.load_balancer_range}")
        self._reserved[(namespace, name)] = ip

    def _load_balancers(self) -> None:
        while not self._stopping.wait(0.5):
            try:
                self.assign_load_balancers()
            except (OSError, RuntimeError, KeyError, StopIteration) as exc:  # a restart, a full range: next round
                self.balancer_error = f"{type(exc).__name__}: {exc}"

    def assign_load_balancers(self) -> None:
        """One round of the cloud's load-balancer controller: every Service of type LoadBalancer
        without ``status.loadBalancer.ingress`` gets its reserved address, its
        ``spec.loadBalancerIP``, or the lowest free one of the range from .10 up."""
        services = self.api.request("GET", "/api/v1/services")["items"]
        taken = {ingress.get("ip") for svc in services
                 for ingress in svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []}
        taken |= set(self._reserved.values())
        free = (str(ip) for ip in ipaddress.ip_network(self.ranges.load_balancer_range).hosts()
                if int(str(ip).rsplit(".", 1)[1]) >= 10 and str(ip) not in taken)
        for svc in services:
            meta, spec = svc["metadata"], svc["spec"]
            if spec.get("type") != "LoadBalancer" or svc.get("status", {}).get("loadBalancer", {}).get("ingress"):
                continue
            key = (meta["namespace"], meta["name"])
            ip = self._reserved.get(key) or spec.get("loadBalancerIP") or next(free)
            self.assign_load_balancer(meta["namespace"], meta["name"], ip)

    def load_balancer_ip(self, namespace: str, name: str, timeout: float = 30.0) -> str:
        """Service ``namespace/name``'s load-balancer address once it has one; TimeoutError naming
        the Service and the controller's last error after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            svc = self.api.get("Service", namespace, name) or {}
            ingress = svc.get("status", {}).get("loadBalancer", {}).get("ingress") or []
            if ingress:
                return str(ingress[0]["ip"])
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.cluster}: Service {namespace}/{name} has no load-balancer address "
                                   f"after {timeout:.0f} s ({self.balancer_error or 'no error'})")
            time.sleep(0.2)

    def assign_load_balancer(self, namespace: str, name: str, ip: str) -> None:
        """Give Service ``namespace/name`` the load-balancer address ``ip`` (from
        ``load_balancer_range``), as a cloud's controller or MetalLB would: its status, under a field
        manager of its own (the tests' own manager would drop the fields of the Service they applied)."""
        body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
                "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}}
        self.api.request("PATCH", f"/api/v1/namespaces/{namespace}/services/{name}/status"
                                  "?fieldManager=feddns-cloud&force=true", body, "application/apply-patch+yaml")

    def pod_logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        args = ["-n", namespace, "logs", pod, *(["-c", container] if container else [])]
        return self.kubectl(*args, check=False).stdout

    # -- stop ---------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Tear the node down completely (module doc). Safe to call twice."""
        self._stopping.set()
        if self._balancer is not None:
            self._balancer.join(timeout=30)
        for part in ("kube-proxy", "kubelet"):
            if part in self.children:
                self.children[part].stop()
        self._kill_cgroup_tree()
        if "containerd" in self.children:
            self.children["containerd"].stop()
        self._kill_shims()
        for part in reversed(list(self.children)):
            self.children[part].stop()
        self.api.stop()
        self.forwarder.close()
        self._unmount()
        self._remove_cgroups()
        self.netns.delete()
        subprocess.run(["rm", "-rf", str(self.directory)], check=False)

    def _cgroup_dirs(self) -> list[Path]:
        """Every cgroup directory of the node, deepest first."""
        found = []
        for subsystem in self._hierarchies():
            top = CGROUP_ROOT / subsystem / self.cgroup.lstrip("/")
            if top.exists():
                found += [Path(d) for d, _, _ in os.walk(top)]
        return sorted(found, key=lambda p: len(p.parts), reverse=True)

    def _cgroup_pids(self) -> set[int]:
        """The processes in the node's cgroups (a cgroup kubelet or runc removes meanwhile is skipped)."""
        pids: set[int] = set()
        for d in self._cgroup_dirs():
            with contextlib.suppress(OSError):
                pids.update(int(pid) for pid in (d / "cgroup.procs").read_text().split())
        return pids

    def _kill_cgroup_tree(self) -> None:
        for _ in range(50):
            pids = self._cgroup_pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def _kill_shims(self) -> None:
        marker = str(self.containerd_socket).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if marker in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)

    def _unmount(self) -> None:
        prefix = str(self.directory)
        for _ in range(3):
            mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
            mine = sorted({m for m in mounts if m == prefix or m.startswith(prefix + "/")},
                          key=lambda m: m.count("/"), reverse=True)
            if not mine:
                return
            for mount in mine:
                subprocess.run(["umount", "-l", mount], capture_output=True, check=False)

    def _remove_cgroups(self) -> None:
        for d in self._cgroup_dirs():
            with contextlib.suppress(OSError):
                d.rmdir()

    def leftovers(self) -> list[str]:
        """What of the node is still on the machine after stop(): a test asserts it is nothing."""
        left = []
        if Path(self.netns.path).exists():
            left.append(f"network namespace {self.netns.path}")
        if self.directory.exists():
            left.append(f"directory {self.directory}")
        left += [f"cgroup {d}" for d in self._cgroup_dirs()]
        prefix = str(self.directory)
        left += [f"mount {line.split()[4]}" for line in Path("/proc/self/mountinfo").read_text().splitlines()
                 if line.split()[4].startswith(prefix)]
        left += [f"process {child.pid} ({part})" for part, child in self.children.items() if child.running]
        marker = str(self.containerd_socket).encode()
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes():
                    left.append(f"process {entry.name} (containerd shim)")
        return left

    def rss(self) -> dict[str, int]:
        """Resident bytes of each part's process, and of the pods (their cgroup's memory.usage)."""
        sizes = {part: _tree_rss(child.pid) for part, child in self.children.items() if child.running}
        sizes["kube-apiserver"] = _tree_rss(self.api.child.pid)
        usage = CGROUP_ROOT / "memory" / self.cgroup.lstrip("/") / "memory.usage_in_bytes"
        if usage.exists():
            sizes["pods (cgroup memory usage)"] = int(usage.read_text())
        return sizes


def _tree_rss(pid: int) -> int:
    """VmRSS of ``pid`` and its descendants (nsenter execs the program: usually one process)."""
    total = 0
    for current in (pid, *descendants(pid)):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


_GO_RAW_STRING = re.compile(r"^\t(\w+) = `\n(.*?)`", re.MULTILINE | re.DOTALL)


def kubeadm_coredns_objects(image: str, dns_ip: str) -> list[dict[str, Any]]:
    """kubeadm's CoreDNS objects (ServiceAccount, ClusterRole and its binding, ConfigMap with the
    Corefile, Deployment, Service) from that release's ``manifests.go`` (harness/peers.py), with its
    template fields filled as ``kubeadm init`` fills them for a node whose cluster DNS is ``dns_ip``."""
    source = peers.kubeadm_dns_manifests().read_text()
    manifests = dict(_GO_RAW_STRING.findall(source))
    fields = {"DNSIP": dns_ip, "DNSDomain": CLUSTER_DOMAIN, "DeploymentName": "coredns", "Image": image,
              "Replicas": "2", "ControlPlaneTaintKey": "node-role.kubernetes.io/control-plane"}
    objects = []
    for name in ("CoreDNSServiceAccount", "CoreDNSClusterRole", "CoreDNSClusterRoleBinding", "CoreDNSConfigMap",
                 "CoreDNSDeployment", "CoreDNSService"):
        text = manifests[name]
        # The Corefile's one conditional: ``{{- if .DNSDomain }} ... {{- end }}`` (a domain is set).
        # ``{{-`` trims the white space before it, as Go's text/template does.
        text = re.sub(r"\s*\{\{- if \.DNSDomain \}\}(.*?)\s*\{\{- end \}\}", r"\1", text, flags=re.DOTALL)
        text = re.sub(r"\{\{ \.(\w+) \}\}", lambda m: fields[m.group(1)], text)
        obj = yaml.safe_load(text)
        obj["metadata"].pop("resourceVersion", None)
        objects.append(obj)
    return objects



LINK_INTERFACE = "link0"
"""The name of a node's (or the external client's) interface on the link."""


class Link:
    """The network between the clusters (module doc): network namespace ``name`` with a bridge,
    to which :meth:`attach` plugs a veth from a node's namespace (or :meth:`client`'s), all
    addresses in ``LINK_SUBNET``. :meth:`route` sends a cluster's load-balancer range through
    its node from every other namespace on the link, as a cloud's network does. Nothing on it
    has a route anywhere else, so no packet leaves these namespaces. ``delete()`` removes it and,
    with it, every veth of the link (a veth pair goes with either end)."""

    def __init__(self, name: str) -> None:
        self.netns = NetworkNamespace(name)
        self.members: dict[str, tuple[NetworkNamespace, str]] = {}
        """What is on the link: its name, its namespace and its address there."""
        self._lock = threading.Lock()
        self._clients: list[NetworkNamespace] = []
        self.netns.run("ip", "link", "set", "lo", "up")
        self.netns.run("ip", "link", "add", "br0", "type", "bridge")
        self.netns.run("ip", "link", "set", "br0", "up")

    def attach(self, netns: NetworkNamespace, name: str, address: str) -> None:
        """Plug ``netns`` into the link as ``name`` with ``address`` (in LINK_SUBNET) on its
        interface LINK_INTERFACE. RuntimeError naming the command that failed."""
        with self._lock:
            port = f"port{len(self.members)}"
            self.members[name] = (netns, address)
        self.netns.run("ip", "link", "add", port, "type", "veth", "peer", "name", LINK_INTERFACE,
                       "netns", netns.name)
        self.netns.run("ip", "link", "set", port, "master", "br0", "up")
        netns.run("ip", "link", "set", "lo", "up")
        netns.run("ip", "addr", "add", f"{address}/{LINK_SUBNET.split('/')[1]}", "dev", LINK_INTERFACE)
        netns.run("ip", "link", "set", LINK_INTERFACE, "up")

    def client(self, name: str, address: str = EXTERNAL_CLIENT_IP) -> NetworkNamespace:
        """A namespace of its own on the link (outside every cluster): the external client."""
        netns = NetworkNamespace(f"{self.netns.name}-{name}")
        self._clients.append(netns)
        self.attach(netns, name, address)
        return netns

    def route(self, destination: str, via: str) -> None:
        """Route ``destination`` (a CIDR) through the member whose address is ``via``, in every
        other namespace on the link."""
        for netns, address in list(self.members.values()):
            if address != via:
                netns.run("ip", "route", "replace", destination, "via", via, "dev", LINK_INTERFACE)

    def delete(self) -> None:
        for netns in self._clients:
            netns.delete()
        self.netns.delete()

    def leftovers(self) -> list[str]:
        """The link's namespaces still on the machine after delete(): a test asserts none."""
        return [f"network namespace {n.path}" for n in (self.netns, *self._clients) if Path(n.path).exists()]
