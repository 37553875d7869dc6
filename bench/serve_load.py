"""Cold load of `feddns serve` from a real etcd: seconds to /ready beside the read alone, and memory.

Starts Debian's etcd on loopback, fills it with --services services x --clusters clusters
shard records (default 100,000 x 10 = 1,000,000) plus one cluster record per cluster,
then, --rounds times, in turn, each a fresh process from its start to its end:

* `etcdctl get --prefix` of the same keys (its output read and dropped): what etcd's own
  client takes to read them;
* bench/etcd_read.py: a bare paged read of them through aetcd, in serve's page size
  (`feddns.store.etcdfeed.PAGE_KEYS`), keeping nothing;
* `feddns serve --etcd`, timed until `/ready` says 200 (with `--workers N`, once every
  worker has loaded) and a query for the last service written is answered.

Interleaved so that a change in the machine's load falls on every row alike. It prints each
row's seconds and its own CPU seconds (etcd's are in no row), serve's time over each of the
other two, and for serve the resident memory once loaded (VmRSS, and VmHWM, the peak) and
the proportional set size (PSS, from /proc/PID/smaps_rollup: a page shared by N processes
counts 1/N in each), summed over the first process and its workers (`--serve-args
"--workers N"`), at /ready and again once every process has logged that it has read every
record's value (a load reads keys only: docs/serve.md, "Loading"), and once more after
queries for --sweep distinct services (each answered; from 64 sockets, so that SO_REUSEPORT
spreads them over the workers): a query writes the reference counts of the objects it reads,
so the pages of the services asked for are copied into the worker that answers, which is
what a fork's sharing costs as the queries go on.

Filling etcd takes a few minutes; with --data DIR the filled etcd data directory is
kept there and reused by the next run with the same sizes.

Usage: python bench/serve_load.py [--services 100000] [--clusters 10] [--rounds 2] [--data DIR] [--serve-args "..."]
"""

import argparse
import base64
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dns.edns
import dns.exception
import dns.message
import dns.query

from harness.etcd import EtcdServer  # the test suite's etcd runner
from harness.serve import ServeProcess

FEDERATION = "bench"


def record(service: int, cluster: int) -> bytes:
    a, b, c = service // 62500, service // 250 % 250, service % 250 + 1
    value = {"clusterIP": f"10.{a * 10 + cluster}.{b}.{c}", "externalIP": f"100.{64 + a * 10 + cluster}.{b}.{c}",
             "ports": [{"name": "http", "protocol": "TCP", "port": 80}], "ready": 1 + service % 3}
    return json.dumps(value, separators=(",", ":")).encode()


def fill(etcd: EtcdServer, services: int, clusters: int) -> None:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    def put_batch(start: int) -> None:
        ops = []
        for n in range(start, min(start + 12, services)):
            for c in range(clusters):
                key = f"/{FEDERATION}/ns{n % 100}/svc{n}/c{c}".encode()
                ops.append({"request_put": {"key": b64(key), "value": b64(record(n, c))}})
        body = json.dumps({"success": ops}).encode()
        request = urllib.request.Request(etcd.url + "/v3/kv/txn", data=body, method="POST")
        urllib.request.urlopen(request, timeout=60).read()

    for c in range(clusters):
        etcd.put(f"/{FEDERATION}/_clusters/c{c}", {"zone": f"z{c}", "region": f"r{c // 3}"})
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        for done, _ in enumerate(pool.map(put_batch, range(0, services, 12))):
            if done % 1000 == 0:
                print(f"  filled {done * 12 * clusters:,} records ({time.monotonic() - started:.0f} s)",
                      file=sys.stderr, flush=True)


