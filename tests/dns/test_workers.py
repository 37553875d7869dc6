"""`feddns serve --workers N` over real sockets: several processes on one port (SO_REUSEPORT),
each from its own records; a change in etcd reaches every one; a killed worker is replaced
while the others answer; one /metrics and one /ready for them all; the limits for the whole
server. And the default count: the CPUs the process may use (affinity, cgroup CPU quota)."""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dns.edns
import dns.exception
import dns.message
import dns.opcode
import dns.query
import dns.rcode
import pytest

from feddns.server import cpus
from harness.etcd import EtcdServer
from harness.ports import free_port, wait_until
from harness.process import child_env, descendants, ended
from harness.serve import ServeProcess, write_records
from tests.dns.conftest import RECORDS
from tests.dns.test_etcd import QNAME, put_design_keys
from tests.dns.test_protocol import MALFORMED, query_bytes, raw_exchange, rcode_of

WEB = "web.prod.fed.svc.federation."
STOPPED = re.compile(r"\(worker (\d+)\): stopped; this worker answered (\d+) queries")
MIB = 1024 * 1024


def answered_by_each(server: ServeProcess) -> dict[int, int]:
    """Stop the server (SIGTERM drains every worker) and read how many queries each answered."""
    assert server.child.stop() == 0
    return {int(worker): int(count) for worker, count in STOPPED.findall(server.log)}


def ask_many(server: ServeProcess, count: int, qname: str = WEB, cluster: str = "a") -> list[list[str]]:
    """``count`` queries, each from a socket of its own (a new source port, so the kernel spreads
    them over the workers' sockets); the addresses of each answer."""
    return [server.addresses(qname, cluster=cluster) for _ in range(count)]


