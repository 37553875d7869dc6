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

Usage: python bench/change_latency.py [--changes 200] [--services 10000]
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dns.edns
import dns.exception
import dns.message
import dns.query

from tests.support.etcd import EtcdServer  # the test suite's etcd runner
from tests.support.ports import wait_until
from tests.support.serve import ServeProcess

QNAME = "myservice.myns.myfederation.svc.federation."


def fill(etcd: EtcdServer, services: int) -> None:
    etcd.put_many({f"/myfederation/filler/svc{i}/foo": {"clusterIP": filler_ip(i), "externalIP": "192.0.2.1"}
                   for i in range(services)})


def filler_ip(i: int) -> str:
    """The i-th filler service's clusterIP, one per service: 250 to a /24, 62,500 to a /16."""
    return f"10.{1 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}"


def answers(server: ServeProcess) -> bool:
    try:
        return bool(server.addresses(QNAME))
    except dns.exception.Timeout:  # busy loading
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--services", type=int, default=100000)
    args = parser.parse_args()
    etcd = EtcdServer()
    etcd.start()
    try:
        etcd.put("/myfederation/myns/myservice/foo", {"clusterIP": "10.0.3.64", "externalIP": "104.32.64.128"})
        etcd.put("/myfederation/myns/myservice/bar", {"clusterIP": "10.0.4.20", "externalIP": "104.32.64.130"})
        fill(etcd, args.services)
        started = time.perf_counter()
        with ServeProcess(etcd_url=etcd.url) as server:
            wait_until(lambda: answers(server), timeout=120, interval=0.05, what="first load")
            loaded = time.perf_counter() - started
            query = dns.message.make_query(QNAME, "A", use_edns=0, options=[dns.edns.GenericOption(65245, b"foo")])
            latencies = measure(server, query, args.changes, lambda n: etcd.put(
                "/myfederation/myns/myservice/bar",
                json.dumps({"clusterIP": "10.0.4.20", "externalIP": f"104.32.{64 + n // 250}.{n % 250 + 1}"})),
                lambda n, got: f"104.32.{64 + n // 250}.{n % 250 + 1}" in got)
            both = measure(server, query, args.changes, lambda n: etcd.put_many(both_shards(n)),
                           lambda n, got: f"104.33.{n // 250}.{n % 250 + 1}" in got)
            policy = measure(server, query, args.changes, lambda n: etcd.put_many(failover(n)),
                             lambda n, got: got[:1] == (["10.0.3.64"] if n % 2 else ["104.32.64.130"]))
    finally:
        etcd.destroy()
    print(f"start to first answer with {args.services + 2} keys in etcd: {loaded:.2f} s")
    print(f"etcd put -> answer changed, {args.changes} changes, {args.services} filler services:")
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


def measure(server: ServeProcess, query: dns.message.Message, changes: int, change, shows) -> list[float]:
    """Milliseconds from ``change(n)`` to an answer for which ``shows(n, addresses)`` holds, n in range(changes)."""
    latencies = []
    for n in range(changes):
        start = time.perf_counter()
        change(n)
        while True:
            reply = dns.query.udp(query, "127.0.0.1", port=server.port, timeout=1)
            if shows(n, [rd.address for rrset in reply.answer for rd in rrset]):
                break
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


if __name__ == "__main__":
    main()
