"""Real cluster DNS the way a platform that owns it runs it: AKS and k3s (CoreDNS with ``coredns-custom``),
and OpenShift (CoreDNS rendered by the DNS operator from ``DNS/default``).

``PlatformCoreDNS(kube)`` runs the CoreDNS built by scripts/peers.sh on the Corefile of ConfigMap
``kube-system/coredns`` as ``kube``'s API server holds it (the platform's, tests/fixtures/platforms/),
with the keys of ConfigMap ``kube-system/coredns-custom`` as files in ``custom/`` beside it. No kubelet
runs here, so ``sync()`` plays its part: it reads both ConfigMaps and lays them out as the platform's
volumes are (``/etc/coredns`` and ``/etc/coredns/custom``; harness/volume.py). ``restart()`` syncs again
and starts CoreDNS anew, as a new pod would (the shipped ``reload`` checks every 30 s).

What the Corefile needs to run on loopback without a network, and nothing else, is changed
(:func:`runnable`, :func:`harness.coredns.on_loopback`): the port, the directory, the API server of the
``kubernetes`` plugin, the plugins that open other ports dropped, and the node's resolvers a port where
nothing answers.

``OpenShiftOperator(kube)`` plays the DNS operator: it renders a Corefile from the real ``DNS/default``
the way openshift/cluster-dns-operator's template does (pkg/operator/controller/controller_dns_configmap.go:
one block per ``spec.servers`` entry with its ``forward`` and ``policy``, then ``.:PORT``), and runs
CoreDNS on it; ``sync()`` renders again and restarts it.
"""

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import dns.message

from harness import coredns, peers
from harness.kubecluster import KubeCluster
from harness.ports import free_port
from harness.process import ChildProcess
from harness.volume import KubeletVolume

DNS_PATH = "/apis/operator.openshift.io/v1/dnses/default"
"""``DNS/default`` of the OpenShift DNS operator (cluster-scoped)."""
def runnable(corefile: str, port: int, directory: Path, kube: KubeCluster) -> str:
    """The platform's ``corefile`` on loopback (:func:`harness.coredns.on_loopback`), its ``/etc/coredns``
    volumes in ``directory``, and k3s's ``%{CLUSTER_DOMAIN}%`` filled in as k3s does (``cluster.local``)."""
    return coredns.on_loopback(corefile.replace("%{CLUSTER_DOMAIN}%", "cluster.local"), port, kube,
                               {"/etc/coredns": directory}, free_port())


class _CoreDNSRun:
    """A CoreDNS child on ``directory/Corefile`` and 127.0.0.1:``port``; ``query``/``addresses`` ask it."""

    def __init__(self, kube: KubeCluster, prefix: str) -> None:
        self.kube = kube
        self.directory = Path(tempfile.mkdtemp(prefix=f"feddns-{prefix}-{kube.name}-"))
        self.port = free_port()
        self.corefile = self.directory / "Corefile"
        self.child = ChildProcess([peers.binary("coredns"), "-conf", str(self.corefile)], ready=r"^CoreDNS-\d",
                                  name=f"coredns {prefix} ({kube.name})", log_path=self.directory / "coredns.log",
                                  cwd=self.directory)

    def sync(self) -> None:
        raise NotImplementedError

    def start(self, attempts: int = 3) -> "_CoreDNSRun":
        """Render and start it; when another process took a port chosen between its choice and CoreDNS's
        bind ("address already in use"), again on new ones, ``attempts`` times in all (as
        :meth:`harness.coredns.CoreDNS.start`)."""
        for attempt in range(attempts):
            self.sync()
            try:
                self.child.start(timeout=30)
                break
            except RuntimeError as exc:
                if "address already in use" not in str(exc) or attempt == attempts - 1:
                    raise
                self.port = free_port()
        return self

    def restart(self) -> None:
        self.child.stop()
        self.start()

    def close(self) -> None:
        self.child.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def query(self, qname: str, qtype: str = "A", timeout: float = 2.0) -> dns.message.Message:
        return coredns.query(self.port, qname, qtype, timeout)

    def addresses(self, qname: str) -> list[str]:
        """The A and AAAA addresses answered for ``qname``, in order ([] on any failure)."""
        return coredns.addresses(self.port, qname)

    def wait_for(self, qname: str, addresses: list[str], timeout: float = 15.0) -> None:
        """Wait until ``qname`` is answered with exactly ``addresses`` (TimeoutError with the log otherwise)."""
        deadline = time.monotonic() + timeout
        while (found := self.addresses(qname)) != addresses:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.child.name} gives {found} for {qname}, not {addresses}:\n"
                                   f"{self.corefile.read_text()}\n{self.child.log[-3000:]}")
            time.sleep(0.1)


