"""How fast the FederatedDNSController fills etcd, and how fast one change reaches it.

Starts a real etcd (Debian's `etcd-server`) and --clusters fake API servers
(tests/support/fakekube.py) in this process, each holding --services federated
Services of type LoadBalancer with one EndpointSlice each, then runs
`feddns controller` as a child process (one Python process, as deployed) and
measures:

- the initial sync: from starting the controller until etcd holds every shard
  record and cluster record (polled every 20 ms);
- the change latency, --changes times: move one Service's load balancer IP in
  one cluster and poll etcd until the shard record carries it (every 2 ms).

Prints the figures, the controller's CPU time and resident memory.

Usage: python bench/controller_sync.py [--clusters 5] [--services 2000] [--changes 50]
"""

import argparse
import base64
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from tests.support.etcd import EtcdServer  # noqa: E402  (the test suite's etcd runner)
from tests.support.fakekube import FakeKube, endpoint_slice, service  # noqa: E402
from tests.support.ports import wait_until  # noqa: E402

FEDERATION = "myfederation"
LABEL = {"federation.feddns.io/name": FEDERATION}


def fill(fake: FakeKube, index: int, services: int) -> None:
    """``services`` federated Services (ns0..ns19) and their EndpointSlices."""
    for i in range(services):
        namespace, name = f"ns{i % 20}", f"svc{i}"
        fake.apply(service(namespace, name, labels=LABEL, type="LoadBalancer",
                           load_balancer_ips=[f"198.{18 + index}.{i // 250}.{i % 250 + 1}"]))
        fake.apply(endpoint_slice(namespace, name, ready=2, not_ready=1))


def count(etcd: EtcdServer, prefix: str) -> int:
    end = bytearray(prefix.encode())
    end[-1] += 1
    reply = etcd.call("/v3/kv/range", {"key": base64.b64encode(prefix.encode()).decode(),
                                       "range_end": base64.b64encode(bytes(end)).decode(), "count_only": True})
    return int(reply.get("count", 0))


def value(etcd: EtcdServer, key: str) -> str:
    reply = etcd.call("/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()})
    kvs = reply.get("kvs") or [{}]
    return base64.b64decode(kvs[0].get("value", "")).decode()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=5)
    parser.add_argument("--services", type=int, default=2000, help="federated Services per cluster")
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--log-level", default="warning", help="the controller's (info logs every record)")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="feddns-bench-"))
    etcd = EtcdServer()
    etcd.start()
    fakes = [FakeKube(f"c{i}", bookmark_interval=30) for i in range(args.clusters)]
    controller = None
    try:
        started = time.monotonic()
        for index, fake in enumerate(fakes):
            fake.start()
            fill(fake, index, args.services)
        print(f"{args.clusters} fake clusters x {args.services} Services loaded in "
              f"{time.monotonic() - started:.1f} s")
        config = {
            "federation": FEDERATION,
            "etcd": {"endpoints": [etcd.url]},
            "clusters": [{"name": f.name, "kubeconfig": f.write_kubeconfig(str(workdir / f"{f.name}.kubeconfig")),
                          "zone": f"zone-{f.name}", "region": "region"} for f in fakes],
        }
        (workdir / "controller.yaml").write_text(yaml.safe_dump(config))
        expected = args.clusters * args.services + args.clusters
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        started = time.monotonic()
        controller = subprocess.Popen(
            [sys.executable, "-m", "feddns", "controller", "--config", str(workdir / "controller.yaml"),
             "--log-level", args.log_level], cwd=REPO, env=env,
            stdout=subprocess.DEVNULL, stderr=open(workdir / "controller.log", "wb"))
        wait_until(lambda: count(etcd, f"/{FEDERATION}/") >= expected, timeout=600, interval=0.02,
                   what=f"{expected} keys in etcd")
        initial = time.monotonic() - started
        cpu = cpu_seconds(controller.pid)
        print(f"initial sync: {expected} records in {initial:.2f} s "
              f"(controller CPU {cpu:.2f} s, RSS {rss_mib(controller.pid):.0f} MiB)")

        latencies = []
        rng = random.Random(1)
        for n in range(args.changes):
            index = rng.randrange(args.clusters)
            i = rng.randrange(args.services)
            namespace, name, new_ip = f"ns{i % 20}", f"svc{i}", f"203.0.{n // 250}.{n % 250 + 1}"
            key = f"/{FEDERATION}/{namespace}/{name}/{fakes[index].name}"
            obj = fakes[index].get("Service", namespace, name)
            obj["status"]["loadBalancer"]["ingress"] = [{"ip": new_ip}]
            started = time.monotonic()
            fakes[index].apply(obj)
            wait_until(lambda: json.loads(value(etcd, key) or "{}").get("externalIP") == new_ip,
                       timeout=30, interval=0.002, what=f"{key} = {new_ip}")
            latencies.append((time.monotonic() - started) * 1000)
        latencies.sort()
        print(f"one change to etcd ({args.changes} changes): median {statistics.median(latencies):.1f} ms, "
              f"p90 {latencies[int(len(latencies) * 0.9) - 1]:.1f} ms, max {latencies[-1]:.1f} ms")
        print(f"controller CPU total {cpu_seconds(controller.pid):.2f} s, RSS {rss_mib(controller.pid):.0f} MiB")
    finally:
        if controller is not None:
            controller.terminate()
            controller.wait(30)
        for fake in fakes:
            fake.close()
        etcd.destroy()


if __name__ == "__main__":
    main()
