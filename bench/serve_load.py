"""Cold load of `feddns serve` from a real etcd: seconds to the first answer, and memory.

Starts Debian's etcd on loopback, fills it with --services services x --clusters clusters
shard records (default 100,000 x 10 = 1,000,000) plus one cluster record per cluster,
then starts `feddns serve --etcd` and times from the process start until a query for the
last service written is answered from the loaded records. It prints that time, the
resident memory (VmRSS) once loaded and the peak (VmHWM) of the serve process.

Filling etcd takes a few minutes; with --data DIR the filled etcd data directory is
kept there and reused by the next run with the same sizes.

Usage: python bench/serve_load.py [--services 100000] [--clusters 10] [--data DIR]
"""

import argparse
import base64
import json
import shutil
import sys
import time
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


def status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(value.split()[0]) * 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--data", help="keep the filled etcd data directory here and reuse it")
    parser.add_argument("--serve-args", default="", help="extra flags for feddns serve")
    args = parser.parse_args()
    etcd = filled_etcd(args.services, args.clusters, args.data)
    try:
        last = f"svc{args.services - 1}.ns{(args.services - 1) % 100}.{FEDERATION}.svc.federation."
        query = dns.message.make_query(last, "A", use_edns=0, options=[dns.edns.GenericOption(65245, b"c0")])
        started = time.monotonic()
        with ServeProcess(etcd_url=etcd.url, extra_args=args.serve_args.split()) as server:
            while True:
                try:
                    reply = dns.query.udp(query, "127.0.0.1", port=server.port, timeout=0.5)
                    if reply.answer:
                        break
                except dns.exception.Timeout:
                    pass
                if time.monotonic() - started > 600:
                    raise TimeoutError("no answer within 600 s")
                time.sleep(0.05)
            loaded = time.monotonic() - started
            assert server.proc is not None
            # With --workers N (in --serve-args) the records are in each worker, not the parent.
            pids = [server.proc.pid, *server.worker_pids()]
            memories = [status(pid) for pid in pids]
    finally:
        done_with(etcd, args.data)
    records = args.services * args.clusters
    each = ", ".join(f"{m['VmRSS'] / 1e6:.0f}" for m in memories)
    print(f"{records:,} shard records: first answer after {loaded:.1f} s; "
          f"RSS {sum(m['VmRSS'] for m in memories) / 1e6:.0f} MB once loaded ({len(pids)} processes: {each} MB), "
          f"peak of one {max(m['VmHWM'] for m in memories) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
