"""etcd calls require a leader: a real partition of a three-member etcd 3.4 cluster.

The members' peer traffic goes through proxies on loopback (harness/peernet.py), which
cut one member off from the other two, or every member from every other, and heal the
cluster again. A member cut off loses its leader after one to two election timeouts and
then, asked as feddns asks (``hasleader=true``, feddns.etcd.client.REQUIRE_LEADER), fails
every call at once. Asked without it, it would answer reads from what it last knew (a
serializable read, a watch) or make them wait for etcd's own request timeout.

- every kind of call feddns makes (serve, the controller, the SkyDNS v3 store) fails at
  once with ``no leader`` on the member cut off;
- ``feddns serve`` attached to that member moves to one with a leader within the election
  timeout plus 5 s, logs it once, answers a change made in the majority, and loses no
  query of a steady load;
- with no leader anywhere it serves its last records, and ``/ready``'s body and
  ``feddns_etcd_leader`` say so; it recovers when a leader is back;
- the SkyDNS v3 store skips the member without a leader within its request.
"""

import asyncio
import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import dns.exception
import dns.rcode
import pytest
from aetcd import rpc

from feddns.etcd.client import EtcdClient, prefix_range_end
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.etcd.failures import describe, failure_kind
from harness.etcd import EtcdServer, etcd_cluster
from harness.peernet import PeerNetwork
from harness.ports import wait_until
from harness.serve import ServeProcess
from stubzone.backends.skydns_etcd3 import SkyDNSEtcd3
from stubzone.backends.skydns_layout import SkyDNSLayout
from stubzone.model import Nameserver, StubDomains

ELECTION_TIMEOUT = 1.0
"""Seconds: etcd's ``--election-timeout`` here (its default, 1000 ms, with the default 100 ms heartbeat)."""

QNAME = "myservice.myns.myfederation.svc.federation."
SHARD = "/myfederation/myns/myservice/foo"
CLUSTER = "/myfederation/_clusters/foo"


@dataclass
class Cluster:
    """Three etcd members whose peer traffic crosses ``network``."""

    members: list[EtcdServer]
    network: PeerNetwork

    def leader(self) -> EtcdServer:
        """The member the others follow (asked of the first that answers with one)."""
        def find() -> EtcdServer | None:
            for member in self.members:
                status = member.call("/v3/maintenance/status", {}, timeout=2)
                if int(status.get("leader", 0)):
                    return next(m for m in self.members if _member_id(m) == status["leader"])
            return None
        return wait_until(find, timeout=10, what="a leader")

    def heal(self) -> None:
        """Join every member again, and wait until all of them follow one leader."""
        self.network.heal()

        def agreed() -> bool:
            leaders = {member.call("/v3/maintenance/status", {}, timeout=2).get("leader", "0")
                       for member in self.members}
            return len(leaders) == 1 and leaders != {"0"}
        wait_until(agreed, timeout=20, interval=0.05, what="one leader for all members")


def _member_id(member: EtcdServer) -> str:
    return str(member.call("/v3/maintenance/status", {}, timeout=2)["header"]["member_id"])


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    network = PeerNetwork()
    members = etcd_cluster(3, network=network, extra_args=[
        "--heartbeat-interval", "100", "--election-timeout", str(int(ELECTION_TIMEOUT * 1000))])
    try:
        yield Cluster(members, network)
    finally:
        for member in members:
            member.destroy()
        network.close()


