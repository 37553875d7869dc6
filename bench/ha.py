"""High availability, measured: DNS answers and etcd's records through etcd and controller faults.

On loopback, in one run:

- a 3-member etcd cluster (Debian's etcd 3.4), every component given all three URLs;
- 2 ``feddns serve`` replicas, each under dnsperf load (Debian's dnsperf, UDP, one dnsperf
  per replica at --qps queries a second, names of existing services, as an external client);
- 2 ``feddns controller`` replicas (the default 15 s lease) against --clusters fake API
  servers (tests/support/fakekube.py) holding --services federated Services each, with a
  churn of changes (a load balancer IP moved, a ready count changed, a Service added or
  deleted) every --churn seconds throughout.

The faults, one after the other, each after the system has settled:

1. kill (SIGKILL) one etcd member;
2. kill the leading controller, and time until the other one writes a change made just
   after the kill (the target is the lease, 15 s, plus 1 s);
3. restart both;
4. stop the etcd leader with SIGSTOP for 10 s, then let it go on.

Then the load stops and the figures are printed: DNS queries sent, lost (no answer within
dnsperf's 5 s) and answered other than NOERROR (the target is 0 failed); the takeover time;
and whether etcd holds exactly the records the fake clusters say (computed here from the
churn's own state, not by the controller's code).

dnsperf runs until the faults are over and is then stopped (SIGINT); queries still in
flight at that moment are reported apart.

Usage: python bench/ha.py [--clusters 3] [--services 300] [--qps 500] [--churn 0.2]
"""

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from harness.controller import ControllerProcess  # noqa: E402  (the test suite's runners)
from harness.etcd import EtcdServer, etcd_cluster  # noqa: E402
from harness.objects import endpoint_slice, service  # noqa: E402
from harness.ports import wait_until  # noqa: E402
from harness.serve import ServeProcess  # noqa: E402
from tests.support.fakekube import FakeKube  # noqa: E402

FEDERATION = "myfederation"
LABEL = {"federation.feddns.io/name": FEDERATION}
PREFIX = "/ha"
LEASE = 15


class Churn:
    """The fake clusters' federated Services, changed at random; ``expected()`` is what
    etcd must hold for them (docs/reference.md section 4)."""

    def __init__(self, fakes: list[FakeKube], services: int) -> None:
        self.fakes, self.rng, self.lock = fakes, random.Random(7), threading.Lock()
        self.state: dict[tuple[str, str], tuple[str, str, int]] = {}  # (cluster, name) -> (clusterIP, LB IP, ready)
        self.changes = 0
        for index in range(len(fakes)):
            for i in range(services):
                self._put(index, f"svc{i}", f"10.{index}.{i // 250}.{i % 250 + 1}",
                          f"198.{18 + index}.{i // 250}.{i % 250 + 1}", 2)

    def _put(self, index: int, name: str, cluster_ip: str, lb_ip: str, ready: int) -> None:
        fake = self.fakes[index]
        fake.apply(service("app", name, labels=LABEL, type="LoadBalancer", cluster_ip=cluster_ip,
                           load_balancer_ips=[lb_ip]))
        fake.apply(endpoint_slice("app", name, ready=ready, not_ready=1))
        self.state[(fake.name, name)] = (cluster_ip, lb_ip, ready)

    def step(self) -> str:
        """One change in one cluster; returns the etcd key it must change."""
        with self.lock:
            index = self.rng.randrange(len(self.fakes))
            fake = self.fakes[index]
            names = sorted(name for cluster, name in self.state if cluster == fake.name)
            name = self.rng.choice(names)
            cluster_ip, lb_ip, ready = self.state[(fake.name, name)]
            action = self.rng.random()
            self.changes += 1
            if action < 0.1 and len(names) > 1:
                fake.delete("Service", "app", name)
                fake.delete("EndpointSlice", "app", f"{name}-abcde")
                del self.state[(fake.name, name)]
            elif action < 0.2:
                new = f"new{self.changes}"
                self._put(index, new, f"10.{index}.250.{self.changes % 250 + 1}",
                          f"203.{index}.{self.changes // 250 % 250}.{self.changes % 250 + 1}", 1)
                name = new
            elif action < 0.6:
                self._put(index, name, cluster_ip, f"203.{100 + index}.{self.changes // 250 % 250}."
                          f"{self.changes % 250 + 1}", ready)
            else:
                self._put(index, name, cluster_ip, lb_ip, (ready + 1) % 4)
            return f"{PREFIX}/{FEDERATION}/app/{name}/{fake.name}"

    def expected(self) -> dict[str, Any]:
        with self.lock:
            out: dict[str, Any] = {f"{PREFIX}/{FEDERATION}/_clusters/{f.name}": {
                "zone": f"zone-{f.name}", "region": "region", "podNetwork": "isolated"} for f in self.fakes}
            for (cluster, name), (cluster_ip, lb_ip, ready) in self.state.items():
                out[f"{PREFIX}/{FEDERATION}/app/{name}/{cluster}"] = {
                    "clusterIP": cluster_ip, "clusterIPs": [cluster_ip], "externalIP": lb_ip, "externalIPs": [lb_ip],
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "ready": ready}
            return out


