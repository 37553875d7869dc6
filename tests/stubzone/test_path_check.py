"""The path check (docs/stubzone.md, "The path check"): ``feddns stubzone --probe-server`` asks
``_whoami.F.svc.federation.`` TXT through the cluster DNS and says whether Federated-DNS names
this cluster, in ``feddns_stubzone_path_ok`` and the ``/health`` body.

The chain is real: ``feddns serve`` on a records file, a real CoreDNS whose Corefile imports
the server blocks of ConfigMap ``kube-system/coredns-feddns`` (harness/coredns.py), that
ConfigMap written by a real ``feddns stubzone --backend coredns --cluster foo`` in a real
kube-apiserver. A platform's reconciler is played by rewriting the Corefile without its import
line, as the reconcilers of managed clusters do; CoreDNS's ``reload`` drops the forwarding.

``--probe-service`` (what the member chart renders, ``helm template`` or not) finds the cluster DNS
Service through the same API server, with only the Role the rendered manifest gives; the endpoint
then runs in a pod's network of the test's own (tests/stubzone/podnet.py), where the Service's
clusterIP answers as kube-proxy makes it answer.
"""

import asyncio
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.chain import install_member
from harness.coredns import CoreDNS
from harness.kubecluster import KubeCluster
from harness.ports import free_port, wait_until
from harness.process import ChildProcess
from harness.serve import ServeProcess, write_records
from harness.stubzone import Pki, StubzoneProcess
from stubzone.backends.configmap import client_configuration
from stubzone.probetarget import ServiceTarget, TargetNotFound, pick_address
from tests.stubzone.platforms import delete_all, kubeconfig_with_rules
from tests.stubzone.podnet import PodNetwork

FEDERATION = "pathcheck"
RECORDS = f"""
/{FEDERATION}/_clusters/foo: {{zone: us-central1-a, region: us-central1}}
/{FEDERATION}/_clusters/bar: {{zone: us-central1-b, region: us-central1}}
"""
INTERVAL = 1.0
"""--probe-interval of these tests, seconds."""
SETTLE = INTERVAL + 5.0
"""Seconds within which a change of the path shows: the probe interval, plus a few."""


class Endpoint(StubzoneProcess):
    """``feddns stubzone --backend coredns --cluster foo`` with ``--metrics`` and the path check."""

    def __init__(self, pki: Pki, kubeconfig: str, coredns_port: int, probe_server: str, cluster: str = "foo",
                 probe_flag: str = "--probe-server") -> None:
        self.metrics_port = free_port()
        self.metrics_reached = self.metrics_port  # where the test reaches --metrics (from the host's network)
        super().__init__(pki, "--backend", "coredns", "--cluster", cluster, "--kubeconfig", kubeconfig,
                         "--coredns-port", str(coredns_port), "--metrics", f"127.0.0.1:{self.metrics_port}",
                         probe_flag, probe_server, "--probe-interval", str(INTERVAL),
                         "--allow-loopback-nameservers")  # Federated-DNS is on 127.0.0.1

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """The samples of ``name`` by their labels (sorted ``(label, value)`` pairs)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_reached}/metrics", timeout=10) as response:
            text = response.read().decode()
        return {tuple(sorted(sample.labels.items())): sample.value
                for family in text_string_to_metric_families(text) for sample in family.samples
                if sample.name == name}

    def path_ok(self) -> float | None:
        """``feddns_stubzone_path_ok{federation="pathcheck"}``, ``None`` before the first probe."""
        return self.samples("feddns_stubzone_path_ok").get((("federation", FEDERATION),))

    def health(self) -> tuple[int, str]:
        """The status and body of ``GET /health`` on the metrics port."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_reached}/health", timeout=10) as response:
            return response.status, response.read().decode()

    def path_line(self) -> str:
        """The /health body's line of the federation ('' when there is none yet)."""
        return next((line for line in self.health()[1].splitlines() if line.startswith(f"path {FEDERATION}:")), "")


@pytest.fixture(scope="module")
def serve() -> Iterator[ServeProcess]:
    with ServeProcess(records=write_records(RECORDS)) as server:
        yield server