def ready(server: ServeProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(server.metrics_url + "/ready", timeout=5) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def two_workers() -> Iterator[ServeProcess]:
    args = ["--metrics", "127.0.0.1:0", "--order", "stable", "--cache-size", "1MiB"]
    with ServeProcess(records=write_records(RECORDS), workers=2, extra_args=args) as server:
        wait_until(lambda: ready(server)[0] == 200, timeout=15, what="both workers ready")
        yield server


def test_two_workers_answer_on_one_port_and_metrics_sum_them(two_workers: ServeProcess):
    server = two_workers
    assert len(server.worker_pids()) == 2
    assert "listening on udp+tcp 127.0.0.1:" in server.log and "(2 workers)" in server.log
    answers = ask_many(server, 60)
    answers += [server.addresses(WEB, cluster="a", tcp=True) for _ in range(20)]
    assert all(a[0] == "10.0.0.1" for a in answers), answers
    values = server.metrics()
    assert values['feddns_dns_queries_total{qtype="A",rcode="NOERROR"}'] == 80
    assert values['feddns_dns_answers_total{source="cluster"}'] == 80
    assert values["feddns_dns_cache_limit_bytes"] == MIB  # the whole server's --cache-size, split in two
    loaded = len([line for line in RECORDS.splitlines() if line.startswith("/")])  # one record a key
    assert values["feddns_records_loaded"] == loaded and values["feddns_ready"] == 1  # alike in both: not summed
    each = answered_by_each(server)
    assert sorted(each) == [1, 2] and sum(each.values()) == 80
    assert all(count > 0 for count in each.values()), each  # both answered
    assert "feddns serve: stopped" in server.log


def test_sigterm_drains_every_worker(two_workers: ServeProcess):
    pids = two_workers.worker_pids()
    assert two_workers.child.stop() == 0
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert two_workers.log.count("stopped; this worker answered") == 2


def test_a_change_in_etcd_reaches_every_worker(etcd, etcd_prefix):
    put_design_keys(etcd, etcd_prefix)
    args = ["--metrics", "127.0.0.1:0"]
    with ServeProcess(etcd_url=etcd.url, prefix=etcd_prefix, workers=2, extra_args=args) as server:
        wait_until(lambda: ready(server)[0] == 200, timeout=15, what="both workers loaded")
        for n in range(5):
            address = f"108.120.45.{100 + n}"
            start = time.monotonic()
            revision = etcd.put(f"{etcd_prefix}/myfederation/myns/myservice/baz",
                                {"externalIP": address, "clusterIP": "10.56.62.6"})
            # feddns_records_revision is the revision of the worker furthest behind
            wait_until(lambda r=revision: server.metrics()["feddns_records_revision"] >= r, timeout=1,
                       what="the change applied by both workers")
            print(f"change {n}: in both workers after {(time.monotonic() - start) * 1000:.0f} ms")
            assert all(address in got for got in ask_many(server, 20, QNAME, None)), "a worker answers the old record"


class Asker:
    """Asks the server without pause from a thread, each query from a new socket, and keeps
    when each was answered or lost (``timeout`` seconds without a reply)."""

    def __init__(self, server: ServeProcess, timeout: float = 1.0) -> None:
        self.server = server
        self.timeout = timeout
        self.answered: list[float] = []
        self.lost: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ask, name="asker")

    def _ask(self) -> None:
        while not self._stop.is_set():
            try:
                reply = self.server.query(QNAME, cluster="foo", timeout=self.timeout)
                assert reply.answer, reply
                self.answered.append(time.monotonic())
            except dns.exception.Timeout:
                self.lost.append(time.monotonic())

    def since(self, moment: float) -> int:
        return sum(1 for t in self.answered if t > moment)

    def __enter__(self) -> "Asker":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_a_killed_worker_is_replaced_while_queries_are_answered(etcd, etcd_prefix):
    put_design_keys(etcd, etcd_prefix)
    args = ["--metrics", "127.0.0.1:0"]
    with ServeProcess(etcd_url=etcd.url, prefix=etcd_prefix, workers=2, extra_args=args) as server:
        wait_until(lambda: ready(server)[0] == 200, timeout=15, what="both workers loaded")
        first, second = server.worker_pids()
        with Asker(server) as asker:
            wait_until(lambda: asker.since(0) >= 50, timeout=10, what="queries answered")
            killed = time.monotonic()
            os.kill(second, signal.SIGKILL)
            wait_until(lambda: asker.since(killed) >= 20, timeout=5, what="queries answered after the kill")
            replaced = wait_until(lambda: [p for p in server.worker_pids() if p not in (first, second)],
                                  timeout=10, what="a new worker")
            wait_until(lambda: f"(pid {replaced[0]}) answering" in server.log, timeout=15, what="it answers")
            back = time.monotonic()
            wait_until(lambda: asker.since(back) >= 60, timeout=10, what="queries answered after it")
        assert len(asker.lost) <= 1, f"{len(asker.lost)} queries lost (at most the one in flight at the kill)"
        assert "was killed by SIGKILL; starting another in 0.1 s" in server.log
        assert ready(server)[0] == 200
        # the new worker follows etcd as well
        revision = etcd.put(f"{etcd_prefix}/myfederation/myns/myservice/baz",
                            {"externalIP": "108.120.45.77", "clusterIP": "10.56.62.6"})
        wait_until(lambda: server.metrics()["feddns_records_revision"] >= revision, timeout=1, what="applied")
        assert all("108.120.45.77" in got for got in ask_many(server, 20, QNAME, None))
        total = server.metrics()['feddns_dns_queries_total{qtype="A",rcode="NOERROR"}']
        each = answered_by_each(server)
    assert each[2] > 0, "the new worker answered no query"  # it took its place on the port
    assert total >= each[1] + each[2]  # and the killed one's count, as last scraped, still counts
    print(f"{len(asker.answered)} answered, {len(asker.lost)} lost; by worker at the end: {each}")


def test_ready_only_when_every_worker_has_loaded():
    unreachable = f"http://127.0.0.1:{free_port()}"
    args = ["--metrics", "127.0.0.1:0"]
    with ServeProcess(etcd_url=unreachable, workers=2, extra_args=args) as server:
        status, body = ready(server)
        assert status == 503
        assert "worker 1: no records loaded yet" in body and "worker 2: no records loaded yet" in body, body
        assert server.query("myservice.myns.myfederation.svc.federation.").rcode() == 2  # SERVFAIL, never NXDOMAIN


