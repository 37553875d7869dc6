"""CPU time per query of the UDP query path of `feddns serve`, in-process, for each query kind.

No sockets and no other process: the records of bench/serve_qps.py are loaded into a
`Responder`, and `UdpServer.handler` (the function the socket's reader calls for each
datagram) is called over a fixed list of query packets, with a `sendto` that only keeps
the reply. The time is `time.process_time()` (this process's CPU
time), so other work on the machine moves it much less than it moves q/s; each figure is
the lowest of several passes over the list.

The packets are what dnsperf sends in bench/serve_qps.py (EDNS0, payload 4096, option
65245 = "foo", a new ID each): the same question repeated; that question in random letter
case (0x20); random names under a namespace (NXDOMAIN); 2,000 distinct services.

With --instructions it counts instead the instructions the CPU runs per query (user
space: Python, the interpreter, libc), which no other work on the machine can move: the
same query list is replayed under `valgrind --tool=callgrind` once with no pass and once
with two, and the difference is divided by the queries of the two passes.

Usage: python bench/serve_cpu.py [--queries N] [--passes 5] [--profile KIND] [--instructions]
"""

import argparse
import cProfile
import pickle
import pstats
import random
import re
import shutil
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.edns
import dns.flags
import dns.message

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from serve_qps import QNAME, SERVICES, WEIGHTED, ZONE, write_records

from feddns.dns.index import Index
from feddns.dns.responder import AnswerSettings, Responder
from feddns.dns.transport import UdpServer
from feddns.keys import Layout
from feddns.store import Feed
from feddns.store.file import read_records

KINDS = ("exact", "0x20", "nxdomain", "2000 services", "weighted")


def packet(qname: str, ident: int) -> bytes:
    query = dns.message.make_query(qname, "A", use_edns=0, payload=4096,
                                   options=[dns.edns.GenericOption(65245, b"foo")])
    query.id = ident
    query.flags = dns.flags.RD
    return query.to_wire()


def queries(kind: str, count: int) -> list[bytes]:
    rng = random.Random(0xFEDD)
    if kind == "exact":
        names = [QNAME] * count
    elif kind == "0x20":
        names = ["".join(c.upper() if rng.random() < 0.5 else c for c in QNAME) for _ in range(count)]
    elif kind == "nxdomain":
        letters = string.ascii_lowercase + string.digits
        names = ["".join(rng.choices(letters, k=10)) + ".myns.myfederation.svc." + ZONE for _ in range(count)]
    elif kind == "weighted":
        names = [WEIGHTED] * count
    else:
        names = [f"svc{i % SERVICES}.bench.myfederation.svc.{ZONE}" for i in range(count)]
    return [packet(name, rng.randrange(65536)) for name in names]


class Sink:
    """A ``sendto`` that keeps the last reply."""

    def __init__(self) -> None:
        self.last = b""
        self.sent = 0

    def sendto(self, data: bytes, addr: Any) -> None:
        self.last = data
        self.sent += 1


def server(records: list[tuple[str, bytes]]) -> tuple[Callable[[bytes, Any], None], Sink, Responder]:
    layout = Layout()
    index = Index(layout)
    responder = Responder(AnswerSettings())
    Feed(index, responder).replace(records)
    sink = Sink()
    return UdpServer(responder).handler(sink.sendto), sink, responder


def the_records() -> list[tuple[str, bytes]]:
    """bench/serve_qps.py's records, as ``(key, value)`` pairs."""
    with tempfile.TemporaryDirectory(prefix="feddns-bench-") as tmp:
        path = Path(tmp) / "records.yaml"
        write_records(path)
        return list(read_records(path, Layout()))


def run(receive: Callable[[bytes, Any], None], packets: list[bytes]) -> float:
    """CPU seconds for one pass over ``packets``."""
    addr = ("127.0.0.1", 40000)
    start = time.process_time()
    for data in packets:
        receive(data, addr)
    return time.process_time() - start


def replay(data: Path, kind: str, passes: int) -> None:
    """The child of --instructions: load, warm, then ``passes`` passes over one kind."""
    records, packets = pickle.loads(data.read_bytes())
    udp, _, _ = server(records)
    run(udp, packets[kind])
    for _ in range(passes):
        run(udp, packets[kind])


def instructions(count: int) -> dict[str, float]:
    """Instructions per query of each kind, counted by callgrind."""
    if not shutil.which("valgrind"):
        sys.exit("valgrind is missing: apt-get install valgrind")
    out = {}
    with tempfile.TemporaryDirectory(prefix="feddns-bench-") as tmp:
        data = Path(tmp) / "queries.pickle"
        data.write_bytes(pickle.dumps((the_records(), {kind: queries(kind, count) for kind in KINDS})))
        for kind in KINDS:
            totals = []
            for passes in (0, 2):
                report = Path(tmp) / f"callgrind.{passes}"
                subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={report}", sys.executable,
                                __file__, "--replay", str(data), "--kind", kind, "--passes", str(passes)],
                               check=True, capture_output=True)
                totals.append(int(re.search(r"^totals: (\d+)", report.read_text(), re.MULTILINE).group(1)))
            out[kind] = (totals[1] - totals[0]) / (2 * count)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int,
                        help="packets per kind (default 100,000; 10,000 with --instructions, as callgrind is slow)")
    parser.add_argument("--passes", type=int, default=5, help="timed passes per kind (the lowest counts)")
    parser.add_argument("--profile", choices=KINDS, help="profile one kind with cProfile instead")
    parser.add_argument("--instructions", action="store_true", help="count instructions with callgrind instead")
    parser.add_argument("--replay", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--kind", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replay:
        replay(args.replay, args.kind, args.passes)
        return
    if args.instructions:
        count = args.queries or 10_000
        counts = instructions(count)
        print(f"{count:,} queries a kind, replayed twice under callgrind")
        print(f"{'query kind':14} {'instructions/query':>18} {'/ exact':>8}")
        for kind in KINDS:
            print(f"{kind:14} {counts[kind]:18,.0f} {counts[kind] / counts['exact']:8.2f}")
        return
    args.queries = args.queries or 100_000
    udp, sink, responder = server(the_records())
    kinds = (args.profile,) if args.profile else KINDS
    lists = {kind: queries(kind, args.queries) for kind in kinds}
    for kind in kinds:
        run(udp, lists[kind])  # warm: build answers, admit replies
        if sink.sent != len(lists[kind]):
            sys.exit(f"{kind}: {len(lists[kind]) - sink.sent} queries got no reply")
        sink.sent = 0
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        run(udp, lists[args.profile])
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)
        return
    figures = {kind: min(run(udp, lists[kind]) for _ in range(args.passes)) / args.queries * 1e6 for kind in kinds}
    exact = figures["exact"]
    print(f"{'query kind':14} {'us CPU/query':>12} {'/ exact':>8}")
    for kind in kinds:
        print(f"{kind:14} {figures[kind]:12.2f} {figures[kind] / exact:8.2f}")
    print(f"cache: {len(responder.cache)} entries, {responder.cache.store.used} bytes")


if __name__ == "__main__":
    main()
