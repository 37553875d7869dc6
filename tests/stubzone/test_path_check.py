"""The path check (docs/stubzone.md, "The path check"): ``feddns stubzone --probe-server`` asks
``_whoami.F.svc.federation.`` TXT through the cluster DNS and says whether Federated-DNS names
this cluster, in ``feddns_stubzone_path_ok`` and the ``/health`` body.

The chain is real: ``feddns serve`` on a records file, a real CoreDNS whose Corefile imports
the server blocks of ConfigMap ``kube-system/coredns-feddns`` (harness/coredns.py), that
ConfigMap written by a real ``feddns stubzone --backend coredns --cluster foo`` in a real
kube-apiserver. A platform's reconciler is played by rewriting the Corefile without its import
line, as the reconcilers of managed clusters do; CoreDNS's ``reload`` drops the forwarding.
"""

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.chain import install_member
from harness.coredns import CoreDNS
from harness.kubecluster import KubeCluster
from harness.ports import free_port, wait_until
from harness.serve import ServeProcess, write_records
from harness.stubzone import Pki, StubzoneProcess

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

    def __init__(self, pki: Pki, kubeconfig: str, coredns_port: int, probe_server: str, cluster: str = "foo") -> None:
        self.metrics_port = free_port()
        super().__init__(pki, "--backend", "coredns", "--cluster", cluster, "--kubeconfig", kubeconfig,
                         "--coredns-port", str(coredns_port), "--metrics", f"127.0.0.1:{self.metrics_port}",
                         "--probe-server", probe_server, "--probe-interval", str(INTERVAL),
                         "--allow-loopback-nameservers")  # Federated-DNS is on 127.0.0.1

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """The samples of ``name`` by their labels (sorted ``(label, value)`` pairs)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return {tuple(sorted(sample.labels.items())): sample.value
                for family in text_string_to_metric_families(text) for sample in family.samples
                if sample.name == name}

    def path_ok(self) -> float | None:
        """``feddns_stubzone_path_ok{federation="pathcheck"}``, ``None`` before the first probe."""
        return self.samples("feddns_stubzone_path_ok").get((("federation", FEDERATION),))

    def health(self) -> tuple[int, str]:
        """The status and body of ``GET /health`` on the metrics port."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/health", timeout=10) as response:
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