def test_tcp_connection_limit_is_for_the_whole_server():
    path = write_records(RECORDS)
    args = ["--metrics", "127.0.0.1:0", "--max-tcp-connections", "2"]
    with ServeProcess(records=path, workers=2, extra_args=args) as server:
        connections = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(12)]
        try:
            query = dns.message.make_query(WEB, "A").to_wire()
            alive = 0
            for sock in connections:
                sock.settimeout(2)
                try:
                    sock.sendall(len(query).to_bytes(2, "big") + query)
                    alive += len(sock.recv(65535)) > 0
                except OSError:  # reset: refused by the worker the kernel gave it to
                    pass
            values = server.metrics()
        finally:
            for sock in connections:
                sock.close()
    assert alive <= 2, f"{alive} connections answered with a limit of 2"
    assert values["feddns_dns_tcp_connections"] <= 2
    assert values["feddns_dns_tcp_refused_total"] >= 10


def refused_today() -> dict[str, bytes]:
    """Queries one process refuses (an error rcode) or drops, by what is wrong with them."""
    notify = dns.message.make_query(WEB, "A")
    notify.set_opcode(dns.opcode.NOTIFY)
    response = bytearray(query_bytes())
    response[2] |= 0x80  # QR
    bad_ecs = dns.edns.GenericOption(8, b"\x00\x01\x18\x00\x0a\xf0")  # /24 with 2 address bytes
    return {**MALFORMED,
            "NOTIFY": notify.to_wire(),
            "class CH": dns.message.make_query(WEB, "A", rdclass="CH").to_wire(),
            "AXFR at the apex": dns.message.make_query("federation.", "AXFR").to_wire(),
            "outside the zone": dns.message.make_query("example.com.", "A").to_wire(),
            "EDNS version 1": dns.message.make_query(WEB, "A", use_edns=1).to_wire(),
            "malformed ECS": dns.message.make_query(WEB, "A", use_edns=0, options=[bad_ecs]).to_wire(),
            "TKEY": dns.message.make_query(WEB, "TKEY").to_wire(),
            "shorter than a header": b"\x01\x02\x03" * 3,
            "a response": bytes(response)}


def outcome(port: int, packet: bytes) -> str:
    reply = raw_exchange(port, packet, timeout=0.3)
    if reply is None:
        return "dropped"
    try:
        return dns.rcode.to_text(dns.message.from_wire(reply).rcode())  # BADVERS is an extended rcode
    except dns.exception.DNSException:  # a reply without a question (NOTIMP to a bare header)
        return dns.rcode.to_text(rcode_of(reply))


def test_what_one_process_refuses_every_worker_refuses():
    path = write_records(RECORDS)
    with ServeProcess(records=path) as one, ServeProcess(records=path, workers=2) as two:
        for what, packet in refused_today().items():
            expected = outcome(one.port, packet)
            assert expected != "NOERROR", what
            # from six sockets: each worker gets some (all six to one worker once in 32 runs)
            assert {outcome(two.port, packet) for _ in range(6)} == {expected}, what


def feddns(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "feddns", "serve", "--example", "--listen", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=60, check=False, env=child_env())


@pytest.mark.parametrize(("args", "says"), [
    (["--workers", "0"], "--workers 0 is not at least 1"),
    (["--workers", "-2"], "--workers -2 is not at least 1"),
    (["--workers", "two"], "--workers: invalid int value"),
    (["--workers", "2", "--max-tcp-connections", "1"], "--max-tcp-connections 1 is fewer than the 2 workers"),
    (["--workers", "2", "--cache-size", "100KiB"], "--cache-size 100KiB split between 2 workers is less than 64KiB"),
    (["--workers", "2", "--cache-size", "63KiB"], "--cache-size 63KiB is less than 64KiB"),
    (["--workers", "2", "--max-tcp-connections", "0"], "--max-tcp-connections 0 is not at least 1"),
    (["--workers", "2", "--ttl", "-1"], "--ttl -1 is not from 0"),
])
def test_bad_flags_with_workers_exit_2_before_any_socket(args: list[str], says: str):
    result = feddns(*args)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr.strip().splitlines()[-1]
    assert "listening" not in result.stderr


