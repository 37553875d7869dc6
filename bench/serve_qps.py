"""Queries per second and CPU per query of `feddns serve`, beside NSD, CoreDNS and a fixed-bytes server.

One run, on loopback, of Debian's `dnsperf` (8 clients, UDP, every query carrying EDNS0
option 65245 = "foo", as cluster DNS tags it) against five servers:

* `feddns serve` on a records file this script writes (the design document's example
  federation plus 2,000 services of 3 shards each);
* NSD (Debian's `nsd`, `server-count: 1`) serving a zone written from the same records:
  every name answers the A records `feddns serve` gives cluster foo, in the same order;
* bench/fixed_server.py, a bare uvloop server that sends the same bytes to every query
  (the floor of a Python server), for the exact-repeat file only, twice: through asyncio's
  datagram transport and through its own recvfrom/sendto loop (`--reader`, as feddns
  reads UDP); their q/s over NSD's is the most any Python server reaches here;
* CoreDNS (built by scripts/peers.sh) with its `file` plugin on NSD's zone file;
* CoreDNS with its `etcd` plugin, reading the same answers as SkyDNS records
  (/skydns/federation/svc/myfederation/myns/myservice/x1 = {"host": IP, "ttl": 30}, one key
  per address) from an etcd of its own (Debian's), whose CPU time counts with CoreDNS's.
  Both CoreDNS servers have the `cache` plugin, as a cluster's Corefile and the etcd
  plugin's README have it (--no-coredns-cache leaves it out).

Per core: every server (NSD's processes, CoreDNS and its etcd, all their threads) runs on
CPU --server-cpu (1) alone and dnsperf on --client-cpu (0), by taskset; CoreDNS and etcd
run with GOMAXPROCS=1. So q/s and CPU per query are what one core gives; --no-pin lets
them all run anywhere.

Five query files: the same question repeated exactly; that question in random letter case
(0x20, as unbound's use-caps-for-id sends it); random names under a namespace (NXDOMAIN);
2,000 distinct services; the same question for a service with the weighted policy (weights
3, 2, 1: its order is drawn afresh for every answer, where the first file's locality answer
is one fixed order). For each it prints q/s, the server's CPU time per answered query
(utime + stime of its processes over the run), the ratio to feddns's exact-repeat figure,
the ratio to NSD's figure for the same file, and feddns against CoreDNS's file and etcd
plugins in q/s and in CPU per query (NSD and CoreDNS answer the weighted name in one fixed
order).

The servers run side by side and are measured in turn, in slices of --slice seconds
(every server on every file, then again), so that a change in the machine's load during a
round falls on every figure alike; a figure sums its slices. With --rounds N the servers
are started anew each round, and the lowest and highest of every figure and ratio over the
rounds are printed at the end. Each dnsperf run reads its query file from the start:
feddns keeps nothing for a name that does not exist, so a random name asked again costs
what a new one costs.

feddns serve runs one process unless --workers says more (its default would be one per CPU).

Usage: python bench/serve_qps.py [--seconds 10] [--slice 2] [--clients 8] [--rounds 1] [--feddns-args "..."]
                                 [--workers 1] [--server-cpu 1] [--client-cpu 0] [--no-pin] [--no-coredns-cache]
"""

import argparse
import os
import random
import re
import shlex
import shutil
import string
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.edns
import dns.message
import dns.query

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import peers  # noqa: E402  (where scripts/peers.sh built CoreDNS)
from harness.etcd import EtcdServer  # noqa: E402  (the test suite's etcd runner)
from harness.ports import free_port  # noqa: E402  (free for UDP and TCP: NSD and CoreDNS bind both)
from tests.dns.nsd import nsd_conf  # noqa: E402  (the tests' NSD config: one for both)

ZONE = "federation."
QNAME = f"myservice.myns.myfederation.svc.{ZONE}"
OPTION = "65245:666f6f"  # cluster "foo"
SERVICES = 2000
TTL = 30
TICKS = os.sysconf("SC_CLK_TCK")
CLUSTERS = {
    "foo": ("us-central1-a", "us-central1"),
    "bar": ("us-central1-b", "us-central1"),
    "baz": ("europe-west1-b", "europe-west1"),
}
FILES = ("exact", "0x20", "nxdomain", "2000 services", "weighted")
WEIGHTED = f"weighted.myns.myfederation.svc.{ZONE}"
WEIGHTS = {"foo": 3, "bar": 2, "baz": 1}


