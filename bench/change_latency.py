"""How long an etcd change takes to show in `feddns serve` answers.

Starts a real etcd (Debian's `etcd-server`) and `feddns serve` on loopback, loads
the design document's records plus --services filler services, then N times: put a
new externalIP for one shard and query over UDP in a tight loop until the answer
carries it; then N times: put new externalIPs for both shards of the service in one etcd
transaction (the size of write a policy change is); then N times: flip the failover order
of the service's two shards (one etcd transaction, the controller's way of writing a
policy change) and query until the answer's first address follows. Prints the median,
the 95th and 99th percentiles and the worst latency of each in milliseconds: a policy
change takes the path of any record change.

With --workers N, `feddns serve --workers N`: each change is timed until every worker
answers it. The queries go out on --sockets fixed client sockets (default 16 with workers,
1 without), and the kernel gives each socket to one worker by its port, so each worker
gets some of them (with 16 sockets and 2 workers, all go to one worker once in 32,768
runs); a change counts as shown once the answer on every socket shows it. The first change
is made once every value of the load has been read (docs/serve.md, "Loading").

Usage: python bench/change_latency.py [--changes 200] [--services 10000] [--workers 1] [--sockets 1]
"""

import argparse
import json
import socket
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dns.edns
import dns.exception
import dns.message

from harness.etcd import EtcdServer  # the test suite's etcd runner
from harness.ports import wait_until
from harness.serve import ServeProcess

QNAME = "myservice.myns.myfederation.svc.federation."


def fill(etcd: EtcdServer, services: int) -> None:
    etcd.put_many({f"/myfederation/filler/svc{i}/foo": {"clusterIP": filler_ip(i), "externalIP": "192.0.2.1"}
                   for i in range(services)})


def filler_ip(i: int) -> str:
    """The i-th filler service's clusterIP, one per service: 250 to a /24, 62,500 to a /16."""
    return f"10.{1 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--services", type=int, default=100000)
    parser.add_argument("--workers", type=int, default=1, help="feddns serve --workers")
    parser.add_argument("--sockets", type=int, help="client sockets asking (default 16 with --workers, else 1)")
    args = parser.parse_args()
    sockets = args.sockets or (16 if args.workers > 1 else 1)
    etcd = EtcdServer()
    etcd.start()
    try:
        etcd.put("/myfederation/myns/myservice/foo", {"clusterIP": "10.0.3.64", "externalIP": "104.32.64.128"})
        etcd.put("/myfederation/myns/myservice/bar", {"clusterIP": "10.0.4.20", "externalIP": "104.32.64.130"})
        fill(etcd, args.services)
        started = time.perf_counter()
        with ServeProcess(etcd_url=etcd.url, workers=args.workers) as server:
            query = dns.message.make_query(QNAME, "A", use_edns=0, options=[dns.edns.GenericOption(65245, b"foo")])
            ask = Askers(server.port, query, sockets)
            wait_until(lambda: all(ask.addresses(sock) for sock in ask.sockets), timeout=120, interval=0.05,
                       what="first load (of every worker)")
            loaded = time.perf_counter() - started
            # The first change waits until every value is read (the read between queries after a
            # load, or the read before the workers are forked), so that no change meets that read.
            wait_until(lambda: server.log.count("every record value read") >= args.workers
                       or "every value parsed: forking the workers" in server.log,
                       timeout=120, interval=0.05, what="every value read")
            latencies = measure(ask, args.changes, lambda n: etcd.put(
                "/myfederation/myns/myservice/bar",
                json.dumps({"clusterIP": "10.0.4.20", "externalIP": f"104.32.{64 + n // 250}.{n % 250 + 1}"})),
                lambda n, got: f"104.32.{64 + n // 250}.{n % 250 + 1}" in got)
            both = measure(ask, args.changes, lambda n: etcd.put_many(both_shards(n)),
                           lambda n, got: f"104.33.{n // 250}.{n % 250 + 1}" in got)
            policy = measure(ask, args.changes, lambda n: etcd.put_many(failover(n)),
                             lambda n, got: got[:1] == (["10.0.3.64"] if n % 2 else ["104.32.64.130"]))
            ask.close()
    finally:
        etcd.destroy()
    print(f"start to first answer with {args.services + 2} keys in etcd: {loaded:.2f} s")
    print(f"etcd put -> answer changed, {args.changes} changes, {args.services} filler services, "
          f"--workers {args.workers}, {sockets} client socket(s):")
    for what, figures in (("externalIP put", latencies), ("both shards, one txn", both),
                          ("failover order flipped", policy)):
        cuts = statistics.quantiles(figures, n=100, method="inclusive")  # cuts[k - 1] is the k-th percentile
        print(f"{what:24} median {statistics.median(figures):.1f} ms, p95 {cuts[94]:.1f} ms, "
              f"p99 {cuts[98]:.1f} ms, worst {max(figures):.1f} ms")