def test_an_address_another_program_shares_by_so_reuseport_stays_refused():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        busy = f"127.0.0.1:{other.getsockname()[1]}"
        result = subprocess.run([sys.executable, "-m", "feddns", "serve", "--example", "--listen", busy,
                                 "--workers", "2"], capture_output=True, text=True, timeout=60, check=False,
                                env=child_env())
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"feddns serve: error: --listen {busy}: cannot listen: Address already in use")


# --- the default: the CPUs this process may use ------------------------------------------------------


def fake_proc(tmp_path: Path, cgroup: str, mountinfo: str) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text(mountinfo)
    return proc


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


V1_MOUNTS = ("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
             "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
             "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n")
V2_MOUNTS = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.mark.parametrize(("cgroup", "mounts", "files", "quota"), [
    pytest.param("0::/kubepods/pod1/c1\n", V2_MOUNTS, {"sys/fs/cgroup/kubepods/pod1/c1/cpu.max": "150000 100000\n"},
                 1.5, id="v2 container"),
    pytest.param("0::/kubepods/pod1/c1\n", V2_MOUNTS, {"sys/fs/cgroup/kubepods/pod1/c1/cpu.max": "max 100000\n",
                                                       "sys/fs/cgroup/kubepods/pod1/cpu.max": "300000 100000\n"},
                 3.0, id="v2 pod above"),
    pytest.param("0::/\n", V2_MOUNTS, {"sys/fs/cgroup/cpu.max": "max 100000\n"}, None, id="v2 none"),
    pytest.param("4:memory:/x\n3:cpu,cpuacct:/kubepods/pod1/c1\n", V1_MOUNTS,
                 {"sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_quota_us": "200000\n",
                  "sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1/cpu.cfs_period_us": "100000\n"}, 2.0, id="v1"),
    pytest.param("3:cpu,cpuacct:/\n", V1_MOUNTS, {"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
                                                  "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
                 None, id="v1 none"),
    # in a cgroup namespace the path is "/" and the mount is the container's own cgroup
    pytest.param("0::/\n", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
                 {"sys/fs/cgroup/cpu.max": "50000 100000\n"}, 0.5, id="v2 namespace"),
])
def test_cgroup_cpu_quota(tmp_path: Path, cgroup: str, mounts: str, files: dict[str, str], quota: float | None):
    for name, text in files.items():
        write(tmp_path / name, text)
    proc = fake_proc(tmp_path, cgroup, mounts)
    assert cpus.quota_cpus(proc, tmp_path) == quota
    whole = len(os.sched_getaffinity(0)) if quota is None else min(len(os.sched_getaffinity(0)), max(1, int(quota)))
    assert cpus.available(proc, tmp_path) == whole


def test_default_workers_follow_the_affinity():
    """Under taskset to one CPU, the default is one process, as today."""
    result = subprocess.run(["taskset", "-c", "0", sys.executable, "-c",
                             "from feddns.server import cpus; print(cpus.available())"],
                            capture_output=True, text=True, check=True, env=child_env())
    assert result.stdout.strip() == "1"
    assert cpus.available() == min(len(os.sched_getaffinity(0)), int(cpus.quota_cpus() or 1 << 20))


def shared_dirty_bytes(pid: int) -> int:
    """The anonymous pages ``pid`` shares with another process and that were written before
    (``Shared_Dirty`` of ``/proc/PID/smaps_rollup``): a fork's heap, not a library's code."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "Shared_Dirty":
            return int(value.split()[0]) * 1024
    raise AssertionError(f"no Shared_Dirty for {pid}")


def test_workers_are_forked_from_one_read_of_etcd_and_share_it(etcd, etcd_prefix):
    """With etcd, the records are read once and the workers forked from that read: the log says
    so once, each worker answers at once, and their heaps are shared pages (a fresh interpreter
    per worker shares none: each would hold its own copy)."""
    put_design_keys(etcd, etcd_prefix)
    with ServeProcess(etcd_url=etcd.url, prefix=etcd_prefix, workers=2, extra_args=["--metrics", "127.0.0.1:0"],
                      start_timeout=30) as server:
        assert server.log.count("every value parsed: forking the workers from them") == 1, server.log
        assert ready(server)[0] == 200
        assert all(got for got in ask_many(server, 20, QNAME, None))
        pids = server.worker_pids()
        assert len(pids) == 2
        for pid in pids:
            assert shared_dirty_bytes(pid) > 8 * MIB, f"worker {pid} shares no heap with the others"
        each = answered_by_each(server)
    assert sorted(each) == [1, 2] and all(each.values()), each


def test_etcd_down_at_start_each_worker_reads_it_once_it_is_back(etcd_prefix):
    """When etcd cannot be read before the fork, the workers start all the same, answer SERVFAIL
    as one process does until a load, and read etcd themselves once it answers."""
    own = EtcdServer()
    own.start()
    try:
        put_design_keys(own, etcd_prefix)
        own.stop()
        with ServeProcess(etcd_url=own.url, prefix=etcd_prefix, workers=2, extra_args=["--metrics", "127.0.0.1:0"],
                          start_timeout=30) as server:
            assert "cannot read etcd before forking the workers" in server.log, server.log
            assert server.query(QNAME, cluster="foo").rcode() == dns.rcode.SERVFAIL
            own.start()
            wait_until(lambda: ready(server)[0] == 200, timeout=30, what="both workers loaded")
            assert all(got for got in ask_many(server, 20, QNAME, None))
    finally:
        own.destroy()


@contextlib.contextmanager
def reading_a_frozen_etcd(etcd_prefix: str) -> Iterator[tuple["subprocess.Popen[str]", list[int]]]:
    """``feddns serve --workers 2`` started on an etcd (of its own) frozen with SIGSTOP, once its
    template and the template's reading child are running: the process and those below it."""
    own = EtcdServer()
    own.start()
    try:
        put_design_keys(own, etcd_prefix)
        own.pause()
        server = ServeProcess(etcd_url=own.url, prefix=etcd_prefix, workers=2)
        proc = subprocess.Popen(server.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=child_env())
        try:
            wait_until(lambda: len(descendants(proc.pid)) >= 2, timeout=15, what="the template and its reader")
            yield proc, descendants(proc.pid)
        finally:
            proc.kill()
            proc.communicate(timeout=15)
    finally:
        own.destroy()


def test_stopped_while_etcd_is_frozen_before_the_fork(etcd_prefix):
    """SIGTERM while the read before the fork waits on a frozen etcd: the server stops at once
    and leaves no process behind (not the template, not the child reading etcd)."""
    with reading_a_frozen_etcd(etcd_prefix) as (proc, below):
        time.sleep(0.5)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
        assert proc.returncode == 0, out
        assert time.monotonic() - stopped < 2.5, out  # an etcd call times out after 5 s
        assert not [pid for pid in below if not ended(pid)], f"left running: {below}"


def test_a_killed_parent_takes_the_template_and_its_reader_along(etcd_prefix):
    """SIGKILL of the first process while the read before the fork waits on a frozen etcd: the
    template (which holds every worker's socket) and its reading child die with it, and no worker
    is forked afterwards to hold the port."""
    with reading_a_frozen_etcd(etcd_prefix) as (proc, below):
        proc.kill()
        proc.wait(timeout=5)
        wait_until(lambda: all(ended(pid) for pid in below), timeout=2,
                   what=f"the template and its reader gone ({below})")  # an etcd call times out after 5 s
