"""How fast a rolling update of many Services reaches `feddns serve`'s answers, beside CoreDNS's.

Starts the real parts on loopback: a kube-apiserver (one member cluster, foo, with an etcd of
its own, as the tests run it), a second etcd for the federation, `feddns controller` watching
foo (as deployed: log level info), `feddns serve` reading the federation's etcd, and a real
CoreDNS whose `kubernetes` plugin reads the same API server: the cluster's own DNS, what a
user has without feddns.

It creates --services headless federated Services (ns0..ns9/svc0..) with one ready pod each,
writing their EndpointSlices as the EndpointSlice controller would (no kubelet or
controller-manager runs), and waits until both serve (`svcN.nsM.myfederation.svc.federation.`,
asked as foo: EDNS option 65245) and CoreDNS (`svcN.nsM.svc.cluster.local.`) answer every one
with its pod. Headless, because a pod IP is what both answer (docs/reference.md section 1:
serve answers a headless shard's ready endpoints to its own cluster).

Then --rounds rolling updates over all of them, --rate Services a second: each Service's pod
is replaced as a Deployment with maxSurge 1 does it, by three EndpointSlice writes (``PUT``s
over one kept-alive HTTPS connection, as the EndpointSlice controller updates a slice), spaced
--step seconds apart, several Services in flight at once:

1. surge: the new pod is ready beside the old one; the answer becomes {old, new};
2. old pod terminating (ready and serving false); the answer becomes {new};
3. old pod gone; no answer changes (the controller writes nothing).

Changes 1 and 2 are timed, each from the return of its API write to:

- the controller's etcd write: a watch on the federation's prefix (etcd's JSON gateway)
  timestamps each event; the first event whose record holds exactly the new set of
  endpoints;
- serve's answer holding exactly the new set, and CoreDNS's: a poller asks both, one after
  the other, every --poll-ms for each change still pending.

Prints, in milliseconds, the median, 95th and 99th percentiles, the worst and the count of
each stage (API -> etcd, etcd -> serve, API -> serve: feddns in all; API -> CoreDNS), and the
ratio of feddns's API -> serve to CoreDNS's at the median and the 99th percentile, with the
load average before and after. A change can come before its API write returns (the watch
events race the write's reply), so a stage can be slightly negative. The poller's period
bounds the answer stages' resolution (both servers alike).

Usage: python bench/rolling_update.py [--services 500] [--rate 50] [--rounds 1] [--step 0.2] [--poll-ms 0.5]
"""

import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import dns.edns  # noqa: E402
import dns.exception  # noqa: E402
import dns.message  # noqa: E402
import yaml  # noqa: E402

from harness.controller import ControllerProcess  # noqa: E402
from harness.coredns import CoreDNS  # noqa: E402
from harness.etcd import EtcdServer  # noqa: E402
from harness.kubecluster import FIELD_MANAGER, KubeCluster  # noqa: E402
from harness.objects import service  # noqa: E402
from harness.ports import wait_until  # noqa: E402
from harness.serve import CLUSTER_OPTION, ServeProcess  # noqa: E402

FEDERATION = "myfederation"
CLUSTER = "foo"
LABEL = {"federation.feddns.io/name": FEDERATION}
NAMESPACES = 10
TIMEOUT = 30.0
"""Seconds a change may take to show in both answers before it is counted as lost."""


def names(i: int) -> tuple[str, str]:
    """Namespace and name of the i-th Service."""
    return f"ns{i % NAMESPACES}", f"svc{i}"


def pod_ip(i: int, generation: int) -> str:
    """The address of the i-th Service's pod of ``generation`` (a new one each round)."""
    return f"10.{100 + generation % 150}.{i // 250 % 250}.{i % 250 + 1}"