@pytest.fixture(scope="module")
def coredns(kube_foo: KubeCluster) -> Iterator[CoreDNS]:
    install_member(kube_foo)
    server = CoreDNS(kube_foo).start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def kubeconfig(kube_foo: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kubeconfig with the token of the endpoint's ServiceAccount (deploy/cluster-dns/coredns/stubzone.yaml)."""
    token = kube_foo.service_account_token("kube-system", "feddns-stubzone")
    return kube_foo.write_kubeconfig(tmp_path_factory.mktemp("path") / "stubzone.kubeconfig", token=token)


@pytest.fixture(scope="module")
def endpoint(pki: Pki, kubeconfig: str, coredns: CoreDNS, serve: ServeProcess) -> Iterator[Endpoint]:
    """The endpoint programming foo's CoreDNS, probing through it, with federation pathcheck programmed."""
    with Endpoint(pki, kubeconfig, coredns.port, f"127.0.0.1:{coredns.port}") as server:
        answer = server.request("POST", f"/federations/{FEDERATION}", {"nameservers": [f"127.0.0.1:{serve.port}"]})
        assert answer.status == 200, answer
        yield server
        server.request("DELETE", f"/federations/{FEDERATION}")


def wait_path(endpoint: Endpoint, ok: float, timeout: float = SETTLE) -> None:
    wait_until(lambda: endpoint.path_ok() == ok, timeout=timeout, interval=0.1,
               what=f"path_ok {ok} (health: {endpoint.path_line()!r})")


def without_import(corefile: Path) -> str:
    """The Corefile as a platform's reconciler puts it back: the import line gone. Returns the old text."""
    text = corefile.read_text()
    corefile.write_text("".join(line for line in text.splitlines(keepends=True) if not line.startswith("import ")))
    return text


def test_the_path_is_ok_then_broken_when_the_import_line_goes_then_ok_again(endpoint: Endpoint, coredns: CoreDNS):
    wait_path(endpoint, 1, timeout=30)  # the first probe may come before CoreDNS reloaded the new block
    assert endpoint.samples("feddns_stubzone_path_cluster_info") == {
        (("by", "option"), ("cluster", "foo"), ("federation", FEDERATION)): 1.0}
    assert endpoint.samples("feddns_stubzone_path_target_found") == {(("flag", "probe-server"),): 1.0}
    status, _ = endpoint.health()
    assert status == 200
    assert endpoint.path_line() == (f"path {FEDERATION}: ok: cluster foo by option via 127.0.0.1:{coredns.port}")
    start = len(endpoint.lines)
    reloads = coredns.reloads()
    old = without_import(coredns.corefile)
    try:
        wait_until(lambda: coredns.reloads() > reloads, timeout=15, interval=0.1, what="CoreDNS reloading")
        wait_path(endpoint, 0)
        status, _ = endpoint.health()
        assert status == 200  # the endpoint repairs the path: it never leaves its Service for it
        assert endpoint.path_line() == (f"path {FEDERATION}: broken: answered SERVFAIL: the cluster DNS does not "
                                        f"forward {FEDERATION}.svc.federation. to Federated-DNS")
        assert endpoint.samples("feddns_stubzone_path_cluster_info") == {}
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.metrics_port}/ready", timeout=10) as response:
            assert response.status == 200
        time.sleep(3 * INTERVAL)  # three more probes, all broken: logged once
        broken = [line for line in endpoint.lines[start:] if f"path {FEDERATION}: broken" in line]
        assert len(broken) == 1, broken
    finally:
        coredns.corefile.write_text(old)
    wait_path(endpoint, 1, timeout=15 + SETTLE)
    assert endpoint.path_line().startswith(f"path {FEDERATION}: ok: cluster foo by option")
    assert sum(f"path {FEDERATION}: ok" in line for line in endpoint.lines[start:]) == 1


def test_a_server_that_names_another_cluster_is_broken(pki: Pki, kubeconfig: str, coredns: CoreDNS,
                                                      endpoint: Endpoint):
    """An endpoint that says it is bar, probing foo's cluster DNS (which tags its queries foo)."""
    wait_path(endpoint, 1, timeout=30)
    with Endpoint(pki, kubeconfig, coredns.port, f"127.0.0.1:{coredns.port}", cluster="bar") as bar:
        wait_path(bar, 0)
        assert bar.path_line() == f"path {FEDERATION}: broken: names cluster foo (by=option), this is bar"
        assert bar.samples("feddns_stubzone_path_cluster_info") == {
            (("by", "option"), ("cluster", "foo"), ("federation", FEDERATION)): 1.0}


