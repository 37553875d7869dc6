"""One federation end to end on loopback: the whole deployed chain, for the test and the demo.

    kube-apiserver foo, bar --list/watch--> feddns controller --> etcd --> feddns serve
                                                                            ^  ^
    dig --> CoreDNS "foo" (import of coredns-feddns: 0xfedd=foo) -----------'  |
    dig --> unbound "foo" (stub zone, 0xfedd=foo) -----------------------------'
    (and the same for bar)

Every part is the real program (harness/kubecluster.py, harness/coredns.py):

* each member cluster is a real kube-apiserver holding the federated Service ``myns/myservice`` and
  its EndpointSlice (no controller-manager runs, so the chain writes the slice as the EndpointSlice
  controller would);
* ``feddns controller`` reaches each with the token of ServiceAccount ``feddns-system/feddns-controller``,
  bound only to deploy/member/controller-access.yaml's ClusterRole, on a read-only root filesystem;
* each cluster's DNS is a real CoreDNS (``kubernetes`` plugin for ``cluster.local``, ``reload``, and the
  import line of deploy/cluster-dns/coredns/), programmed by its own ``feddns stubzone --backend coredns``
  with the ServiceAccount and Role of deploy/cluster-dns/coredns/stubzone.yaml; the controller's leader
  POSTs Federated-DNS's address to each endpoint (its config's ``nameservers`` and ``stubzone`` blocks),
  as the design's cluster controller does; kubelet's part, the ConfigMap volume, is played by
  harness/coredns.py's projector;
* unbound, with a static stub zone, stays as a second cluster DNS of each cluster.

Clusters foo (us-central1-a) and bar (us-central1-b) are in one region, so each sees its own clusterIP
first and the other's externalIP second (docs/reference.md section 2).
"""

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from harness.controller import ControllerProcess
from harness.coredns import CoreDNS
from harness.etcd import EtcdServer
from harness.kubecluster import ApiError, KubeCluster
from harness.objects import endpoint_slice, service
from harness.ports import wait_until
from harness.serve import ServeProcess
from harness.stubzone import StubzoneProcess, make_pki
from harness.unbound import UnboundResolver
from stubzone.backends.corefile import COREDNS_MIN_TTL

FEDERATION = "myfederation"
QNAME = "myservice.myns.myfederation.svc.federation."
STUB_ZONE = f"{FEDERATION}.svc.federation."
LABEL = {"federation.feddns.io/name": FEDERATION}
REPO = Path(__file__).parents[1]
CONTROLLER_ACCESS = REPO / "deploy" / "member" / "controller-access.yaml"
STUBZONE_MANIFEST = REPO / "deploy" / "cluster-dns" / "coredns" / "stubzone.yaml"
CLUSTERS: dict[str, dict[str, Any]] = {
    "foo": {"zone": "us-central1-a", "region": "us-central1", "clusterIP": "10.0.3.64", "externalIP": "104.32.64.128"},
    "bar": {"zone": "us-central1-b", "region": "us-central1", "clusterIP": "10.0.4.20", "externalIP": "104.32.64.130"},
}


def myservice(cluster: str) -> dict[str, Any]:
    """The federated Service ``myns/myservice`` as cluster ``cluster``'s API server holds it."""
    shard = CLUSTERS[cluster]
    return service("myns", "myservice", labels=LABEL, type="LoadBalancer",
                   cluster_ip=shard["clusterIP"], load_balancer_ips=[shard["externalIP"]])


def myservice_slice(ready: int, not_ready: int = 0) -> dict[str, Any]:
    """The EndpointSlice of ``myns/myservice`` with ``ready`` ready endpoints."""
    return endpoint_slice("myns", "myservice", ready=ready, not_ready=not_ready)


def install_member(kube: KubeCluster) -> None:
    """What a member cluster gets from deploy/: the controller's access, and the stub-zone endpoint's
    ServiceAccount, Role and empty ConfigMap (its Deployment, Service and Secret need a kubelet)."""
    kube.load(CONTROLLER_ACCESS)
    for obj in yaml.safe_load_all(STUBZONE_MANIFEST.read_text()):
        if obj and obj["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ConfigMap"):
            kube.apply(obj)