def both_shards(n: int) -> dict[str, dict[str, object]]:
    """Both shards of myservice with new externalIPs (104.33.x.y for bar, 104.34.x.y for foo)."""
    return {f"/myfederation/myns/myservice/{cluster}":
            {"clusterIP": ip, "externalIP": f"{net}.{n // 250}.{n % 250 + 1}"}
            for cluster, ip, net in (("foo", "10.0.3.64", "104.34"), ("bar", "10.0.4.20", "104.33"))}


def failover(n: int) -> dict[str, dict[str, object]]:
    """Both shards of myservice with the failover order bar,foo (n even) or foo,bar (n odd)."""
    order = ["foo", "bar"] if n % 2 else ["bar", "foo"]
    return {f"/myfederation/myns/myservice/{cluster}": {"clusterIP": ip, "externalIP": ext, "policy": "failover",
                                                       "failoverOrder": order}
            for cluster, ip, ext in (("foo", "10.0.3.64", "104.32.64.128"), ("bar", "10.0.4.20", "104.32.64.130"))}


class Askers:
    """``count`` UDP sockets connected to the server, each asking ``query``; with workers, the
    kernel gives each socket to one worker for good (SO_REUSEPORT hashes its port)."""

    def __init__(self, port: int, query: dns.message.Message, count: int) -> None:
        self.wire = query.to_wire()
        self.question_end = 12 + len(query.question[0].name.to_wire()) + 4
        self.sockets = []
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.connect(("127.0.0.1", port))
            sock.settimeout(1)
            self.sockets.append(sock)

    def addresses(self, sock: socket.socket) -> list[str]:
        """Ask once on ``sock``; the A records of the answer, in order (read by hand: a few
        microseconds where dnspython takes a hundred, so the loop's step stays small)."""
        sock.send(self.wire)
        while True:
            try:
                reply = sock.recv(65535)
                break
            except TimeoutError:
                sock.send(self.wire)
        count = int.from_bytes(reply[6:8], "big")
        offset, out = self.question_end, []
        for _ in range(count):
            while reply[offset] and reply[offset] < 0xC0:  # an owner name written out (ours are pointers)
                offset += reply[offset] + 1
            offset += 2 if reply[offset] else 1
            rtype, _, _, length = struct.unpack_from("!HHIH", reply, offset)
            offset += 10
            if rtype == 1:
                out.append(socket.inet_ntoa(reply[offset : offset + length]))
            offset += length
        return out

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def measure(ask: Askers, changes: int, change, shows) -> list[float]:
    """Milliseconds from ``change(n)`` to the moment the answer on every socket satisfies
    ``shows(n, addresses)``, n in range(changes)."""
    latencies = []
    for n in range(changes):
        start = time.perf_counter()
        change(n)
        pending = list(ask.sockets)
        while pending:
            pending = [sock for sock in pending if not shows(n, ask.addresses(sock))]
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


if __name__ == "__main__":
    main()
