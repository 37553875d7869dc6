"""Real CoreDNS as a member cluster's DNS, and the ConfigMap projection kubelet would do for it.

``CoreDNS(kube)`` runs the CoreDNS built by scripts/peers.sh with the Corefile of a stock
cluster (the ``kubernetes`` plugin serving ``cluster.local`` from ``kube``'s real API server, ``reload``)
plus the one line deploy/cluster-dns/coredns/corefile-import.txt adds: ``import DIR/*.server``.

No kubelet runs here, so ``ConfigMapProjector`` plays its part for the ConfigMap volume of
deploy/cluster-dns/coredns/coredns-deployment.patch.yaml: it polls ConfigMap
``kube-system/coredns-feddns`` and lays its keys out in DIR as kubelet lays out a ConfigMap volume
(each key a symlink into ``..data``, itself a symlink swapped atomically; a key removed from the
ConfigMap disappears; no ConfigMap, no files, as ``optional: true``). kubelet syncs such a volume within
its sync period (a minute by default); the projector, within ``interval`` seconds.
"""

import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype

from harness import peers
from harness.kubecluster import KubeCluster
from harness.ports import free_port
from harness.process import ChildProcess
from harness.volume import KubeletVolume


class ConfigMapProjector:
    """Copies ConfigMap ``namespace/name`` of ``kube`` into a :class:`~harness.volume.KubeletVolume`
    every ``interval`` seconds while running."""

    def __init__(self, kube: KubeCluster, path: Path, namespace: str = "kube-system",
                 name: str = "coredns-feddns", interval: float = 0.2) -> None:
        self.kube, self.namespace, self.name, self.interval = kube, namespace, name, interval
        self.volume = KubeletVolume(path)
        self.resource_version: str | None = None
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"projector {kube.name}", daemon=True)

    def start(self) -> "ConfigMapProjector":
        self.sync()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def sync(self) -> None:
        """One pass: read the ConfigMap and lay out its keys if its ``resourceVersion`` changed."""
        found = self.kube.get("ConfigMap", self.namespace, self.name)
        version = found["metadata"]["resourceVersion"] if found else ""
        if version != self.resource_version:
            self.volume.write(dict(found.get("data") or {}) if found else {})
            self.resource_version = version

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except (OSError, RuntimeError):  # the API server restarting: kubelet keeps the old files too
                self.errors += 1


COREFILE = """\
.:{port} {{
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} {context}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    reload 2s 1s
}}
import {imports}/*.server
"""
"""A stock cluster's Corefile (kubeadm's, less what needs a network: forward to /etc/resolv.conf,
loop, health and ready ports), with the import line of deploy/cluster-dns/coredns/corefile-import.txt."""


