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

Prints the figures, the controller's CPU time, its peak resident memory (VmHWM)
and its resident memory after the sync (VmRSS). With ``--compare REV`` the same
is measured, in the same run and against the same fake clusters, for the code of
git revision REV (``git archive`` into a temporary directory), one controller
after the other, each into its own etcd prefix; the figures are printed side by
side with their ratio.

Usage: python bench/controller_sync.py [--clusters 5] [--services 2000] [--changes 50] [--compare main]
"""

import argparse
import base64
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from harness.etcd import EtcdServer  # noqa: E402  (the test suite's etcd runner)
from harness.objects import endpoint_slice, service  # noqa: E402
from harness.ports import wait_until  # noqa: E402
from tests.support.fakekube import FakeKube  # noqa: E402

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


def memory_mib(pid: int, field: str = "VmRSS") -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (peak resident) of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def checkout(revision: str) -> Path:
    """The tree of git ``revision`` of this repository, in a temporary directory."""
    target = Path(tempfile.mkdtemp(prefix=f"feddns-{revision.replace('/', '-')}-"))
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def measure(code: Path, label: str, fakes: list[FakeKube], etcd: EtcdServer, workdir: Path,
            args: argparse.Namespace) -> dict[str, float]:
    """Run the controller of ``code`` until etcd holds every record, then time ``args.changes``
    changes; returns its figures."""
    prefix = f"/{label}"  # "/current" and "/compared": of different lengths (change_latency)
    config = {
        "federation": FEDERATION,
        "etcd": {"endpoints": [etcd.url], "prefix": prefix},
        "clusters": [{"name": f.name, "kubeconfig": f.write_kubeconfig(str(workdir / f"{f.name}.kubeconfig")),
                      "zone": f"zone-{f.name}", "region": "region"} for f in fakes],
    }
    (workdir / f"{label}.yaml").write_text(yaml.safe_dump(config))
    expected = args.clusters * args.services + args.clusters
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["PYTHONPATH"] = str(code)
    started = time.monotonic()
    with open(workdir / f"{label}.log", "wb") as log:
        controller = subprocess.Popen(
            [sys.executable, "-m", "feddns", "controller", "--config", str(workdir / f"{label}.yaml"),
             "--log-level", args.log_level], cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_until(lambda: count(etcd, f"{prefix}/{FEDERATION}/") >= expected, timeout=900, interval=0.02,
                   what=f"{expected} keys in etcd")
        figures = {"sync_s": time.monotonic() - started, "cpu_s": cpu_seconds(controller.pid),
                   "peak_mib": memory_mib(controller.pid, "VmHWM"), "rss_mib": memory_mib(controller.pid)}
        figures["change_ms"] = change_latency(fakes, etcd, prefix, args)
        return figures
    finally:
        controller.terminate()
        controller.wait(30)


def change_latency(fakes: list[FakeKube], etcd: EtcdServer, prefix: str, args: argparse.Namespace) -> float:
    """Median milliseconds from moving a load balancer IP in a cluster to etcd holding it."""
    latencies = []
    rng = random.Random(1)
    for n in range(args.changes):
        index = rng.randrange(args.clusters)
        i = rng.randrange(args.services)
        # a run of its own second octet: the compared run must not find its address already there
        namespace, name, new_ip = f"ns{i % 20}", f"svc{i}", f"203.{len(prefix)}.{n // 250 % 250}.{n % 250 + 1}"
        key = f"{prefix}/{FEDERATION}/{namespace}/{name}/{fakes[index].name}"
        obj = fakes[index].get("Service", namespace, name)
        obj["status"]["loadBalancer"]["ingress"] = [{"ip": new_ip}]
        started = time.monotonic()
        fakes[index].apply(obj)
        wait_until(lambda key=key, new_ip=new_ip: json.loads(value(etcd, key) or "{}").get("externalIP") == new_ip,
                   timeout=30, interval=0.002, what=f"{key} = {new_ip}")
        latencies.append((time.monotonic() - started) * 1000)
    return statistics.median(latencies) if latencies else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=5)
    parser.add_argument("--services", type=int, default=2000, help="federated Services per cluster")
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--log-level", default="warning", help="the controller's (info logs every record)")
    parser.add_argument("--compare", metavar="REV", help="also measure the controller of git revision REV")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="feddns-bench-"))
    etcd = EtcdServer()
    etcd.start()
    fakes = [FakeKube(f"c{i}", bookmark_interval=30) for i in range(args.clusters)]
    try:
        started = time.monotonic()
        for index, fake in enumerate(fakes):
            fake.start()
            fill(fake, index, args.services)
        print(f"{args.clusters} fake clusters x {args.services} Services loaded in "
              f"{time.monotonic() - started:.1f} s")
        runs = {"this tree": measure(REPO, "current", fakes, etcd, workdir, args)}
        if args.compare:
            tree = checkout(args.compare)
            try:
                runs[args.compare] = measure(tree, "compared", fakes, etcd, workdir, args)
            finally:
                shutil.rmtree(tree, ignore_errors=True)
        names = {"sync_s": "initial sync (s)", "cpu_s": "controller CPU (s)", "peak_mib": "peak RSS (MiB)",
                 "rss_mib": "RSS after sync (MiB)", "change_ms": "one change, median (ms)"}
        print(f"{'':26}" + "".join(f"{label:>14}" for label in runs) + ("       ratio" if len(runs) > 1 else ""))
        for field, name in names.items():
            values = [figures[field] for figures in runs.values()]
            ratio = f"{values[0] / values[1]:>12.2f}" if len(values) > 1 and values[1] else ""
            print(f"{name:26}" + "".join(f"{v:>14.1f}" for v in values) + ratio)
    finally:
        for fake in fakes:
            fake.close()
        etcd.destroy()


if __name__ == "__main__":
    main()
