"""CPU per query of each answer policy, in-process: what the transports run (over UDP the
cache's handler, `UdpServer.datagram_received`; over TCP `Responder.respond`), timed with
`time.process_time` over many calls, beside the locality answer.

Three paths per policy, for cluster foo asking a service with 3 shards (foo, bar in one
region, baz far; the weighted ones with weights 3, 2, 1), plus a headless service of 3
shards x 10 endpoints (foo and baz routable):

* reply cache: the same UDP packet again (what a resolver's repeated question costs; a
  weighted answer is one of its finished replies, picked at random);
* answer cache: the same question over TCP (the records spliced into a new reply; a
  weighted answer's order drawn per query);
* cold: the cache emptied before every query (the answer built, and for weighted answers
  the table of 1,024 orders).

Usage: python bench/serve_policies.py [--calls 200000]
"""

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dns.edns
import dns.message

from feddns.dns.index import Index
from feddns.dns.responder import AnswerSettings, Responder
from feddns.dns.transport import UdpServer
from feddns.keys import Layout
from feddns.store import Feed
from feddns.store.file import read_records

ZONE = "federation."
CLUSTERS = {"foo": ("z1", "r1", "routable"), "bar": ("z2", "r1", "isolated"), "baz": ("z3", "r2", "routable")}
POLICIES = {
    "locality": "",
    "failover": ", policy: failover, failoverOrder: [baz, bar]",
    "weighted": ", policy: weighted, weight: {weight}",
    "locality-weighted": ", policy: locality-weighted, weight: {weight}",
}
WEIGHTS = {"foo": 3, "bar": 2, "baz": 1}


def records() -> str:
    lines = [f"/f/_clusters/{c}: {{zone: {z}, region: {r}, podNetwork: {n}}}" for c, (z, r, n) in CLUSTERS.items()]
    for s, (name, fields) in enumerate(POLICIES.items()):
        for n, cluster in enumerate(CLUSTERS, 1):
            extra = fields.format(weight=WEIGHTS[cluster])
            lines.append(f"/f/ns/{name}/{cluster}: {{clusterIP: 10.{s}.0.{n}, externalIP: 198.{s}.0.{n}{extra}}}")
    for n, cluster in enumerate(CLUSTERS, 1):
        endpoints = ", ".join(f"{{ip: 10.9{n}.0.{i + 1}, hostname: web-{i}}}" for i in range(10))
        lines.append(f"/f/ns/headless/{cluster}: {{endpoints: [{endpoints}], ready: 10}}")
    return "\n".join(lines) + "\n"


def responder(path: Path) -> Responder:
    layout = Layout()
    index = Index(layout)
    server = Responder(AnswerSettings())
    Feed(index, server).replace(read_records(path, layout))
    return server


class _Sink:
    """A ``sendto`` that drops what is sent."""

    def sendto(self, data: bytes, addr: object) -> None:
        pass


def answerer(server: Responder, tcp: bool) -> Callable[[bytes], object]:
    """The function a transport runs for one packet: over UDP the cache's handler, over TCP
    ``Responder.respond``."""
    if tcp:
        return lambda packet: server.respond(packet, "127.0.0.1", True)
    receive, addr = UdpServer(server).handler(_Sink().sendto), ("127.0.0.1", 40000)
    return lambda packet: receive(packet, addr)


def per_call(server: Responder, packet: bytes, tcp: bool, calls: int, cold: bool) -> float:
    """CPU microseconds per query."""
    answer, clear = answerer(server, tcp), server.cache.clear
    for _ in range(3):  # warm: the answer, the doorkeeper, the reply
        answer(packet)
    started = time.process_time()
    if cold:
        for _ in range(calls):
            clear()
            answer(packet)
    else:
        for _ in range(calls):
            answer(packet)
    return (time.process_time() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="feddns-bench-") as tmp:
        path = Path(tmp) / "records.yaml"
        path.write_text(records())
        server = responder(path)
    rows = {}
    for name in [*POLICIES, "headless"]:
        query = dns.message.make_query(f"{name}.ns.f.svc.{ZONE}", "A", use_edns=0,
                                       options=[dns.edns.GenericOption(65245, b"foo")])
        packet = query.to_wire()
        rows[name] = (per_call(server, packet, False, args.calls, False),
                      per_call(server, packet, True, args.calls, False),
                      per_call(server, packet, True, args.calls // 20, True))
    base = rows["locality"]
    print(f"{'policy':18} {'reply cache':>12} {'answer cache':>13} {'cold':>8}   (us CPU per query; x locality)")
    for name, figures in rows.items():
        cells = "".join(f" {f:6.2f} ({f / b:4.2f})" for f, b in zip(figures, base, strict=True))
        print(f"{name:18}{cells}")


if __name__ == "__main__":
    main()