class PlatformCoreDNS(_CoreDNSRun):
    """CoreDNS on the Corefile of ConfigMap ``kube-system/coredns`` of ``kube`` and the keys of
    ``kube-system/coredns-custom`` (see the module doc)."""

    def __init__(self, kube: KubeCluster) -> None:
        super().__init__(kube, "platform")
        self.custom = KubeletVolume(self.directory / "custom")
        (self.directory / "NodeHosts").write_text("")  # k3s's hosts file, written by k3s from its nodes

    def sync(self) -> None:
        """Lay out both ConfigMaps as kubelet would (a missing coredns-custom: an empty directory, as
        ``optional: true``)."""
        shipped = self.kube.get("ConfigMap", "kube-system", "coredns")
        assert shipped is not None, "ConfigMap kube-system/coredns is the platform's: apply its fixture first"
        self.corefile.write_text(runnable(shipped["data"]["Corefile"], self.port, self.directory, self.kube))
        custom = self.kube.get("ConfigMap", "kube-system", "coredns-custom")
        self.custom.write(dict((custom or {}).get("data") or {}))


class OpenShiftOperator(_CoreDNSRun):
    """The DNS operator's part for ``DNS/default`` of ``kube``: render, run CoreDNS (see the module doc)."""

    def __init__(self, kube: KubeCluster) -> None:
        super().__init__(kube, "openshift")

    def sync(self) -> None:
        self.corefile.write_text(self.render(self.kube.request("GET", DNS_PATH)))

    def render(self, dns_object: dict[str, Any]) -> str:
        """The operator's Corefile for ``dns_object`` (its template, less the ports other than DNS)."""
        blocks = []
        for server in (dns_object.get("spec") or {}).get("servers") or []:
            forward = server.get("forwardPlugin") or {}
            keys = " ".join(f"{zone}:{self.port}" for zone in server["zones"])
            blocks.append(f"# {server['name']}\n{keys} {{\n"
                          f"    forward . {' '.join(forward.get('upstreams') or [])} {{\n"
                          f"        policy {_POLICIES[forward.get('policy') or 'Random']}\n    }}\n"
                          "    errors\n    log . {\n        class error\n    }\n    bufsize 1232\n"
                          "    cache 900 {\n        denial 9984 30\n    }\n}\n")
        blocks.append(f".:{self.port} {{\n    bufsize 1232\n    errors\n    log . {{\n        class error\n    }}\n"
                      f"    kubernetes cluster.local in-addr.arpa ip6.arpa {{\n"
                      f"        kubeconfig {self.kube.kubeconfig} {self.kube.name}\n        pods insecure\n"
                      "        fallthrough in-addr.arpa ip6.arpa\n    }\n"
                      "    cache 900 {\n        denial 9984 30\n    }\n    reload\n}\n"
                      f"hostname.bind:{self.port} {{\n    chaos\n}}\n")
        return "".join(blocks)


_POLICIES = {"Random": "random", "RoundRobin": "round_robin", "Sequential": "sequential"}
"""The operator's coreDNSPolicy: the CRD's policy to the forward plugin's."""