def etcd_records(member: EtcdServer) -> dict[str, Any]:
    return {key: json.loads(value) for key, value in member.get_prefix(f"{PREFIX}/").items()}


def dnsperf(port: int, names: Path, qps: int, seconds: int, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", str(names), "-l", str(seconds),
                             "-Q", str(qps), "-c", "4", "-t", "5"], stdout=open(out, "wb"), stderr=subprocess.STDOUT)


def dnsperf_figures(text: str) -> dict[str, int]:
    """Queries sent, lost, still in flight when the load was stopped (``interrupted``), and
    answered with an rcode other than NOERROR, from dnsperf's report."""
    def count(what: str) -> int:
        found = re.search(rf"Queries {what}:\s+(\d+)", text)
        return int(found.group(1)) if found else 0

    codes = dict(re.findall(r"(\w+) (\d+) \(", text.split("Response codes:", 1)[1].splitlines()[0]))
    return {"sent": count("sent"), "lost": count("lost"), "interrupted": count("interrupted"),
            "not_noerror": sum(int(n) for code, n in codes.items() if code != "NOERROR")}


def leader_of(members: list[EtcdServer]) -> EtcdServer:
    """The member that is the raft leader (asked of the first member that answers)."""
    for member in members:
        try:
            status = member.call("/v3/maintenance/status", {}, timeout=2)
        except OSError:
            continue
        for candidate in members:
            if candidate.proc is not None and candidate.proc.poll() is None:
                try:
                    if candidate.call("/v3/maintenance/status", {}, timeout=2)["header"]["member_id"] \
                            == status["leader"]:
                        return candidate
                except OSError:
                    continue
    raise RuntimeError("no etcd leader")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--services", type=int, default=300, help="federated Services per cluster")
    parser.add_argument("--qps", type=int, default=500, help="queries a second sent to each serve replica")
    parser.add_argument("--churn", type=float, default=0.2, help="seconds between two changes in the clusters")
    return parser.parse_args()


