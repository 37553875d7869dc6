"""Where the real peers built by scripts/peers.sh are: CoreDNS, kube-apiserver, kubectl, helm, etcd, the
node's binaries, kubeadm's CoreDNS manifests, and the CRDs of other projects (docs/development.md, "Real peers").

The versions come from tests/peers/versions.env, the file scripts/peers.sh reads, and the builds from
``FEDDNS_PEERS_DIR`` (default ``~/.cache/feddns-peers``). A peer that is not built is an error naming
the peer and the command that builds it: a test that needs one never skips.
"""

import os
from pathlib import Path

REPO = Path(__file__).parents[1]
VERSIONS_FILE = REPO / "tests" / "peers" / "versions.env"


def versions() -> dict[str, str]:
    """``{"COREDNS_VERSION": "v1.15.0", ...}`` from tests/peers/versions.env."""
    pairs = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def peers_dir() -> Path:
    """The build cache: ``$FEDDNS_PEERS_DIR``, else ``$XDG_CACHE_HOME/feddns-peers``, else ``~/.cache/feddns-peers``."""
    if configured := os.environ.get("FEDDNS_PEERS_DIR"):
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "feddns-peers"


def _directory(peer: str, version_keys: tuple[str, ...]) -> Path:
    pinned = versions()
    directory = peers_dir() / "-".join([peer, *(pinned[key] for key in version_keys)])
    if not (directory / ".done").exists():
        raise FileNotFoundError(f"peer {peer} is not built in {directory}: run `bash scripts/peers.sh` "
                                f"(or `make peers`), which the README's test command runs")
    return directory


def binary(name: str) -> str:
    """The path of ``coredns``, ``kube-apiserver``, ``kubectl``, ``helm``, ``etcd`` (the chart's etcd
    version), or a node binary (``kubelet``, ``kube-proxy``, ``kube-controller-manager``,
    ``kube-scheduler``) at its pinned version."""
    node = ("node", ("KUBERNETES_VERSION",))
    peer, keys = {
        "coredns": ("coredns", ("COREDNS_VERSION",)),
        "kube-apiserver": ("kubernetes", ("KUBERNETES_VERSION",)),
        "kubectl": ("kubernetes", ("KUBERNETES_VERSION",)),
        "helm": ("helm", ("HELM_VERSION",)),
        "etcd": ("etcd", ("ETCD_VERSION",)),
        "kubelet": node, "kube-proxy": node, "kube-controller-manager": node, "kube-scheduler": node,
    }[name]
    return str(_directory(peer, keys) / name)


def crd(name: str) -> Path:
    """A CRD file as its project publishes it: ``dnsendpoints.yaml`` (ExternalDNS), ``serviceexports.yaml``
    (MCS API), ``podmonitors.yaml`` or ``prometheusrules.yaml`` (prometheus-operator), ``certificates.yaml``
    (cert-manager), ``helmchartconfigs.yaml`` (k3s's helm-controller, which RKE2 runs)."""
    directory = _directory("crds", ("EXTERNAL_DNS_VERSION", "MCS_API_VERSION", "PROMETHEUS_OPERATOR_VERSION",
                                    "CERT_MANAGER_VERSION", "HELM_CONTROLLER_VERSION"))
    return directory / name


def kubeadm_dns_manifests() -> Path:
    """kubeadm's CoreDNS manifests as that release ships them (``cmd/kubeadm/app/phases/addons/dns/
    manifests.go`` of k8s.io/kubernetes at KUBERNETES_VERSION), copied by the node's build step."""
    return _directory("node", ("KUBERNETES_VERSION",)) / "kubeadm-dns-manifests.go"