def filled_etcd(services: int, clusters: int, data: str | None) -> EtcdServer:
    """A started etcd holding ``services`` x ``clusters`` shard records (:func:`fill`); with
    ``data``, its data directory is kept there and reused when it was filled with the same sizes."""
    etcd = EtcdServer()
    marker = Path(data) / f"filled-{services}x{clusters}" if data else None
    if data:
        shutil.rmtree(etcd.data_dir, ignore_errors=True)
        etcd.data_dir = data
        etcd.log_path = str(Path(data) / "etcd.log")
        Path(data).mkdir(parents=True, exist_ok=True)
    etcd.start()
    if marker is None or not marker.exists():
        fill(etcd, services, clusters)
        if marker is not None:
            marker.touch()
    return etcd


def done_with(etcd: EtcdServer, data: str | None) -> None:
    """Stop ``etcd``, keeping its data directory when it is ``data`` (else removing it)."""
    if data:
        etcd.stop()
    else:
        etcd.destroy()


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (``/proc/PID/status``) and Pss (``/proc/PID/smaps_rollup``) of ``pid``, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0]) * 1024
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "Pss":
            out[name] = int(value.split()[0]) * 1024
    return out


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of ``pid`` so far, and of its children that have exited and been
    waited for (``/proc/PID/stat`` utime + stime + cutime + cstime: with ``--workers N``, the
    process that read etcd for the workers), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(field) for field in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def run_timed(argv: list[str]) -> tuple[float, float, str]:
    """Run ``argv`` to its end: its seconds, its CPU seconds (user + system) and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=900)
    took = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done.stdout


def time_etcdctl(etcd: EtcdServer) -> tuple[float, float]:
    """Seconds and CPU seconds `etcdctl get --prefix` takes to read every key of the fill (its output
    read and dropped)."""
    took, cpu, _ = run_timed(["etcdctl", "--endpoints", etcd.url, "--command-timeout", "600s", "get", "--prefix",
                              f"/{FEDERATION}/"])
    return took, cpu


def time_bare_read(etcd: EtcdServer, expected: int) -> tuple[float, float]:
    """Seconds and CPU seconds bench/etcd_read.py takes, from its start, to page through every key of the fill."""
    took, cpu, out = run_timed([sys.executable, str(Path(__file__).with_name("etcd_read.py")), etcd.url,
                                f"/{FEDERATION}/"])
    assert int(out) == expected, (out, expected)
    return took, cpu


READ_ALL = "every record value read"
"""What serve logs once the read between queries after a load has read every value (docs/serve.md, "Loading")."""
PRELOADED = "every value parsed: forking the workers"
"""What ``--workers N`` logs when its workers are forked from one read of etcd, every value read before."""

Memories = list[dict[str, int]]


def time_serve(etcd: EtcdServer, services: int, serve_args: list[str],
               sweep: int) -> tuple[float, float, Memories, Memories, Memories]:
    """Seconds from starting `feddns serve` until ``/ready`` says 200 (with ``--workers N``: every
    worker has loaded) and the last service written is answered, the CPU seconds its processes had
    used by then, the memory of each of them then, again once each has read every value, and
    again after queries for ``sweep`` distinct services (:func:`ask_services`)."""
    last = f"svc{services - 1}.ns{(services - 1) % 100}.{FEDERATION}.svc.federation."
    query = dns.message.make_query(last, "A", use_edns=0, options=[dns.edns.GenericOption(65245, b"c0")])
    started = time.monotonic()
    with ServeProcess(etcd_url=etcd.url, extra_args=[*serve_args, "--metrics", "127.0.0.1:0"],
                      start_timeout=600) as server:
        while not (ready(server) and answered(server, query)):
            if time.monotonic() - started > 600:
                raise TimeoutError("not ready within 600 s")
            time.sleep(0.05)
        loaded = time.monotonic() - started
        assert server.proc is not None
        # With --workers N (in --serve-args) the records are in each worker, not the parent.
        pids = [server.proc.pid, *server.worker_pids()]
        cpu, at_ready = sum(cpu_seconds(pid) for pid in pids), [memory(pid) for pid in pids]
        loaders = max(1, len(pids) - 1)
        while server.log.count(READ_ALL) < loaders and PRELOADED not in server.log:
            if time.monotonic() - started > 600:
                raise TimeoutError(f"{READ_ALL!r} not logged within 600 s")
            time.sleep(0.05)
        read_all = [memory(pid) for pid in pids]
        ask_services(server.port, services, sweep)
        return loaded, cpu, at_ready, read_all, [memory(pid) for pid in pids]


def ask_services(port: int, services: int, count: int) -> None:
    """Ask for ``count`` distinct services of the fill, spread evenly over it, from 64 UDP sockets
    (64 queries at a time); raises when one is not answered with records."""
    step = max(1, services // max(1, count))
    names = [f"svc{i}.ns{i % 100}.{FEDERATION}.svc.federation." for i in range(0, services, step)][:count]
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(64)]
    try:
        for sock in sockets:
            sock.settimeout(5)
        for start in range(0, len(names), len(sockets)):
            batch = list(zip(sockets, names[start:start + len(sockets)], strict=False))
            for sock, name in batch:
                sock.sendto(dns.message.make_query(name, "A").to_wire(), ("127.0.0.1", port))
            for sock, name in batch:
                reply = dns.message.from_wire(sock.recv(4096))
                assert reply.answer, (name, reply)
    finally:
        for sock in sockets:
            sock.close()


def ready(server: ServeProcess) -> bool:
    """True once the server's ``/ready`` answers 200."""
    try:
        with urllib.request.urlopen(f"{server.metrics_url}/ready", timeout=2) as reply:
            return bool(reply.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def answered(server: ServeProcess, query: dns.message.Message) -> bool:
    """True when ``query`` gets an answer with records."""
    try:
        return bool(dns.query.udp(query, "127.0.0.1", port=server.port, timeout=0.5).answer)
    except dns.exception.Timeout:
        return False


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data", help="keep the filled etcd data directory here and reuse it")
    parser.add_argument("--serve-args", default="", help="extra flags for feddns serve")
    parser.add_argument("--sweep", type=int, default=20_000,
                        help="distinct services asked for before the last memory figures (default 20000)")
    args = parser.parse_args()
    etcd = filled_etcd(args.services, args.clusters, args.data)
    records = args.services * args.clusters
    try:
        for number in range(1, args.rounds + 1):
            print(f"round {number} (load average {load_average()})", flush=True)
            etcdctl, etcdctl_cpu = time_etcdctl(etcd)
            bare, bare_cpu = time_bare_read(etcd, records + args.clusters)
            loaded, cpu, memories, read_all, swept = time_serve(etcd, args.services, args.serve_args.split(),
                                                                args.sweep)
            print(f"  etcdctl get --prefix        {etcdctl:6.1f} s   (its CPU {etcdctl_cpu:.1f} s)")
            print(f"  aetcd paged read            {bare:6.1f} s   (its CPU {bare_cpu:.1f} s)")
            print(f"  feddns serve, /ready        {loaded:6.1f} s   serve / aetcd {loaded / bare:.2f}   "
                  f"serve / etcdctl {loaded / etcdctl:.2f}   (its CPU {cpu:.1f} s)")
            for when, taken in (("at /ready", memories), ("every value read", read_all),
                                (f"after {args.sweep:,} services asked", swept)):
                each = ", ".join(f"{m['VmRSS'] / 1e6:.0f}" for m in taken)
                rss, pss = (sum(m[name] for m in taken) / 1e6 for name in ("VmRSS", "Pss"))
                print(f"  {records:,} shard records, {len(taken)} processes, {when}: RSS {rss:.0f} MB ({each}), "
                      f"PSS {pss:.0f} MB, peak RSS of one {max(m['VmHWM'] for m in taken) / 1e6:.0f} MB", flush=True)
    finally:
        done_with(etcd, args.data)


if __name__ == "__main__":
    main()