@pytest.fixture
def healed(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster, joined again after the test whatever it cut."""
    try:
        yield cluster
    finally:
        cluster.heal()


def cut_off(cluster: Cluster, member: EtcdServer) -> float:
    """Cut ``member`` off from the others; returns when (monotonic) it was cut."""
    cut_at = time.monotonic()
    cluster.network.isolate(member.name)
    return cut_at


# -- every call feddns makes ---------------------------------------------------------------------------



async def _range_page(client: EtcdClient) -> object:
    """A page read as feddns.store.etcdfeed reads it: the stub itself, with the client's metadata."""
    await client.connect()
    return await client.kvstub.Range(rpc.RangeRequest(key=b"/a/", range_end=b"/a0", limit=10),
                                     timeout=client._timeout, metadata=client.metadata)


async def _first_event(client: EtcdClient) -> object:
    async for event in await client.watch(b"/a/", range_end=b"/a0"):
        return event
    return None


async def _watch_once(client: EtcdClient) -> object:
    found = await client.watch_once(b"/leader/key", timeout=10)
    if isinstance(found, Exception):  # aetcd returns the error that ended the stream
        raise found
    return found


CALLS: dict[str, Callable[[EtcdClient], Awaitable[object]]] = {
    "get (controller: the election key)": lambda c: c.get(b"/leader/key"),
    "get_range (controller: resync; SkyDNS v3 store)": lambda c: c.get_range(b"/a/", prefix_range_end(b"/a/")),
    "range page (serve: first load)": _range_page,
    "transaction (controller: guarded writes; SkyDNS v3 store)": lambda c: c.transaction([], [], []),
    "lease (controller: campaign)": lambda c: c.lease(5),
    "refresh_lease (controller: keep-alive)": lambda c: c.refresh_lease(1),
    "watch (serve: records; controller: repair)": _first_event,
    "watch_once (controller: following the leader)": _watch_once,
    "check_leader (serve: beside its watch)": lambda c: c.check_leader(),
}


def ask_every_call(url: str) -> dict[str, tuple[str, float]]:
    """Each call of :data:`CALLS` on a new client of ``url``: how it ended, and after how long."""
    async def ask(name: str) -> tuple[str, float]:
        client = EtcdEndpoints([url], timeout=5).client()
        started = time.monotonic()
        try:
            await asyncio.wait_for(CALLS[name](client), 8)
            outcome = "answered"
        except Exception as exc:  # noqa: BLE001 - every failure is an outcome (the page read gets gRPC's own)
            outcome = f"{failure_kind(exc)}: {describe(exc)}"
        except TimeoutError:
            outcome = "no answer within 8 s"
        finally:
            took = time.monotonic() - started
            await client.close()
        return outcome, took

    async def ask_all() -> dict[str, tuple[str, float]]:
        outcomes = await asyncio.gather(*(ask(name) for name in CALLS))
        return dict(zip(CALLS, outcomes, strict=True))

    return asyncio.run(ask_all())


STREAMS = ("refresh_lease", "watch")
"""The calls that are gRPC streams. etcd refuses such a stream as it opens, and grpcio's asyncio
client may then report its own write as failed (INTERNAL, ``Internal error from Core``) instead
of etcd's status: grpc/grpc#36066, open in grpcio 1.85. The call still fails at once."""


def refused_for_no_leader(call: str, outcome: str) -> bool:
    if outcome.startswith("no-leader: the member has no leader"):
        return True
    return call.startswith(STREAMS) and outcome.endswith("cannot be reached: Internal error from Core")


def test_every_call_fails_at_once_on_a_member_without_a_leader(healed: Cluster) -> None:
    alone = next(member for member in healed.members if member is not healed.leader())
    cut_off(healed, alone)
    wait_until(lambda: not alone.has_leader(), timeout=5 * ELECTION_TIMEOUT, what="the member cut off without leader")
    outcomes = ask_every_call(alone.url)
    slow_or_other = {name: outcome for name, outcome in outcomes.items()
                     if not refused_for_no_leader(name, outcome[0]) or outcome[1] > 1.0}
    assert not slow_or_other, "\n".join(f"{name}: {outcome}" for name, outcome in outcomes.items())


# -- feddns serve ----------------------------------------------------------------------------------------

@dataclass
class QueryLoad:
    """Asks ``port`` :data:`QNAME` as cluster foo, one query after another every ``interval`` seconds, in a
    thread; ``first`` counts the first address of each answer, ``lost`` the queries not answered with one."""

    server: ServeProcess
    interval: float = 0.005
    first: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> "QueryLoad":
        self._thread = threading.Thread(target=self._run, name="query load", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(10)

    @property
    def asked(self) -> int:
        return sum(self.first.values()) + len(self.lost)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                reply = self.server.query(QNAME, cluster="foo", timeout=1.0)
            except (dns.exception.Timeout, OSError) as exc:
                self.lost.append(f"{type(exc).__name__}")
                continue
            addresses = [rd.address for rrset in reply.answer for rd in rrset if hasattr(rd, "address")]
            if reply.rcode() != dns.rcode.NOERROR or not addresses:
                self.lost.append(f"{dns.rcode.to_text(reply.rcode())} {addresses}")
            else:
                self.first[addresses[0]] = self.first.get(addresses[0], 0) + 1


def put_records(member: EtcdServer, prefix: str, cluster_ip: str) -> None:
    member.put(f"{prefix}{CLUSTER}", {"zone": "z1", "region": "r1"})
    member.put(f"{prefix}{SHARD}", {"clusterIP": cluster_ip, "externalIP": "104.32.64.128"})


@contextlib.contextmanager
def serve_attached_to(first: EtcdServer, cluster: Cluster, prefix: str) -> Iterator[ServeProcess]:
    """``feddns serve`` given every member, ``first`` first (so it attaches to it), records loaded."""
    ordered = [first, *(member for member in cluster.members if member is not first)]
    etcd = [arg for member in ordered for arg in ("--etcd", member.url)]
    with ServeProcess(extra_args=[*etcd, "--etcd-prefix", prefix, "--metrics", "127.0.0.1:0"]) as server:
        wait_until(lambda: server.addresses(QNAME, cluster="foo"), what="first load")
        yield server


def moved_from(server: ServeProcess, url: str) -> str | None:
    """The endpoint ``server`` said it is back on, when not ``url``."""
    for line in server.log.splitlines():
        if " back after " in line and f"etcd {url} back" not in line:
            return line
    return None


@pytest.mark.parametrize("which", ["follower", "leader"])
def test_serve_moves_off_a_member_cut_off_from_the_others(healed: Cluster, etcd_prefix: str, which: str) -> None:
    """Within the election timeout plus 5 s serve follows a member with a leader; a change made
    in the majority is answered; a steady query load loses nothing; the move is logged once."""
    started = time.monotonic()
    leader = healed.leader()
    alone = leader if which == "leader" else next(m for m in healed.members if m is not leader)
    majority = next(m for m in healed.members if m is not alone)
    put_records(majority, etcd_prefix, "10.0.3.64")
    with serve_attached_to(alone, healed, etcd_prefix) as server, QueryLoad(server) as load:
        cut_at = cut_off(healed, alone)
        try:
            line = wait_until(lambda: moved_from(server, alone.url), timeout=ELECTION_TIMEOUT + 5, interval=0.01,
                              what="serve following a member with a leader")
        except TimeoutError:
            print(server.log)
            raise
        moved_after = time.monotonic() - cut_at
        lost = [entry for entry in server.log.splitlines() if " lost: " in entry]
        assert len(lost) == 1 and "the member has no leader" in lost[0], lost
        assert alone.url in lost[0] and alone.url not in line
        assert server.log.count(" back after ") == 1
        majority.put(f"{etcd_prefix}{SHARD}", {"clusterIP": "10.0.3.65", "externalIP": "104.32.64.128"})
        changed_at = time.monotonic()
        wait_until(lambda: server.addresses(QNAME, cluster="foo")[:1] == ["10.0.3.65"], timeout=2,
                   what="the change made in the majority answered")
        answered_after = time.monotonic() - changed_at
        wait_until(lambda: load.first.get("10.0.3.65", 0) >= 10, timeout=5, what="the load asking on")
        assert server.metrics()["feddns_etcd_leader"] == 1
    assert not load.lost, f"{len(load.lost)} of {load.asked} queries lost: {load.lost[:5]}"
    assert set(load.first) == {"10.0.3.64", "10.0.3.65"}, load.first
    print(f"\n{which} cut off: serve moved after {moved_after:.2f} s ({line.split('INFO ')[-1]}); "
          f"change answered after {answered_after:.2f} s; {load.asked} queries, 0 lost; "
          f"test {time.monotonic() - started:.1f} s")


def ready(server: ServeProcess) -> tuple[int, str]:
    assert server.metrics_url is not None
    try:
        with urllib.request.urlopen(server.metrics_url + "/ready", timeout=2) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def test_serve_says_when_no_member_has_a_leader_and_recovers(healed: Cluster, etcd_prefix: str) -> None:
    """Every member alone: the last records are served, and /ready and feddns_etcd_leader say that
    nothing is behind them (revision N); once a leader is back serve follows it again."""
    put_records(healed.members[0], etcd_prefix, "10.0.3.64")
    with serve_attached_to(healed.members[0], healed, etcd_prefix) as server:
        assert ready(server) == (200, "ok\n")
        assert server.metrics()["feddns_etcd_leader"] == 1
        revision = int(server.metrics()["feddns_records_revision"])
        healed.network.split(*([member.name] for member in healed.members))
        status, body = wait_until(lambda: (r := ready(server))[1] != "ok\n" and r, timeout=4 * ELECTION_TIMEOUT + 2,
                                  what="/ready saying no leader")
        assert status == 200  # the records are still served: taking every replica out would be an outage
        assert f"serving the records of revision {revision} with no etcd leader behind them" in body, body
        assert "the member has no leader" in body, body
        assert server.metrics()["feddns_etcd_leader"] == 0
        assert server.addresses(QNAME, cluster="foo")[:1] == ["10.0.3.64"]
        healed.heal()
        wait_until(lambda: ready(server) == (200, "ok\n"), timeout=10, what="/ready ok again")
        assert server.metrics()["feddns_etcd_leader"] == 1
        healed.members[1].put(f"{etcd_prefix}{SHARD}", {"clusterIP": "10.0.3.65"})
        wait_until(lambda: server.addresses(QNAME, cluster="foo")[:1] == ["10.0.3.65"], timeout=2,
                   what="a change answered again")
        assert server.log.count(" lost: ") == 1 and server.log.count(" back after ") == 1, server.log


# -- the SkyDNS v3 store of feddns stubzone ------------------------------------------------------------------

def test_skydns_v3_store_skips_a_member_without_a_leader(healed: Cluster) -> None:
    """Its request tries each endpoint once within --backend-timeout: a member that has no leader
    answers at once, so the next one gets the request (asked without a leader, the first read
    would wait out the timeout)."""
    leader = healed.leader()
    alone = next(member for member in healed.members if member is not leader)
    cut_off(healed, alone)
    wait_until(lambda: not alone.has_leader(), timeout=5 * ELECTION_TIMEOUT, what="the member cut off without leader")
    store = SkyDNSEtcd3(EtcdEndpoints([alone.url, leader.url], timeout=3), SkyDNSLayout(StubDomains()))

    async def program() -> tuple[Any, bool]:
        return await store.put("myfederation", [Nameserver.parse("192.0.2.53")])

    started = time.monotonic()
    _, changed = asyncio.run(program())
    assert changed and time.monotonic() - started < 1.5
    assert "192.0.2.53" in "".join(leader.get_prefix("/skydns/").values())