def service_shards() -> dict[str, dict[str, tuple[str, str]]]:
    """qname -> cluster -> (clusterIP, externalIP)."""
    out = {QNAME: {"foo": ("10.0.3.64", "104.32.64.128"), "bar": ("10.0.4.20", "104.32.64.130"),
                   "baz": ("10.56.62.6", "108.120.45.12")},
           WEIGHTED: {"foo": ("10.0.3.65", "104.32.64.129"), "bar": ("10.0.4.21", "104.32.64.131"),
                      "baz": ("10.56.62.7", "108.120.45.13")}}
    for i in range(SERVICES):
        a, b = i // 250, i % 250 + 1
        out[f"svc{i}.bench.myfederation.svc.{ZONE}"] = {
            "foo": (f"10.1.{a}.{b}", f"198.18.{a}.{b}"), "bar": (f"10.2.{a}.{b}", f"198.19.{a}.{b}"),
            "baz": (f"10.3.{a}.{b}", f"198.20.{a}.{b}")}
    return out


def answer_for_foo(shards: dict[str, tuple[str, str]]) -> list[str]:
    """What feddns answers cluster foo: its clusterIP, then bar (same region), then baz."""
    return [shards["foo"][0], shards["bar"][1], shards["baz"][1]]


def write_records(path: Path) -> None:
    lines = []
    for cluster, (zone, region) in CLUSTERS.items():
        lines.append(f"/myfederation/_clusters/{cluster}: {{zone: {zone}, region: {region}}}")
    for qname, shards in service_shards().items():
        service, namespace = qname.split(".")[:2]
        for cluster, (cluster_ip, external_ip) in shards.items():
            policy = f", policy: weighted, weight: {WEIGHTS[cluster]}" if qname == WEIGHTED else ""
            lines.append(f"/myfederation/{namespace}/{service}/{cluster}: "
                         f"{{clusterIP: {cluster_ip}, externalIP: {external_ip}{policy}}}")
    path.write_text("\n".join(lines) + "\n")


def write_zone(directory: Path) -> Path:
    """The zone NSD and CoreDNS's file plugin serve: every name answers what feddns answers cluster foo."""
    zone = [f"$ORIGIN {ZONE}", f"$TTL {TTL}",
            f"@ IN SOA ns.dns hostmaster 1 7200 1800 86400 {TTL}", "@ IN NS ns.dns", "ns.dns IN A 127.0.0.1"]
    for qname, shards in service_shards().items():
        zone += [f"{qname} IN A {ip}" for ip in answer_for_foo(shards)]
    path = directory / "federation.zone"
    path.write_text("\n".join(zone) + "\n")
    return path


def skydns_records() -> dict[str, str | dict[str, Any]]:
    """The same answers as SkyDNS records (CoreDNS plugin/etcd README): the name's labels reversed
    under /skydns, one key per address, numbered so that etcd's key order is feddns's answer order."""
    records: dict[str, str | dict[str, Any]] = {}
    for qname, shards in service_shards().items():
        path = "/".join(reversed(qname.rstrip(".").split(".")))
        for n, ip in enumerate(answer_for_foo(shards), 1):
            records[f"/skydns/{path}/x{n}"] = {"host": ip, "ttl": TTL}
    return records


def write_nsd(directory: Path, port: int) -> Path:
    write_zone(directory)
    conf = directory / "nsd.conf"
    conf.write_text(nsd_conf(port=port, directory=directory, zone=ZONE, zonefile="federation.zone", verbosity=0,
                             logfile=True))
    return conf


def write_queries(directory: Path) -> dict[str, Path]:
    rng = random.Random(0xFEDD)
    files = {name: directory / f"{name.replace(' ', '-')}.txt" for name in FILES}
    files["exact"].write_text(f"{QNAME} A\n")
    mixed = ["".join(c.upper() if rng.random() < 0.5 else c for c in QNAME) for _ in range(100_000)]
    files["0x20"].write_text("".join(f"{q} A\n" for q in mixed))
    letters = string.ascii_lowercase + string.digits
    names = ["".join(rng.choices(letters, k=10)) + ".myns.myfederation.svc." + ZONE for _ in range(200_000)]
    files["nxdomain"].write_text("".join(f"{q} A\n" for q in names))
    files["2000 services"].write_text("".join(f"svc{i}.bench.myfederation.svc.{ZONE} A\n" for i in range(SERVICES)))
    files["weighted"].write_text(f"{WEIGHTED} A\n")
    return files