class HaRun:
    """One run of the benchmark: the processes it started, and the phases in order."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = Path(tempfile.mkdtemp(prefix="feddns-ha-"))
        self.members = etcd_cluster(3)
        self.fakes = [FakeKube(f"c{i}", bookmark_interval=5) for i in range(args.clusters)]
        self.started: list[Any] = []
        self.controllers: list[ControllerProcess] = []
        self.serves: list[ServeProcess] = []
        self.stop_churn = threading.Event()
        self.churner: threading.Thread | None = None
        self.began = time.monotonic()

    def start(self) -> Churn:
        """The fake clusters, two controllers (after their first sync) and two serve replicas."""
        urls = [m.url for m in self.members]
        for fake in self.fakes:
            fake.start()
        churn = Churn(self.fakes, self.args.services)
        workdir = self.workdir
        config = {"federation": FEDERATION, "etcd": {"endpoints": urls, "prefix": PREFIX},
                  "clusters": [{"name": f.name, "kubeconfig": f.write_kubeconfig(str(workdir / f"{f.name}.kubeconfig")),
                                "zone": f"zone-{f.name}", "region": "region"} for f in self.fakes]}
        (workdir / "controller.yaml").write_text(yaml.safe_dump(config))
        self.controllers = [ControllerProcess(str(workdir / "controller.yaml"), workdir / f"controller{i}.log").start()
                            for i in range(2)]
        self.started.extend(self.controllers)
        wait_until(lambda: etcd_records(self.members[0]) == churn.expected(), timeout=120, what="the first sync")
        self.serves = [ServeProcess(etcd_url=urls[0], prefix=PREFIX, extra_args=["--etcd", urls[1], "--etcd", urls[2]])
                       for _ in range(2)]
        for serve in self.serves:
            serve.start()
            self.started.append(serve)
        for serve in self.serves:
            wait_until(lambda serve=serve: serve.addresses(f"svc0.app.{FEDERATION}.svc.federation."), timeout=30,
                       what="serve answering")
        return churn

    def load(self, churn: Churn) -> list[subprocess.Popen[bytes]]:
        """Start the churn thread and one dnsperf per serve replica."""
        names = self.workdir / "names.txt"
        names.write_text("".join(f"svc{i}.app.{FEDERATION}.svc.federation. A\n" for i in range(self.args.services)))

        def churning() -> None:
            while not self.stop_churn.wait(self.args.churn):
                churn.step()

        self.churner = threading.Thread(target=churning, daemon=True)
        self.churner.start()
        load = [dnsperf(s.port, names, self.args.qps, 3600, self.workdir / f"dnsperf{i}.txt")
                for i, s in enumerate(self.serves)]
        self.began = time.monotonic()
        return load

    def settle(self, what: str) -> None:
        time.sleep(3)  # a steady stretch between faults (a benchmark's pacing, not a wait for a condition)
        print(f"{time.monotonic() - self.began:6.1f} s  {what}", flush=True)

    def faults(self, churn: Churn) -> float:
        """Kill an etcd member and the leading controller, then freeze the etcd leader;
        returns the seconds the other controller took to write."""
        members = self.members
        self.settle("load running")
        killed = members[0]
        assert killed.proc is not None
        killed.proc.kill()
        killed.proc.wait()
        self.settle("etcd member m0 killed")

        leader = next(c for c in self.controllers if c.metric("feddns_controller_leader") == 1)
        leader.kill()
        killed_at = time.monotonic()
        key = churn.step()  # a change only the other controller can write
        wanted = churn.expected().get(key)  # None: the change deleted the Service
        wait_until(lambda: etcd_records(members[1]).get(key) == wanted, timeout=60, interval=0.05,
                   what="the other controller writing")
        takeover = time.monotonic() - killed_at
        self.settle(f"leading controller killed; the other wrote after {takeover:.1f} s")

        killed.start()
        leader.start()
        self.settle("etcd member m0 and the killed controller restarted")

        stalled = leader_of(members)
        assert stalled.proc is not None
        stalled.proc.send_signal(signal.SIGSTOP)
        time.sleep(10)  # the fault itself: the etcd leader frozen for 10 s
        stalled.proc.send_signal(signal.SIGCONT)
        self.settle(f"etcd leader {stalled.name} stopped for 10 s and resumed")
        return takeover

    def report(self, churn: Churn, load: list[subprocess.Popen[bytes]], takeover: float) -> None:
        """Stop the load and the churn, wait for etcd to match, and print the figures."""
        for process in load:  # stopped by SIGINT: it reports queries still in flight as interrupted
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
        self.stop_churn.set()
        if self.churner is not None:
            self.churner.join()
        matched = True
        try:
            wait_until(lambda: etcd_records(self.members[1]) == churn.expected(), timeout=60, interval=0.2,
                       what="etcd equal to the clusters")
        except TimeoutError:
            matched = False
        figures = [dnsperf_figures((self.workdir / f"dnsperf{i}.txt").read_text()) for i in range(len(self.serves))]
        exits = [c.proc.returncode for c in self.controllers if c.proc is not None and c.proc.poll() is not None]
        print()
        print(f"DNS queries over {time.monotonic() - self.began:.0f} s: {sum(f['sent'] for f in figures)} sent, "
              f"{sum(f['lost'] for f in figures)} lost, {sum(f['not_noerror'] for f in figures)} answered other "
              f"than NOERROR (target 0 failed); {sum(f['interrupted'] for f in figures)} still in flight when "
              "the load was stopped")
        print(f"leading controller killed: the other wrote after {takeover:.1f} s (target {LEASE + 1} s)")
        print(f"changes made in the clusters: {churn.changes}; etcd equal to the clusters at the end: "
              f"{'yes' if matched else 'NO'} (target: exactly)")
        print(f"controllers that exited on their own: {len(exits)}; files in {self.workdir}")

    def close(self) -> None:
        self.stop_churn.set()
        for process in self.started:
            if isinstance(process, ControllerProcess):
                if process.proc is not None and process.proc.poll() is None:
                    process.terminate()
            else:
                process.stop()
        for member in self.members:
            if member.proc is not None:
                member.proc.send_signal(signal.SIGCONT)
            member.destroy()
        for fake in self.fakes:
            fake.close()


def main() -> None:
    run = HaRun(_arguments())
    try:
        churn = run.start()
        load = run.load(churn)
        takeover = run.faults(churn)
        run.report(churn, load, takeover)
    finally:
        run.close()


if __name__ == "__main__":
    os.environ.pop("KUBERNETES_SERVICE_HOST", None)
    main()