CACHE_MIN_TTL = {"foo": 0}
"""``--cache-min-ttl`` of each cluster's stub zone: foo's CoreDNS holds no answer past its TTL (as the
member chart renders it), the others keep CoreDNS's own floor (the command's default)."""
SERVE_STALE = {"foo": 30}
"""``--cache-serve-stale`` of each cluster's stub zone: foo's CoreDNS gives an expired answer while
Federated-DNS fails (as the member chart renders it); the others never (the command's default)."""


class Chain:
    """The running chain: ``kubes``, ``controller``, ``serve``, ``stubzones``, ``coredns`` and ``resolvers``
    (unbound) by cluster name.

    ``kubes`` are the member clusters to use (the tests' session clusters); without them the chain starts
    and owns its own (the demo). ``members`` are the clusters in the controller's config at the start
    (default: all); ``set_members`` changes the file, which the controller reloads. ``ttl`` (seconds) is
    Federated-DNS's answer and negative TTL and the resolvers' cache limit. ``start()`` returns once every
    member's cluster DNS gives its own cluster's clusterIP first; ``stop()`` ends every process it started
    and removes the stub zones it programmed.
    """

    def __init__(self, etcd: EtcdServer, kubes: dict[str, KubeCluster] | None = None, prefix: str = "",
                 ttl: int = 1, members: tuple[str, ...] | None = None) -> None:
        self.etcd, self.prefix, self.ttl = etcd, prefix, ttl
        self.directory = Path(tempfile.mkdtemp(prefix="feddns-chain-"))
        self.owns_kubes = kubes is None
        self.kubes = kubes if kubes is not None else {name: KubeCluster(name, etcd.url) for name in CLUSTERS}
        self.controller = ControllerProcess(self.directory / "controller.yaml", self.directory / "controller.log",
                                            "--allow-loopback-nameservers",  # Federated-DNS is on 127.0.0.1
                                            read_only=True)
        self.serve = ServeProcess(etcd_url=etcd.url, prefix=prefix,
                                  extra_args=["--ttl", str(ttl), "--negative-ttl", str(ttl)])
        self.pki = make_pki(self.directory / "pki")
        self.coredns: dict[str, CoreDNS] = {}
        self.stubzones: dict[str, StubzoneProcess] = {}
        self.resolvers: dict[str, UnboundResolver] = {}
        self.members = tuple(members if members is not None else self.kubes)
        self._kubeconfigs: dict[str, str] = {}

    def start(self) -> "Chain":
        for name, kube in self.kubes.items():
            if self.owns_kubes:
                kube.start()
            install_member(kube)
            kube.apply(myservice(name))
            kube.apply(myservice_slice(ready=2))
        self.serve.start()
        for name, kube in self.kubes.items():
            self.coredns[name] = CoreDNS(kube).start()
            self.stubzones[name] = self._stubzone(name, kube)
            self.stubzones[name].start()
            self.resolvers[name] = UnboundResolver(name, stub_zone=STUB_ZONE, stub_port=self.serve.port,
                                                   cache_max_ttl=self.ttl).start()
        self.set_members(self.members)
        self.controller.start()
        for name in self.members:
            self.wait_for(name, self.expected(name, members=self.members), timeout=30)
        return self

    def set_members(self, names: tuple[str, ...]) -> None:
        """Write the controller's config with clusters ``names`` (the file replaced at once, as a
        ConfigMap volume's update is); a running controller reloads it."""
        self.members = tuple(names)
        path = self.directory / "controller.yaml"
        path.with_suffix(".new").write_text(yaml.safe_dump(self.controller_config()))
        path.with_suffix(".new").replace(path)

    def _stubzone(self, name: str, kube: KubeCluster) -> StubzoneProcess:
        token = kube.service_account_token("kube-system", "feddns-stubzone")
        kubeconfig = kube.write_kubeconfig(self.directory / f"{name}-stubzone.kubeconfig", token=token)
        return StubzoneProcess(self.pki, "--backend", "coredns", "--cluster", name, "--kubeconfig", kubeconfig,
                               "--coredns-port", str(self.coredns[name].port),
                               "--cache-min-ttl", str(CACHE_MIN_TTL.get(name, COREDNS_MIN_TTL)),
                               "--cache-serve-stale", str(SERVE_STALE.get(name, 0)),
                               "--allow-loopback-nameservers")  # Federated-DNS is on 127.0.0.1

    def program(self, name: str) -> None:
        """POST Federated-DNS's address to ``name``'s stub-zone endpoint (the design's "Initial Setup")."""
        answer = self.stubzones[name].request("POST", f"/federations/{FEDERATION}",
                                              {"nameservers": [f"127.0.0.1:{self.serve.port}"]})
        assert answer.status in (200, 201), answer

    def unprogram(self, name: str) -> None:
        answer = self.stubzones[name].request("DELETE", f"/federations/{FEDERATION}")
        assert answer.status in (200, 404), answer

    def controller_config(self) -> dict[str, Any]:
        """The controller's config file (docs/reference.md section 7) for the clusters in ``members``:
        each with its stub-zone endpoint, and Federated-DNS's address as ``nameservers``."""
        clusters = []
        for name in self.members:
            if name not in self._kubeconfigs:
                kube = self.kubes[name]
                token = kube.service_account_token("feddns-system", "feddns-controller")
                self._kubeconfigs[name] = kube.write_kubeconfig(self.directory / f"{name}.kubeconfig", token=token)
            cert, key = self.pki.cert("client")
            clusters.append({"name": name, "kubeconfig": self._kubeconfigs[name],
                             "zone": CLUSTERS[name]["zone"], "region": CLUSTERS[name]["region"],
                             "stubzone": {"url": f"https://127.0.0.1:{self.stubzones[name].port}",
                                          "cert": cert, "key": key, "ca": self.pki.ca}})
        return {"federation": FEDERATION, "etcd": {"endpoints": [self.etcd.url], "prefix": self.prefix},
                "nameservers": [f"127.0.0.1:{self.serve.port}"], "clusters": clusters}

    def expected(self, asker: str, deleted: frozenset[str] = frozenset(),
                 members: tuple[str, ...] | None = None) -> list[str]:
        """What ``asker``'s cluster DNS should return: its own clusterIP, then the other members'
        externalIPs (``members``: the clusters in the controller's config, default all)."""
        gone = deleted | (frozenset(CLUSTERS) - frozenset(members if members is not None else CLUSTERS))
        own = [] if asker in gone else [CLUSTERS[asker]["clusterIP"]]
        return own + [c["externalIP"] for n, c in CLUSTERS.items() if n != asker and n not in gone]

    def answers(self, asker: str) -> dict[str, list[str]]:
        """What each of ``asker``'s cluster DNSes answers for QNAME now."""
        return {"coredns": self.coredns[asker].addresses(QNAME), "unbound": self.resolvers[asker].addresses(QNAME)}

    def wait_for(self, asker: str, addresses: list[str], timeout: float = 15.0) -> list[str]:
        """Wait until both of ``asker``'s cluster DNSes return exactly ``addresses`` for QNAME, in order."""
        def check() -> bool:
            if not self.controller.child.running:
                raise RuntimeError(f"feddns controller exited:\n{self.controller.log()}")
            return all(found == addresses for found in self.answers(asker).values())
        try:
            wait_until(check, timeout=timeout, interval=0.1, what=f"{asker}'s cluster DNS giving {addresses}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc} (now {self.answers(asker)})\n{self.logs()}") from exc
        return addresses

    def logs(self) -> str:
        parts = [f"--- controller\n{self.controller.log()[-3000:]}", f"--- serve\n{self.serve.log[-3000:]}"]
        parts += [f"--- coredns {n}\n{c.child.log[-2000:]}" for n, c in self.coredns.items()]
        parts += [f"--- stubzone {n}\n" + "\n".join(s.lines[-20:]) for n, s in self.stubzones.items()]
        parts += [f"--- unbound {n}\n{r.log[-2000:]}" for n, r in self.resolvers.items()]
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop every process and server it started, remove the stub zones, and its temporary directory."""
        for name, stubzone in self.stubzones.items():
            if stubzone.child.running:
                self.unprogram(name)
            stubzone.stop()
        for dns in (*self.resolvers.values(), *self.coredns.values()):
            dns.stop()
        self.serve.stop()
        self.controller.terminate()
        for kube in self.kubes.values():
            if self.owns_kubes:
                kube.close()
            else:
                for kind, obj in (("Service", "myservice"), ("EndpointSlice", "myservice-abcde")):
                    with contextlib.suppress(ApiError):
                        kube.delete(kind, "myns", obj)
        for coredns in self.coredns.values():
            coredns.close()
        shutil.rmtree(self.directory, ignore_errors=True)