def slice_of(i: int, endpoints: list[tuple[str, bool]]) -> dict[str, Any]:
    """The EndpointSlice of the i-th Service with ``endpoints`` (address, ready), as the
    EndpointSlice controller writes it: a not-ready endpoint is a terminating pod."""
    namespace, name = names(i)
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": namespace, "name": f"{name}-abcde",
                     "labels": {"kubernetes.io/service-name": name, "service.kubernetes.io/headless": "",
                                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "targetRef": {"kind": "Pod", "namespace": namespace,
                                                             "name": f"{name}-{address.replace('.', '-')}"},
                       "conditions": {"ready": ready, "serving": ready, "terminating": not ready}}
                      for address, ready in endpoints],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
    }


class ApiWriter:
    """Writes to ``kube`` over one kept-alive HTTPS connection, as a controller's
    client keeps one (``KubeCluster.apply`` opens a connection a request)."""

    def __init__(self, kube: KubeCluster) -> None:
        self.kube = kube
        self.context = ssl.create_default_context(cadata=kube.ca_pem)
        self.connection: http.client.HTTPSConnection | None = None

    def apply(self, obj: dict[str, Any]) -> None:
        """Create or update ``obj`` by server-side apply (force, field manager ``feddns-tests``)."""
        self._send("PATCH", obj, f"?fieldManager={FIELD_MANAGER}&force=true", "application/apply-patch+yaml")

    def update(self, obj: dict[str, Any]) -> None:
        """Replace ``obj`` (``PUT``, no ``resourceVersion``: unconditional), as the EndpointSlice
        controller updates a slice."""
        self._send("PUT", obj, "", "application/json")

    def _send(self, method: str, obj: dict[str, Any], query: str, content_type: str) -> None:
        meta = obj["metadata"]
        group = "api/v1" if obj["apiVersion"] == "v1" else f"apis/{obj['apiVersion']}"
        plural = obj["kind"].lower() + "s"
        path = f"/{group}/namespaces/{meta['namespace']}/{plural}/{meta['name']}{query}"
        body = json.dumps(obj).encode()
        headers = {"Authorization": f"Bearer {self.kube.admin_token}", "Accept": "application/json",
                   "Content-Type": content_type}
        for attempt in (1, 2):
            if self.connection is None:
                self.connection = http.client.HTTPSConnection("127.0.0.1", self.kube.port, context=self.context,
                                                              timeout=30)
            try:
                self.connection.request(method, path, body, headers)
                reply = self.connection.getresponse()
                text = reply.read()
            except (OSError, http.client.HTTPException):
                self.connection.close()
                self.connection = None
                if attempt == 2:
                    raise
                continue
            if reply.status >= 300:
                raise RuntimeError(f"{method} {path}: HTTP {reply.status}: {text[:300]!r}")
            return