def wait_answering(port: int, proc: subprocess.Popen[bytes]) -> bytes:
    """The reply to the exact-repeat question once the server ``proc`` answers on ``port``."""
    query = dns.message.make_query(QNAME, "A", use_edns=0, options=[dns.edns.GenericOption(65245, b"foo")])
    deadline = time.monotonic() + 30
    while True:
        try:
            return dns.query.udp(query, "127.0.0.1", port=port, timeout=0.5).to_wire()
        except Exception:  # not up yet: any failure means "try again" until the deadline
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args} exited with {proc.returncode}") from None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its descendants."""
    total = 0.0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICKS
            for task in Path(f"/proc/{p}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


@dataclass
class Figure:
    """One server on one query file, summed over the slices of a round."""

    completed: int = 0
    """Queries answered (dnsperf's "Queries completed")."""
    lost: int = 0
    """Queries dnsperf gave up on (no answer within its timeout)."""
    seconds: float = 0.0
    """Wall-clock seconds dnsperf ran."""
    cpu: float = 0.0
    """CPU seconds (user + system) of the server's processes over those seconds."""
    backend_cpu: float = 0.0
    """The part of ``cpu`` spent by the server's etcd (CoreDNS's etcd plugin reads it)."""
    rcodes: str = ""

    @property
    def qps(self) -> float:
        return self.completed / self.seconds if self.seconds else 0.0

    @property
    def cpu_us(self) -> float:
        return self.cpu / max(self.completed, 1) * 1e6

    @property
    def backend_us(self) -> float:
        return self.backend_cpu / max(self.completed, 1) * 1e6


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    files: tuple[str, ...]
    backend: EtcdServer | None = None
    """The etcd that CoreDNS's etcd plugin reads: its CPU time counts with the server's."""

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of the server's processes and of its backend's."""
        backend = tree_cpu(self.backend.proc.pid) if self.backend and self.backend.proc else 0.0
        return tree_cpu(self.proc.pid), backend


def on_cpu(cpu: int | None, cmd: list[str]) -> list[str]:
    """``cmd`` confined by taskset to CPU ``cpu`` (unconfined when ``cpu`` is None)."""
    return ["taskset", "-c", str(cpu), *cmd] if cpu is not None else cmd


def pin_threads(pid: int, cpu: int | None) -> None:
    """Confine every thread of a running process to ``cpu``; threads it starts later inherit it."""
    if cpu is not None:
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(task.name), {cpu})


def dnsperf(server: Server, queries: Path, seconds: float, args: argparse.Namespace, figure: Figure) -> None:
    """Run dnsperf for ``seconds`` and add what it did (and the server's CPU time) to ``figure``."""
    before = server.cpu()
    # -t 2: dnsperf waits that long for the replies it still expects when the run ends. CoreDNS
    # leaves its socket's receive buffer at the kernel default, which the first burst of 500
    # queries overflows (244 lost each run, on this machine), and the default 5 s wait for them
    # made each run 5 s longer. No reply here takes more than a fraction of a second.
    out = subprocess.run(
        on_cpu(args.client_cpu, [
            "dnsperf", "-s", "127.0.0.1", "-p", str(server.port), "-d", str(queries), "-l", f"{seconds:g}",
            "-c", str(args.clients), "-T", "1", "-q", "500", "-t", "2", "-E", OPTION]),
        capture_output=True, text=True, check=True,
    ).stdout
    after = server.cpu()
    figure.cpu += sum(after) - sum(before)
    figure.backend_cpu += after[1] - before[1]
    completed = re.search(r"Queries completed:\s+(\d+)", out)
    lost = re.search(r"Queries lost:\s+(\d+)", out)
    runtime = re.search(r"Run time \(s\):\s+([\d.]+)", out)
    rcodes = re.search(r"Response codes:\s+(.*)", out)
    if not (completed and runtime):
        raise RuntimeError(out)
    figure.completed += int(completed.group(1))
    figure.lost += int(lost.group(1)) if lost else 0
    figure.seconds += float(runtime.group(1))
    figure.rcodes = re.sub(r" \([\d.]+%\)", "", rcodes.group(1)) if rcodes else "none"


def start(cmd: list[str], cwd: Path = ROOT) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_server(server: Server) -> None:
    stop(server.proc)
    if server.backend is not None:
        server.backend.destroy()


def start_feddns(work: Path, args: argparse.Namespace) -> Server:
    """Start feddns serve on port 0 and read the port it prints (no race for a free port)."""
    cmd = [sys.executable, "-m", "feddns", "serve", "--listen", "127.0.0.1:0", "--records", str(work / "records.yaml"),
           "--workers", str(args.workers), *shlex.split(args.feddns_args)]
    proc = subprocess.Popen(on_cpu(args.server_cpu, cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stderr is not None
    for line in proc.stderr:
        match = re.search(rb"listening on udp\+tcp \S+:(\d+)", line)
        if match:
            # The listening line is at level info; the few lines after it are read and dropped.
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return Server("feddns", proc, int(match.group(1)), FILES)
    raise RuntimeError(f"feddns serve exited with {proc.wait()}")


def start_nsd(work: Path, args: argparse.Namespace) -> Server:
    port = free_port()
    return Server("nsd", start(on_cpu(args.server_cpu, ["nsd", "-d", "-c", str(write_nsd(work, port))])), port, FILES)


def start_fixed(reply: bytes, args: argparse.Namespace, reader: bool = False) -> Server:
    """bench/fixed_server.py sending ``reply`` (feddns's answer to the exact-repeat question) to every query,
    through asyncio's datagram transport or (``reader``) its own recvfrom/sendto loop."""
    port = free_port()
    cmd = [sys.executable, str(ROOT / "bench" / "fixed_server.py"), str(port), reply.hex(), *(["--reader"] * reader)]
    return Server("fixed-reader" if reader else "fixed", start(on_cpu(args.server_cpu, cmd)), port, ("exact",))


def start_coredns(name: str, work: Path, plugin: str, args: argparse.Namespace) -> Server:
    """CoreDNS (scripts/peers.sh's build) authoritative for the zone with one plugin, and its cache
    unless --no-coredns-cache: a stock cluster's Corefile has ``cache``, and so has the etcd
    plugin README's SkyDNS set-up. No log, errors or prometheus plugin: CoreDNS at its fastest."""
    port = free_port()
    cache = "" if args.no_coredns_cache else "    cache\n"
    corefile = work / f"Corefile.{name}"
    corefile.write_text(f"{ZONE}:{port} {{\n    {plugin}\n{cache}}}\n")
    return Server(name, start(on_cpu(args.server_cpu, [peers.binary("coredns"), "-conf", str(corefile)])), port, FILES)


def start_coredns_etcd(work: Path, args: argparse.Namespace) -> Server:
    """Its own etcd (Debian's, on the server's CPU) holding the SkyDNS records, and CoreDNS's etcd plugin on it."""
    etcd = EtcdServer(enable_v2=False)
    etcd.start()
    try:
        assert etcd.proc is not None
        pin_threads(etcd.proc.pid, args.server_cpu)
        etcd.put_many(skydns_records())
        plugin = f"etcd {{\n        path /skydns\n        endpoint {etcd.url}\n    }}"
        server = start_coredns("coredns-etcd", work, plugin, args)
    except BaseException:
        etcd.destroy()
        raise
    server.backend = etcd
    return server


def addresses(reply: bytes) -> list[str]:
    return sorted(rr.address for rrset in dns.message.from_wire(reply).answer for rr in rrset)


def start_servers(work: Path, args: argparse.Namespace) -> list[Server]:
    """feddns serve, NSD on the same records, the fixed-bytes server replying what feddns replies,
    and CoreDNS's file and etcd plugins; each must answer the exact-repeat question as feddns does."""
    servers = [start_feddns(work, args)]
    try:
        reply = wait_answering(servers[0].port, servers[0].proc)
        for begin in (lambda: start_nsd(work, args), lambda: start_fixed(reply, args),
                      lambda: start_fixed(reply, args, reader=True),
                      lambda: start_coredns("coredns-file", work, f"file {write_zone(work)}", args),
                      lambda: start_coredns_etcd(work, args)):
            servers.append(begin())  # and answering, before the next one picks a free port
            if addresses(wait_answering(servers[-1].port, servers[-1].proc)) != addresses(reply):
                raise RuntimeError(f"{servers[-1].name} does not answer {QNAME} as feddns does")
    except BaseException:
        for server in servers:
            stop_server(server)
        raise
    return servers


def one_round(work: Path, files: dict[str, Path], args: argparse.Namespace) -> dict[str, dict[str, Figure]]:
    """Every server on every query file, in slices taken in turn, so that a change in the
    machine's load during the round falls on every figure alike."""
    servers = start_servers(work, args)
    try:
        figures = {server.name: {label: Figure() for label in server.files} for server in servers}
        slices = max(1, round(args.seconds / args.slice))
        for _ in range(slices):
            for label in FILES:
                for server in servers:
                    if label in server.files:
                        dnsperf(server, files[label], args.seconds / slices, args, figures[server.name][label])
        for server in servers:
            for label, f in figures[server.name].items():
                backend = f" (etcd {f.backend_us:.1f})" if server.backend else ""
                print(f"    {server.name:12} {label:14} {f.qps:>9,.0f} q/s  {f.cpu_us:5.1f} us CPU/query{backend}  "
                      f"lost {f.lost}  rcodes {f.rcodes}", file=sys.stderr, flush=True)
        return figures
    finally:
        for server in servers:
            stop_server(server)


COREDNS = {"file": "coredns-file", "etcd": "coredns-etcd"}


def ratios(result: dict[str, dict[str, Figure]]) -> dict[str, float]:
    """Each figure docs/performance.md sets a target for, by name. Against CoreDNS, a CPU ratio is
    CoreDNS's CPU per query over feddns's, so that above 1 means feddns is ahead, as for q/s."""
    feddns, nsd, fixed = result["feddns"], result["nsd"], result["fixed"]
    exact = feddns["exact"].qps
    out = {}
    for label in FILES:
        out[f"{label} / feddns exact"] = feddns[label].qps / exact
        out[f"{label} / NSD"] = feddns[label].qps / nsd[label].qps
        for plugin, server in COREDNS.items():
            out[f"{label} / CoreDNS {plugin}"] = feddns[label].qps / result[server][label].qps
            out[f"{label} CPU / CoreDNS {plugin}"] = result[server][label].cpu_us / feddns[label].cpu_us
    out["exact / fixed server"] = exact / fixed["exact"].qps
    out["exact / fixed reader"] = exact / result["fixed-reader"]["exact"].qps
    out["fixed server / NSD"] = fixed["exact"].qps / nsd["exact"].qps
    out["fixed reader / NSD"] = result["fixed-reader"]["exact"].qps / nsd["exact"].qps
    out["exact CPU / weighted CPU"] = feddns["exact"].cpu_us / feddns["weighted"].cpu_us
    return out


TARGETS = [
    ("0x20 case >= 0.8 x exact", "0x20 / feddns exact", 0.8),
    ("random names >= 0.6 x exact", "nxdomain / feddns exact", 0.6),
    ("2,000 services >= 0.8 x exact", "2000 services / feddns exact", 0.8),
    ("exact >= 0.95 x fixed reader", "exact / fixed reader", 0.95),  # feddns reads UDP as the reader does
    ("random names >= 0.9 x NSD", "nxdomain / NSD", 0.9),
    ("weighted q/s >= exact / 1.5", "weighted / feddns exact", 1 / 1.5),
    ("weighted CPU <= 1.5 x exact", "exact CPU / weighted CPU", 1 / 1.5),
    *((f"{label} q/s >= CoreDNS file", f"{label} / CoreDNS file", 1.0) for label in FILES),
    *((f"{label} CPU/query <= CoreDNS file", f"{label} CPU / CoreDNS file", 1.0) for label in FILES),
]


def report(result: dict[str, dict[str, Figure]]) -> None:
    feddns, nsd, fixed = result["feddns"], result["nsd"], result["fixed"]
    file, etcd = result["coredns-file"], result["coredns-etcd"]
    r = ratios(result)
    print(f"{'query file':14} {'feddns q/s':>11} {'us/q':>5} {'NSD q/s':>9} {'us/q':>5} {'file q/s':>9} {'us/q':>5} "
          f"{'etcd q/s':>9} {'us/q':>5} {'/feddns exact':>13} {'/NSD':>6} {'/file':>6} {'CPU':>6} {'/etcd':>6} "
          f"{'CPU':>6}")
    for label in FILES:
        row = [r[f"{label} / feddns exact"], r[f"{label} / NSD"], r[f"{label} / CoreDNS file"],
               r[f"{label} CPU / CoreDNS file"], r[f"{label} / CoreDNS etcd"], r[f"{label} CPU / CoreDNS etcd"]]
        print(f"{label:14} " + " ".join(f"{f.qps:>{w},.0f} {f.cpu_us:5.1f}" for f, w in
                                        ((feddns[label], 11), (nsd[label], 9), (file[label], 9), (etcd[label], 9)))
              + f" {row[0]:13.2f} " + " ".join(f"{x:6.2f}" for x in row[1:]))
    print("(file, etcd: CoreDNS's file and etcd plugins; CPU: their CPU per query over feddns's, "
          "above 1 when feddns spends less)")
    fx, fr = fixed["exact"], result["fixed-reader"]["exact"]
    print(f"{'fixed server':14} {fx.qps:>11,.0f} {fx.cpu_us:5.1f}  (exact-repeat file)")
    print(f"{'fixed reader':14} {fr.qps:>11,.0f} {fr.cpu_us:5.1f}  (exact-repeat file, its own recvfrom/sendto loop)")
    for text, name, goal in TARGETS:
        print(f"target {text:40} {r[name]:5.2f}  {'met' if r[name] >= goal else 'NOT MET'}")
    print(f"weighted / exact CPU per query: {feddns['weighted'].cpu_us / feddns['exact'].cpu_us:.2f}")
    print(f"feddns exact / NSD exact: {r['exact / NSD']:.2f}")
    print(f"fixed server / NSD exact: {r['fixed server / NSD']:.2f} (reader loop {r['fixed reader / NSD']:.2f}): "
          "the most a Python server can reach")


def spread(results: list[dict[str, dict[str, Figure]]]) -> None:
    """Lowest and highest of every figure over the rounds."""
    def span(values: list[float], fmt: str) -> str:
        return f"{min(values):{fmt}} - {max(values):{fmt}}"

    print(f"over {len(results)} rounds (lowest - highest):")
    for server in results[0]:
        for label in results[0][server]:
            figures = [result[server][label] for result in results]
            print(f"  {server:12} {label:14} {span([f.qps for f in figures], ',.0f'):>19} q/s"
                  f"  {span([f.cpu_us for f in figures], '.1f'):>11} us CPU/query")
    all_ratios = [ratios(result) for result in results]
    for name in all_ratios[0]:
        print(f"  {name:36} {span([r[name] for r in all_ratios], '.2f')}")
    for text, name, goal in TARGETS:
        lowest = min(r[name] for r in all_ratios)
        verdict = "met every round" if lowest >= goal else "NOT MET every round"
        print(f"target {text:40} lowest {lowest:5.2f}  {verdict}")


def check_tools(args: argparse.Namespace) -> None:
    """Exit with what to install when a server, dnsperf or the CPUs to pin to are missing."""
    for tool, package in (("dnsperf", "dnsperf"), ("nsd", "nsd"), ("etcd", "etcd-server"), ("taskset", "util-linux")):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: apt-get install {package}")
    try:
        peers.binary("coredns")
    except FileNotFoundError as exc:
        sys.exit(str(exc))
    cpus = {args.server_cpu, args.client_cpu} - {None}
    if not cpus <= os.sched_getaffinity(0):
        sys.exit(f"CPUs {sorted(cpus)} are not all available to this process ({sorted(os.sched_getaffinity(0))}): "
                 f"pick others with --server-cpu and --client-cpu, or --no-pin")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10, help="seconds of dnsperf per server and query file")
    parser.add_argument("--slice", type=float, default=2, help="seconds of one dnsperf run (the files take turns)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1, help="repeat the whole run (the machine is noisy)")
    parser.add_argument("--feddns-args", default="", help="extra flags for feddns serve")
    parser.add_argument("--workers", type=int, default=1,
                        help="feddns serve --workers: its processes (default 1; 2 with --no-pin uses both cores)")
    parser.add_argument("--server-cpu", type=int, default=1, help="the one CPU every server (and etcd) runs on")
    parser.add_argument("--client-cpu", type=int, default=0, help="the CPU dnsperf runs on")
    parser.add_argument("--no-pin", action="store_true", help="let the servers and dnsperf run on any CPU")
    parser.add_argument("--no-coredns-cache", action="store_true", help="CoreDNS without its cache plugin")
    args = parser.parse_args()
    if args.no_pin:
        args.server_cpu = args.client_cpu = None
    else:
        os.environ["GOMAXPROCS"] = "1"  # CoreDNS and etcd inherit it: one core's worth of Go threads
    check_tools(args)
    with tempfile.TemporaryDirectory(prefix="feddns-bench-") as tmp:
        work = Path(tmp)
        write_records(work / "records.yaml")
        files = write_queries(work)
        results = []
        for n in range(args.rounds):
            print(f"round {n + 1} (load average {os.getloadavg()[0]:.2f})", flush=True)
            results.append(one_round(work, files, args))
            report(results[-1])
        if args.rounds > 1:
            spread(results)
        print(f"load average after the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
