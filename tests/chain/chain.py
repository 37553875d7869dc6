"""One federation end to end on loopback: the whole deployed chain, for the test and the demo.

    FakeKube foo, bar --list/watch--> feddns controller --> etcd --> feddns serve
                                                                      ^   stub zone
    dig --> unbound "foo" (tags queries 0xfedd=foo) ------------------|
    dig --> unbound "bar" (tags queries 0xfedd=bar) ------------------'

Every part is the real program but the member clusters' API servers
(tests/support/fakekube.py). Clusters foo (us-central1-a) and bar
(us-central1-b) are in one region, so each sees its own clusterIP first and the
other's externalIP second (docs/reference.md section 2).
"""

import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.support.controller import ControllerProcess
from tests.support.etcd import EtcdServer
from tests.support.fakekube import FakeKube, endpoint_slice, service
from tests.support.ports import wait_until
from tests.support.serve import ServeProcess
from tests.support.unbound import UnboundResolver

FEDERATION = "myfederation"
QNAME = "myservice.myns.myfederation.svc.federation."
STUB_ZONE = f"{FEDERATION}.svc.federation."
LABEL = {"federation.feddns.io/name": FEDERATION}
REPO = Path(__file__).parents[2]
CLUSTERS: dict[str, dict[str, Any]] = {
    "foo": {"zone": "us-central1-a", "region": "us-central1", "clusterIP": "10.0.3.64", "externalIP": "104.32.64.128"},
    "bar": {"zone": "us-central1-b", "region": "us-central1", "clusterIP": "10.0.4.20", "externalIP": "104.32.64.130"},
}


def myservice(cluster: str) -> dict[str, Any]:
    """The federated Service ``myns/myservice`` as cluster ``cluster``'s API server holds it."""
    shard = CLUSTERS[cluster]
    return service("myns", "myservice", labels=LABEL, type="LoadBalancer",
                   cluster_ip=shard["clusterIP"], load_balancer_ips=[shard["externalIP"]])


SLICE_PATH = "/apis/discovery.k8s.io/v1/namespaces/myns/endpointslices/myservice-abcde"
"""The API path of ``myns/myservice``'s EndpointSlice in each fake cluster."""


def myservice_slice(ready: int, not_ready: int = 0) -> dict[str, Any]:
    """The EndpointSlice of ``myns/myservice`` with ``ready`` ready endpoints."""
    return endpoint_slice("myns", "myservice", ready=ready, not_ready=not_ready)


class Chain:
    """The running chain: ``fakes``, ``controller``, ``serve``, ``resolvers`` by cluster name.

    ``ttl`` (seconds) is Federated-DNS's answer and negative TTL and the resolvers'
    cache limit. ``start()`` returns once both resolvers give their own cluster's
    clusterIP first; ``stop()`` ends every process it started.
    """

    def __init__(self, etcd: EtcdServer, prefix: str = "", ttl: int = 1) -> None:
        self.etcd, self.prefix, self.ttl = etcd, prefix, ttl
        self.directory = Path(tempfile.mkdtemp(prefix="feddns-chain-"))
        self.fakes = {name: FakeKube(name) for name in CLUSTERS}
        self.controller = ControllerProcess(self.directory / "controller.yaml", self.directory / "controller.log")
        self.serve = ServeProcess(etcd_url=etcd.url, prefix=prefix,
                                  extra_args=["--ttl", str(ttl), "--negative-ttl", str(ttl)])
        self.resolvers: dict[str, UnboundResolver] = {}

    def start(self) -> "Chain":
        for name, fake in self.fakes.items():
            fake.start()
            fake.apply(myservice(name))
            fake.apply(myservice_slice(ready=2))
        (self.directory / "controller.yaml").write_text(yaml.safe_dump(self.controller_config()))
        self.controller.start()
        self.serve.start()
        for name in CLUSTERS:
            self.resolvers[name] = UnboundResolver(name, stub_zone=STUB_ZONE, stub_port=self.serve.port,
                                                   cache_max_ttl=self.ttl).start()
        for name in CLUSTERS:
            self.wait_for(name, self.expected(name), timeout=30)
        return self

    def controller_config(self) -> dict[str, Any]:
        """The controller's config file (docs/reference.md section 7) for the two fake clusters."""
        clusters = [
            {"name": name, "kubeconfig": fake.write_kubeconfig(str(self.directory / f"{name}.kubeconfig")),
             "zone": CLUSTERS[name]["zone"], "region": CLUSTERS[name]["region"]}
            for name, fake in self.fakes.items()
        ]
        return {"federation": FEDERATION, "etcd": {"endpoints": [self.etcd.url], "prefix": self.prefix},
                "clusters": clusters}

    def expected(self, asker: str, deleted: frozenset[str] = frozenset()) -> list[str]:
        """What ``asker``'s resolver should return: its own clusterIP, then the others' externalIPs."""
        own = [] if asker in deleted else [CLUSTERS[asker]["clusterIP"]]
        return own + [c["externalIP"] for n, c in CLUSTERS.items() if n != asker and n not in deleted]

    def wait_for(self, asker: str, addresses: list[str], timeout: float = 15.0) -> list[str]:
        """Wait until ``asker``'s resolver returns exactly ``addresses`` for QNAME, in order."""
        def check() -> bool:
            if not self.controller.child.running:
                raise RuntimeError(f"feddns controller exited:\n{self.controller.log()}")
            return self.resolvers[asker].addresses(QNAME) == addresses
        try:
            return wait_until(check, timeout=timeout, interval=0.1, what=f"{asker}'s resolver giving {addresses}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.logs()}") from exc

    def logs(self) -> str:
        parts = [f"--- controller\n{self.controller.log()[-3000:]}", f"--- serve\n{self.serve.log[-3000:]}"]
        parts += [f"--- unbound {n}\n{r.log[-2000:]}" for n, r in self.resolvers.items()]
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop every process and server it started, and remove its temporary directory."""
        for resolver in self.resolvers.values():
            resolver.stop()
        self.serve.stop()
        self.controller.terminate()
        for fake in self.fakes.values():
            fake.close()
        shutil.rmtree(self.directory, ignore_errors=True)