class CoreDNS:
    """A real CoreDNS for ``kube``'s cluster on 127.0.0.1:``port`` (UDP and TCP), its stub-zone blocks
    imported from ``imports`` (filled by a :class:`ConfigMapProjector` when ``project`` is true).

    ``corefile``, when given, is another Corefile to run instead (a platform's, a node-local cache's):
    called with the port chosen, it returns the text, and nothing is projected.

    ``reloads()`` counts the reloads CoreDNS logged; ``query()`` asks it over UDP with dnspython.
    """

    def __init__(self, kube: KubeCluster, *, project: bool = True,
                 corefile: Callable[[int], str] | None = None, name: str = "") -> None:
        self.kube = kube
        self.directory = Path(tempfile.mkdtemp(prefix=f"feddns-coredns-{kube.name}-"))
        self.imports = self.directory / "feddns"
        self.corefile = self.directory / "Corefile"
        self._render = corefile or (lambda port: COREFILE.format(
            port=port, kubeconfig=kube.kubeconfig, context=kube.name, imports=self.imports))
        self.name = f"coredns ({name or kube.name})"
        self.projector = ConfigMapProjector(kube, self.imports) if project and not corefile else None
        if self.projector is None:
            self.imports.mkdir()
        self._on_port(free_port())
        self.started_in: float | None = None

    def _on_port(self, port: int) -> None:
        self.port = port
        self.corefile.write_text(self._render(port))
        self.child = ChildProcess([peers.binary("coredns"), "-conf", str(self.corefile)], ready=r"^CoreDNS-\d",
                                  name=self.name, log_path=self.directory / "coredns.log")

    def start(self, timeout: float = 30.0, attempts: int = 3) -> "CoreDNS":
        """Start it; when another process took the port chosen between its choice and CoreDNS's bind
        ("address already in use"), again on a new one, ``attempts`` times in all. So a caller that
        used ``port`` before ``start`` (a block rendered for it) reads it again after."""
        began = time.monotonic()
        if self.projector is not None:
            self.projector.start()
        for attempt in range(attempts):
            try:
                self.child.start(timeout=timeout)
                break
            except RuntimeError as exc:
                if "address already in use" not in str(exc) or attempt == attempts - 1:
                    raise
                self._on_port(free_port())
        self.started_in = time.monotonic() - began
        return self

    def stop(self) -> None:
        self.child.stop()
        if self.projector is not None:
            self.projector.stop()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def reloads(self) -> int:
        """How many times CoreDNS logged that it reloaded its configuration."""
        return sum("Reloading complete" in line for line in self.child.lines)

    def query(self, qname: str, qtype: str = "A", timeout: float = 2.0) -> dns.message.Message:
        return query(self.port, qname, qtype, timeout)

    def addresses(self, qname: str) -> list[str]:
        """The A and AAAA addresses answered for ``qname``, in order ([] on any failure)."""
        return addresses(self.port, qname)


def query(port: int, qname: str, qtype: str = "A", timeout: float = 2.0) -> dns.message.Message:
    """Ask 127.0.0.1:``port`` over UDP."""
    request = dns.message.make_query(qname, dns.rdatatype.from_text(qtype))
    return dns.query.udp(request, "127.0.0.1", port=port, timeout=timeout)


def addresses(port: int, qname: str) -> list[str]:
    """The A and AAAA addresses 127.0.0.1:``port`` answers for ``qname``, in order ([] on any failure)."""
    try:
        reply = query(port, qname)
    except (OSError, dns.exception.DNSException):
        return []
    return [rr.address for rrset in reply.answer for rr in rrset if rrset.rdtype in (1, 28)]


def on_loopback(corefile: str, port: int, kube: KubeCluster, mounts: dict[str, Path], upstream: int,
                listen: int = 53) -> str:
    """A platform's Corefile (as its ConfigMap holds it) made runnable here, changing only what a node gives.

    Every server block listens on 127.0.0.1:``port`` instead of :``listen``; the ``kubernetes`` plugin, if
    there is one, reaches ``kube`` with its admin kubeconfig, as it would the in-cluster API;
    ``forward . /etc/resolv.conf`` goes to 127.0.0.1:``upstream`` (the node's resolvers: nothing there
    knows the federation); ``health``, ``ready`` and ``prometheus`` are dropped (fixed ports every process
    would share); and each ``mounts`` path (a ConfigMap volume's mount path, e.g.
    ``/etc/coredns/feddns``) is the directory given.
    """
    text = re.sub(rf"^(\s*\S+):{listen}(\s*\{{)", rf"\1:{port}\2", corefile, flags=re.MULTILINE)
    text = re.sub(r"^(\s*\.)(\s*\{)", rf"\1:{port}\2", text, flags=re.MULTILINE)
    text = re.sub(r"^\s*health\s*\{[^}]*\}\s*$|^\s*(health|ready|prometheus)\b.*$", "", text, flags=re.MULTILINE)
    text = re.sub(r"^(\s*kubernetes\s[^{\n]*\{)", rf"\1\n        kubeconfig {kube.kubeconfig} {kube.name}",
                  text, flags=re.MULTILINE)
    text = text.replace("/etc/resolv.conf", f"127.0.0.1:{upstream}")
    for mount, directory in mounts.items():
        text = text.replace(mount, str(directory))
    return text