class EtcdWatch:
    """A watch on ``prefix`` through etcd's JSON gateway (``POST /v3/watch``): ``seen[(key,
    addresses)]`` is the ``perf_counter`` time of the first event that put that key with exactly
    those endpoint addresses."""

    def __init__(self, url: str, prefix: str) -> None:
        parts = urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)
        end = bytearray(prefix.encode())
        end[-1] += 1
        self.connection.request("POST", "/v3/watch", json.dumps({"create_request": {
            "key": base64.b64encode(prefix.encode()).decode(), "range_end": base64.b64encode(bytes(end)).decode()}}),
            {"Content-Type": "application/json"})
        self.response = self.connection.getresponse()
        self.seen: dict[tuple[str, frozenset[str]], float] = {}
        self.thread = threading.Thread(target=self._run, name="etcd watch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for line in self.response:
                now = time.perf_counter()
                for event in json.loads(line).get("result", {}).get("events", []):
                    kv = event["kv"]
                    if event.get("type") == "DELETE" or "value" not in kv:
                        continue
                    record = json.loads(base64.b64decode(kv["value"]))
                    addresses = frozenset(e["ip"] for e in record.get("endpoints") or ())
                    self.seen.setdefault((base64.b64decode(kv["key"]).decode(), addresses), now)
        except (OSError, ValueError, http.client.HTTPException):
            pass  # closed at the end of the run

    def close(self) -> None:
        """End the watch: shut the socket down first, so the reader thread's blocked read returns
        (closing the response alone would wait for the lock that read holds)."""
        if self.connection.sock is not None:
            self.connection.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(5)
        self.connection.close()


@dataclass
class Change:
    """One timed change of the i-th Service's answer to ``addresses``; times from ``perf_counter``."""

    i: int
    addresses: frozenset[str]
    written: float = 0.0
    serve: float | None = None
    coredns: float | None = None
    overtaken: bool = False
    registered: float = field(default_factory=time.perf_counter)


class Asker:
    """Asks one server over UDP on a connected socket; ``addresses(qname)`` is the set of A
    addresses answered (empty on a timeout)."""

    def __init__(self, port: int, options: list[dns.edns.Option] | None = None) -> None:
        self.options = options
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(("127.0.0.1", port))
        self.sock.settimeout(1.0)

    def addresses(self, qname: str) -> frozenset[str]:
        query = dns.message.make_query(qname, "A", use_edns=0 if self.options else False,
                                       options=self.options or [])
        self.sock.send(query.to_wire())
        try:
            while True:
                reply = dns.message.from_wire(self.sock.recv(65535))
                if reply.id == query.id:
                    break
        except (TimeoutError, dns.exception.DNSException):
            return frozenset()
        return frozenset(rd.address for rrset in reply.answer if rrset.rdtype == 1 for rd in rrset)

    def close(self) -> None:
        self.sock.close()


def serve_qname(i: int) -> str:
    """What a pod of cluster foo asks serve for the i-th Service (docs/reference.md section 1)."""
    namespace, name = names(i)
    return f"{name}.{namespace}.{FEDERATION}.svc.federation."


def coredns_qname(i: int) -> str:
    """What a pod asks its cluster's DNS for the i-th Service (Kubernetes DNS spec, 2.4.1)."""
    namespace, name = names(i)
    return f"{name}.{namespace}.svc.cluster.local."


class Poller:
    """Asks serve and CoreDNS, every ``period`` seconds, for each pending change until both show it."""

    def __init__(self, serve: Asker, coredns: Asker, period: float) -> None:
        self.serve, self.coredns, self.period = serve, coredns, period
        self.pending: list[Change] = []
        self.lock = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self.thread.start()

    def add(self, change: Change) -> None:
        with self.lock:
            for other in self.pending:  # an earlier change of the same Service not shown yet: never will be
                if other.i == change.i and (other.serve is None or other.coredns is None):
                    other.overtaken = True
            self.pending = [c for c in self.pending if c.i != change.i] + [change]
            self.lock.notify()

    def _run(self) -> None:
        while True:
            with self.lock:
                while not self.pending and not self.stopping:
                    self.lock.wait()
                if self.stopping:
                    return
                batch = list(self.pending)
            for change in batch:
                if change.serve is None and self.serve.addresses(serve_qname(change.i)) == change.addresses:
                    change.serve = time.perf_counter()
                if change.coredns is None and self.coredns.addresses(coredns_qname(change.i)) == change.addresses:
                    change.coredns = time.perf_counter()
            now = time.perf_counter()
            with self.lock:
                self.pending = [c for c in self.pending if (c.serve is None or c.coredns is None)
                                and not c.overtaken and now - c.registered < TIMEOUT]
            time.sleep(self.period)

    def drain(self) -> None:
        """Wait until no change is pending (each shown, overtaken or timed out), then stop."""
        wait_until(lambda: not self.pending, timeout=TIMEOUT + 10, interval=0.05, what="every change shown")
        with self.lock:
            self.stopping = True
            self.lock.notify()
        self.thread.join(5)


def roll(writer: ApiWriter, poller: Poller, services: int, rate: float, step: float,
         generation: int) -> tuple[list[Change], float]:
    """One rolling update over every Service (old pod ``generation``, new ``generation + 1``);
    the changes timed and the rate achieved (Services a second)."""
    lag = max(1, round(step * rate))  # slots between a Service's writes
    changes: list[Change] = []
    began = time.perf_counter()
    for slot in range(services + 2 * lag):
        due = began + slot / rate
        time.sleep(max(0.0, due - time.perf_counter()))
        for stage, i in ((1, slot), (2, slot - lag), (3, slot - 2 * lag)):
            if not 0 <= i < services:
                continue
            old, new = pod_ip(i, generation), pod_ip(i, generation + 1)
            endpoints = {1: [(old, True), (new, True)], 2: [(new, True), (old, False)], 3: [(new, True)]}[stage]
            change = None
            if stage < 3:
                change = Change(i, frozenset(a for a, ready in endpoints if ready))
                poller.add(change)
                changes.append(change)
            writer.update(slice_of(i, endpoints))
            if change is not None:
                change.written = time.perf_counter()
    return changes, (services + 2 * lag - 1) / (time.perf_counter() - began)


def figures(values: list[float]) -> str:
    """``n``, median, p95, p99 and worst of ``values`` (ms), as one row."""
    if not values:
        return f"{0:>6}" + f"{'-':>9}" * 4
    cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return f"{len(values):>6}" + "".join(f"{v:>9.1f}" for v in (statistics.median(values), cuts[94], cuts[98],
                                                                  max(values)))


def percentile(values: list[float], k: int) -> float:
    """The k-th percentile of ``values`` (the value itself when there is one)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[k - 1]


def report(changes: list[Change], watch: EtcdWatch, rates: list[float], args: argparse.Namespace,
           load_before: float) -> None:
    timed = [c for c in changes if not c.overtaken]
    lost = [c for c in timed if c.serve is None or c.coredns is None]
    shown = [c for c in timed if c.serve is not None and c.coredns is not None]
    etcd = {id(c): watch.seen.get((f"/{FEDERATION}/{names(c.i)[0]}/{names(c.i)[1]}/{CLUSTER}", c.addresses))
            for c in shown}
    ms = 1000.0
    stages = {
        "API write -> controller's etcd write": [(etcd[id(c)] - c.written) * ms for c in shown if etcd[id(c)]],
        "etcd write -> serve answer": [(c.serve - etcd[id(c)]) * ms for c in shown  # type: ignore[operator]
                                       if etcd[id(c)]],
        "API write -> serve answer (feddns)": [(c.serve - c.written) * ms for c in shown],  # type: ignore[operator]
        "API write -> CoreDNS answer": [(c.coredns - c.written) * ms for c in shown],  # type: ignore[operator]
    }
    print(f"rolling update: {args.services} headless Services, {args.rounds} round(s) at {args.rate:g} Services/s "
          f"(slowest round {min(rates):.1f}/s), step {args.step:g} s, poll {args.poll_ms:g} ms")
    overtaken = [c for c in changes if c.overtaken]
    print(f"changes timed {len(shown)}, overtaken {len(overtaken)}, lost {len(lost)}; "
          f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    if overtaken:  # the next write of the Service came first: slower than --step, left out of the figures
        print(f"overtaken before serve showed them {sum(c.serve is None for c in overtaken)}, "
              f"before CoreDNS did {sum(c.coredns is None for c in overtaken)}")
    print(f"{'stage (ms)':40}{'n':>6}{'median':>9}{'p95':>9}{'p99':>9}{'max':>9}")
    for name, values in stages.items():
        print(f"{name:40}{figures(values)}")
    feddns, coredns = stages["API write -> serve answer (feddns)"], stages["API write -> CoreDNS answer"]
    if feddns and coredns:
        median = statistics.median(feddns) / statistics.median(coredns)
        print(f"feddns / CoreDNS (API write -> answer): median {median:.2f}, "
              f"p99 {percentile(feddns, 99) / percentile(coredns, 99):.2f}")


def setup(kube: KubeCluster, writer: ApiWriter, services: int) -> None:
    """The federated headless Services, each with its first pod ready."""
    for n in range(NAMESPACES):
        kube.ensure_namespace(f"ns{n}")
    for i in range(services):
        namespace, name = names(i)
        obj = service(namespace, name, labels=LABEL, cluster_ip="None")
        del obj["status"]
        writer.apply(obj)
        writer.apply(slice_of(i, [(pod_ip(i, 0), True)]))


def start(args: argparse.Namespace, directory: Path, started: list[Any]) -> tuple[ApiWriter, EtcdWatch, Asker, Asker]:
    """Start every part (each appended to ``started`` as it runs) and write the Services; returns
    once serve and CoreDNS answer every one with its first pod."""
    kube_etcd, etcd = EtcdServer(name="kube"), EtcdServer(name="federation")
    for server in (kube_etcd, etcd):
        server.start()
        started.append(server)
    kube = KubeCluster(CLUSTER, kube_etcd.url).start()
    started.append(kube)
    writer = ApiWriter(kube)
    began = time.perf_counter()
    setup(kube, writer, args.services)
    print(f"{args.services} Services and EndpointSlices written in {time.perf_counter() - began:.1f} s")
    config = {"federation": FEDERATION, "etcd": {"endpoints": [etcd.url], "prefix": ""},
              "clusters": [{"name": CLUSTER, "kubeconfig": kube.kubeconfig, "zone": "zone-a", "region": "region"}]}
    (directory / "controller.yaml").write_text(yaml.safe_dump(config))
    watch = EtcdWatch(etcd.url, f"/{FEDERATION}/")
    started.append(watch)
    started.append(ControllerProcess(directory / "controller.yaml", directory / "controller.log").start())
    serve = ServeProcess(etcd_url=etcd.url)
    serve.start()
    started.append(serve)
    coredns = CoreDNS(kube, project=False).start()
    started.append(coredns)
    ask_serve = Asker(serve.port, [dns.edns.GenericOption(CLUSTER_OPTION, CLUSTER.encode())])
    ask_coredns = Asker(coredns.port)
    for i in range(args.services):
        first = frozenset([pod_ip(i, 0)])
        wait_until(lambda i=i, first=first: ask_serve.addresses(serve_qname(i)) == first
                   and ask_coredns.addresses(coredns_qname(i)) == first,
                   timeout=300, interval=0.05, what=f"serve and CoreDNS answering svc{i}")
    print(f"serve and CoreDNS answer every Service {time.perf_counter() - began:.1f} s after the first write")
    return writer, watch, ask_serve, ask_coredns


def stop(started: list[Any]) -> None:
    """Stop what ``start`` started, the last first."""
    for part in reversed(started):
        if isinstance(part, ControllerProcess):
            part.terminate()
        elif isinstance(part, KubeCluster | CoreDNS):
            part.close()
        elif isinstance(part, EtcdServer):
            part.destroy()
        elif isinstance(part, EtcdWatch):
            part.close()
        else:
            part.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=500)
    parser.add_argument("--rate", type=float, default=50.0, help="Services a second whose pod is replaced")
    parser.add_argument("--rounds", type=int, default=1, help="rolling updates over every Service")
    parser.add_argument("--step", type=float, default=0.2, help="seconds between a Service's three writes")
    parser.add_argument("--poll-ms", type=float, default=0.5, help="milliseconds between the poller's rounds")
    args = parser.parse_args()
    if args.services < 1 or args.rate <= 0 or args.rounds < 1 or args.step < 0 or args.poll_ms < 0:
        parser.error("--services, --rate and --rounds must be positive, --step and --poll-ms not negative")
    sys.setswitchinterval(0.0005)  # the writer, the watch and the poller share this process
    directory = Path(tempfile.mkdtemp(prefix="feddns-rolling-"))
    started: list[Any] = []
    try:
        writer, watch, ask_serve, ask_coredns = start(args, directory, started)
        load_before = os.getloadavg()[0]
        poller = Poller(ask_serve, ask_coredns, args.poll_ms / 1000)
        changes: list[Change] = []
        rates = []
        for generation in range(args.rounds):
            done, rate = roll(writer, poller, args.services, args.rate, args.step, generation)
            changes += done
            rates.append(rate)
        poller.drain()
        report(changes, watch, rates, args, load_before)
    finally:
        stop(started)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
