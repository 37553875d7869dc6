"""A real single-node Kubernetes cluster for the e2e tier, inside a network namespace of its own.

``Node().start()`` runs, each inside ``NetworkNamespace`` (harness/netns.py) and in this order:

=========================  ==================================================================
part                       how
=========================  ==================================================================
etcd                       Debian's etcd on the namespace's 127.0.0.1:2379
kube-apiserver             the peer build, on ``NODE_IP``:6443; the test reaches it through a
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
                           ``manifests.go``), at ``DNS_IP``
=========================  ==================================================================

Addresses come from the benchmarking range 198.18.0.0/15 (RFC 2544) and exist only inside the
namespace: pods in ``POD_SUBNET``, Services in ``SERVICE_CIDR``, the node at ``NODE_IP`` (on
the namespace's ``lo``), load-balancer addresses from ``LOAD_BALANCER_RANGE`` (the test plays a
cloud's load-balancer controller: :meth:`Node.assign_load_balancer`). The namespace has no
route out, so no packet leaves it.

A part that fails to start raises :class:`NodeError` naming it, with the tail of its log.
``stop()`` tears everything down: the pods' processes (killed through their cgroups), every
process it started (by PID), containerd's shims, every mount under its directory, the cgroups,
the network namespace, and the directory.

What this root lacks decides three settings (docs/development.md, "The node"): containerd's
``restrict_oom_score_adj`` (no CAP_SYS_RESOURCE), runc rather than crun (the hybrid cgroup
layout), and ``nsenter --net`` rather than ``ip netns exec``.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from harness import images, peers
from harness.kubecluster import KubeCluster
from harness.netns import Forwarder, NetworkNamespace
from harness.process import LOG_TAIL, ChildProcess, child_env, descendants

POD_SUBNET = "198.18.0.0/24"
POD_GATEWAY = "198.18.0.1"
CLUSTER_CIDR = "198.18.0.0/16"
SERVICE_CIDR = "198.19.0.0/17"
API_SERVICE_IP = "198.19.0.1"
DNS_IP = "198.19.0.10"
LOAD_BALANCER_RANGE = "198.19.128.0/24"
NODE_IP = "198.19.255.2"
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
    namespace on ``NODE_IP`` with the node's Service range, reached through ``forwarder``."""

    SERVING_IPS = ("127.0.0.1", NODE_IP, API_SERVICE_IP)

    def __init__(self, node: "Node") -> None:
        self.node = node
        super().__init__("node", "http://127.0.0.1:2379", node.directory / "apiserver")
        self.child = ChildProcess(node.netns.command(self._args()), name=f"kube-apiserver{SESSION}",
                                  log_path=self.directory / "kube-apiserver.log")
        self.port = node.forwarder.add(NODE_IP, API_PORT)
        self.kubeconfig = self.write_kubeconfig(self.directory / "admin.kubeconfig", token=self.admin_token)

    def _args(self) -> list[str]:
        args = [a for a in super()._args() if not a.startswith((
            "--bind-address", "--advertise-address", "--secure-port", "--service-cluster-ip-range",
            "--endpoint-reconciler-type", "--etcd-prefix"))]
        return [*args, "--bind-address=0.0.0.0", f"--advertise-address={NODE_IP}", f"--secure-port={API_PORT}",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--etcd-prefix=/registry",
                "--kubelet-preferred-address-types=InternalIP", "--allow-privileged=true"]

    def in_cluster_kubeconfig(self, path: Path) -> str:
        """A kubeconfig for the node's own programs: the admin at ``https://NODE_IP:6443``."""
        self.write_kubeconfig(path)
        config = yaml.safe_load(path.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://{NODE_IP}:{API_PORT}"
        path.write_text(yaml.safe_dump(config))
        return str(path)


class Node:
    """One node (see the module doc). ``api`` is its API server's client (a :class:`KubeCluster`);
    ``timings`` the seconds each part took to start; ``kubeconfig`` the admin's, for kubectl
    and helm on this machine."""

    def __init__(self, name: str | None = None, directory: Path | None = None) -> None:
        self.name = name or f"feddns-node-{uuid.uuid4().hex[:8]}"
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
        run("ip", "addr", "add", f"{NODE_IP}/32", "dev", "lo")
        # Service and load-balancer addresses: only kube-proxy's DNAT gives them meaning; a packet
        # to one it has no rule for goes to lo and ends there.
        run("ip", "route", "add", "198.19.0.0/16", "dev", "lo")
        run("sysctl", "-qw", "net.ipv4.ip_forward=1")
        run("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
        (self.directory / "resolv.conf").write_text(f"nameserver {NODE_IP}\n")
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
            f"--cluster-cidr={CLUSTER_CIDR}", f"--service-cluster-ip-range={SERVICE_CIDR}",
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
                      "ranges": [[{"subnet": POD_SUBNET, "gateway": POD_GATEWAY}]],
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
            "clusterDNS": [DNS_IP], "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(self.directory / "resolv.conf"),
            "address": NODE_IP, "readOnlyPort": 0, "healthzBindAddress": "127.0.0.1",
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
            "--hostname-override=feddns-node", f"--node-ip={NODE_IP}", "--v=1"])

    def _kube_proxy(self, kubeconfig: str) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "mode": "iptables", "clusterCIDR": CLUSTER_CIDR, "hostnameOverride": "feddns-node",
            "clientConnection": {"kubeconfig": kubeconfig}, "bindAddress": NODE_IP,
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
        for obj in kubeadm_coredns_objects(images.coredns_ref()):
            self.api.apply(obj)
        self.wait_rollout("kube-system", "Deployment", "coredns", deadline - time.monotonic())

    # -- use ----------------------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The real kubectl as the admin (KubeCluster.kubectl)."""
        return self.api.kubectl(*args, input=input, check=check)

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
                            f"--timeout={max(1, int(timeout))}s", check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{kind} {namespace}/{name} did not roll out: {done.stderr.strip()}\n"
                               f"{self.describe(namespace)}")

    def describe(self, namespace: str) -> str:
        """The pods of ``namespace`` and its recent events, for an error message."""
        pods = self.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False).stdout
        events = self.kubectl("-n", namespace, "get", "events", "--sort-by=.lastTimestamp", check=False).stdout
        return f"{pods}\n{events[-3000:]}"

    def assign_load_balancer(self, namespace: str, name: str, ip: str) -> None:
        """Give Service ``namespace/name`` the load-balancer address ``ip`` (from
        ``LOAD_BALANCER_RANGE``), as a cloud's controller or MetalLB would: its status."""
        self.api.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
                        "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})

    def pod_logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        args = ["-n", namespace, "logs", pod, *(["-c", container] if container else [])]
        return self.kubectl(*args, check=False).stdout

    # -- stop ---------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Tear the node down completely (module doc). Safe to call twice."""
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


def kubeadm_coredns_objects(image: str) -> list[dict[str, Any]]:
    """kubeadm's CoreDNS objects (ServiceAccount, ClusterRole and its binding, ConfigMap with the
    Corefile, Deployment, Service) from that release's ``manifests.go`` (harness/peers.py), with its
    template fields filled as ``kubeadm init`` fills them for this node."""
    source = peers.kubeadm_dns_manifests().read_text()
    manifests = dict(_GO_RAW_STRING.findall(source))
    fields = {"DNSIP": DNS_IP, "DNSDomain": CLUSTER_DOMAIN, "DeploymentName": "coredns", "Image": image,
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