class SilentServer:
    """A UDP socket on loopback that reads every datagram and answers none; counts them."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="silent DNS server", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sock.recv(4096)
            except TimeoutError:
                continue
            self.received += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def open_sockets(process: StubzoneProcess) -> int:
    """The sockets ``process`` holds open now."""
    assert process.proc is not None
    fds = Path(f"/proc/{process.proc.pid}/fd")
    return sum(1 for fd in fds.iterdir() if fd.exists() and fd.readlink().name.startswith("socket:"))


def test_a_server_that_never_answers_is_broken_and_probes_do_not_stack(pki: Pki, kubeconfig: str,
                                                                       coredns: CoreDNS, endpoint: Endpoint):
    silent = SilentServer()
    try:
        with Endpoint(pki, kubeconfig, coredns.port, f"127.0.0.1:{silent.port}") as probing:
            wait_path(probing, 0)
            assert probing.path_line() == (f"path {FEDERATION}: broken: no answer from 127.0.0.1:{silent.port} "
                                           f"within {INTERVAL:g} s")
            assert probing.health()[0] == 200
            first, sockets, began = silent.received, open_sockets(probing), time.monotonic()
            time.sleep(5 * INTERVAL)
            rounds = (time.monotonic() - began) / INTERVAL
            # one query per round, and no query left waiting: a round waits for its own
            # query's timeout before the next one begins
            assert silent.received - first <= rounds + 1, (silent.received - first, rounds)
            assert open_sockets(probing) <= sockets + 1
            assert sum(f"path {FEDERATION}: broken" in line for line in probing.lines) == 1
    finally:
        silent.close()


# -- --probe-service: the cluster DNS Service found through the API ---------------------------------

SELECTOR = "kube-system/k8s-app=kube-dns"
"""What the member chart renders for kubeadm, EKS, GKE, AKS and k3s (deploy/helm/feddns-member)."""
CLUSTER_IP = "10.0.0.10"


def dns_service(name: str = "kube-dns", cluster_ip: str = CLUSTER_IP, labels: dict[str, str] | None = None,
                ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A cluster DNS Service as kubeadm ships it (ports dns/UDP, dns-tcp, metrics)."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "kube-system", "labels": labels or {"k8s-app": "kube-dns"}},
            "spec": {"clusterIP": cluster_ip, "selector": {"k8s-app": "kube-dns"}, "ports": ports or [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}]}}


class PodEndpoint(Endpoint):
    """The endpoint with ``--probe-service``, run inside ``pod`` (its metrics reached through a forward)."""

    def __init__(self, pki: Pki, kubeconfig: str, coredns_port: int, pod: PodNetwork) -> None:
        super().__init__(pki, kubeconfig, coredns_port, SELECTOR, probe_flag="--probe-service")
        self.child = ChildProcess(pod.netns.command(self.args), ready=r"listening on https://127\.0\.0\.1:(\d+)",
                                  name="feddns stubzone (in a pod's network)")
        self.metrics_reached = pod.forwarder.add("127.0.0.1", self.metrics_port)

    def target_found(self) -> float | None:
        return self.samples("feddns_stubzone_path_target_found").get((("flag", "probe-service"),))


@pytest.fixture
def pod(kube_foo: KubeCluster, coredns: CoreDNS) -> Iterator[PodNetwork]:
    """A pod's network: the API server at its host address, 10.0.0.10:53 (UDP) reaching foo's CoreDNS."""
    network = PodNetwork()
    try:
        network.host_port(kube_foo.port)
        network.service(CLUSTER_IP, 53, ("127.0.0.1", coredns.port))
        yield network
    finally:
        network.close()


def test_probe_service_finds_the_cluster_dns_service_and_asks_its_cluster_ip(
        pki: Pki, kubeconfig: str, kube_foo: KubeCluster, coredns: CoreDNS, endpoint: Endpoint, pod: PodNetwork):
    """No Service yet: nothing probed, said once in the log, in path_target_found and /health. The Service
    appears: the endpoint asks its clusterIP, through CoreDNS, and the path is ok, tagged foo."""
    wait_path(endpoint, 1, timeout=30)
    with PodEndpoint(pki, kubeconfig, coredns.port, pod) as probing:
        wait_until(lambda: probing.target_found() == 0, timeout=SETTLE, interval=0.1, what="path_target_found 0")
        assert probing.health() == (200, f"ok\npath check: no target: Services {SELECTOR}: no Service matches\n")
        assert probing.path_ok() is None
        time.sleep(3 * INTERVAL)
        assert sum("path check: no target" in line for line in probing.lines) == 1
        kube_foo.apply(dns_service())
        try:
            wait_path(probing, 1)
            assert probing.target_found() == 1
            assert probing.path_line() == f"path {FEDERATION}: ok: cluster foo by option via {CLUSTER_IP}:53"
            probing.wait_for_log(f"path check asks Service kube-system/kube-dns at {CLUSTER_IP}:53")
        finally:
            kube_foo.delete("Service", "kube-system", "kube-dns")
        wait_until(lambda: probing.target_found() == 0, timeout=SETTLE, interval=0.1, what="path_target_found 0")
        assert probing.path_ok() is None  # nothing probed: no stale 1 for the alert to miss


PICKS = {
    "the UDP port named dns, not the first": (
        [dns_service(ports=[{"name": "metrics", "port": 9153, "protocol": "UDP"},
                            {"name": "dns", "port": 5353, "protocol": "UDP"}])],
        ("kube-dns", (CLUSTER_IP, 5353))),
    "headless and TCP-only Services passed over": (
        [dns_service("a-headless", "None"),
         dns_service("b-metrics", "10.0.0.11", ports=[{"name": "metrics", "port": 9153}]),
         dns_service("c-dns", "10.0.0.12")],
        ("c-dns", ("10.0.0.12", 53))),
    "the coredns chart's ports (RKE2): udp-53": (
        [dns_service("rke2-coredns-rke2-coredns", "10.43.0.10",
                     ports=[{"name": "udp-53", "port": 53, "protocol": "UDP"}, {"name": "tcp-53", "port": 53}])],
        ("rke2-coredns-rke2-coredns", ("10.43.0.10", 53))),
    "the first by name": ([dns_service("z", "10.0.0.13"), dns_service("m", "10.0.0.14")], ("m", ("10.0.0.14", 53))),
    "an IPv6 clusterIP": ([dns_service(cluster_ip="fd00:10::a")], ("kube-dns", ("fd00:10::a", 53))),
}


@pytest.mark.parametrize("case", list(PICKS))
def test_pick_address(case: str):
    services, expected = PICKS[case]
    assert pick_address(services) == expected


def test_pick_address_names_what_the_services_lack():
    with pytest.raises(TargetNotFound, match="no Service with a clusterIP and a UDP port among a, b"):
        pick_address([dns_service("b", "None"), dns_service("a", "10.0.0.15", ports=[{"name": "x", "port": 1}])])


def test_the_rendered_role_lets_the_endpoint_list_services_in_kube_system_only(
        kube_foo: KubeCluster, kubeconfig: str, tmp_path: Path):
    """The chart's Role (deploy/cluster-dns/coredns/stubzone.yaml, applied by install_member): the Service
    of kube-system found; another namespace's list refused (403), said as such, no address kept."""
    install_member(kube_foo)
    configuration = client_configuration(Path(kubeconfig), None)
    kube_foo.apply(dns_service())
    try:
        target = ServiceTarget(configuration, "kube-system", "k8s-app=kube-dns", 5)
        elsewhere = ServiceTarget(configuration, "openshift-dns", "dns.operator.openshift.io/owning-dns=default", 5)
        try:
            assert asyncio.run(target.find()) == (CLUSTER_IP, 53)
            with pytest.raises(TargetNotFound, match=r"listing Services openshift-dns/.*: the API server answered "
                                                      r"HTTP 403 Forbidden"):
                asyncio.run(elsewhere.find())
        finally:
            target.close()
            elsewhere.close()
        other, made = kubeconfig_with_rules(kube_foo, tmp_path, "kube-system", [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}])
        try:
            without = ServiceTarget(client_configuration(Path(other), None), "kube-system", "k8s-app=kube-dns", 5)
            try:
                with pytest.raises(TargetNotFound, match="HTTP 403 Forbidden"):
                    asyncio.run(without.find())
            finally:
                without.close()
        finally:
            delete_all(kube_foo, made)
    finally:
        kube_foo.delete("Service", "kube-system", "kube-dns")
