"""A differential test of ``feddns serve``: whatever has happened in etcd, every answer is the
one a server started now, after reading everything, gives.

:class:`Differential` is a Hypothesis ``RuleBasedStateMachine``: its rules change the
records in a real etcd (puts, deletes, transactions, values that do not parse, cluster
records coming and going, services appearing and disappearing, whole clusters removed, a
worker of ``--workers 2`` killed), and after each step it asks a fixed set of questions
(exact names, letter cases, random labels below names that exist and that do not, A, AAAA,
SRV, TXT, ``_whoami``, the MCS zone, with and without EDNS0 option 65245 and ECS, over UDP
and TCP) of three servers and compares the replies:

* ``live``: one process that has followed every change by the watch since the example
  began (asked twice over UDP, so that its kept replies answer the next steps);
* ``workers``: ``--workers 2``, following the same changes (a worker killed is started
  again, loads, and answers);
* ``cold``: a server started after the step, asked as soon as ``/ready`` says 200.

Every server runs with ``--order stable`` (one order per answer: a rotation or a draw would
differ between servers and say nothing) and the MCS zone ``clusterset.local.``. The records
of one example are under ``P/f1`` and ``P/f2`` of the prefix ``P``; before them in key order
(and so in the order a load reads) sit :data:`FILLER` services, so that a cold server is
still reading values between queries while it is asked.

Used by tests/dns/test_differential.py (a few examples, in CI) and bench/differential.py
(a long run).
"""

import base64
import json
import os
import random
import re
import signal
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rrset
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from harness.etcd import EtcdServer
from harness.ports import wait_until
from harness.process import ended
from harness.serve import ServeProcess, edns_options

FEDERATIONS = ("f1", "f2")
NAMESPACES = ("n1", "n2")
SERVICES = ("s1", "s2")
CLUSTERS = ("c1", "c2", "c3", "ghost")
"""``ghost`` never gets a cluster record: it is known, when it is, by its shards alone."""
FILLER = 20_000
"""Services of namespace ``aaa`` of ``f1`` loaded before the records under test (one shard
each, in cluster c1): a cold server reads their values between queries after ``/ready``
before it reaches those of the records under test, and ``f1`` is always held."""
ZONE = "federation."
MCS = "clusterset.local."
SERVE_ARGS = ("--order", "stable", "--mcs-zone", MCS, "--metrics", "127.0.0.1:0")
BAD_VALUES = (b"{not json", b'{"clusterIP": "10.0.0.300"}', b"[]", b'{"clusterIP": "10.0.0.1", "ports": 7}')
V4 = ("10.0.0.1", "10.0.0.2", "10.1.0.1", "10.2.0.1")
V6 = ("fd00::1", "fd00::2")
EXTERNAL = ("1.1.1.1", "1.1.1.2", "2001:db8::1", None)
CIDRS = {"c1": ["10.240.0.0/16"], "c2": ["10.241.0.0/16", "fd10::/48"], "c3": []}
ECS = (None, "10.240.1.0/24", "10.241.0.0/16", "10.99.0.0/16", "fd10::/56")
OPTIONS = (None, "c1", "c2", "C3", "ghost", " ghost ")


def shard_value(cluster_ip: str, external_ip: str | None, port: int, ready: int | None, policy: str | None,
                dual: bool) -> bytes:
    """A shard record (docs/reference.md section 4) as JSON."""
    value: dict[str, object] = {"clusterIP": cluster_ip, "ports": [{"name": "http", "protocol": "TCP", "port": port}]}
    if dual:
        value = {"clusterIPs": [cluster_ip, "fd00::9"], "ports": value["ports"]}
    if external_ip is not None:
        value["externalIP"] = external_ip
    if ready is not None:
        value["ready"] = ready
    if policy == "failover":
        value |= {"policy": "failover", "failoverOrder": ["c2", "ghost", "c1"]}
    return json.dumps(value).encode()


SHARDS = st.builds(shard_value, st.sampled_from(V4 + V6), st.sampled_from(EXTERNAL), st.sampled_from((80, 8080)),
                   st.sampled_from((None, 0, 1, 2)), st.sampled_from((None, None, "failover")), st.booleans())
VALUES = st.one_of(SHARDS, SHARDS, SHARDS, st.sampled_from(BAD_VALUES))


def cluster_value(cluster: str, zone: str, region: str, stale: bool) -> bytes:
    """A cluster record: its zone, region and (c1, c2) CIDRs, maybe stale."""
    value: dict[str, object] = {"zone": zone, "region": region, "cidrs": CIDRS.get(cluster, [])}
    if stale:
        value["stale"] = True
    return json.dumps(value).encode()


@dataclass(frozen=True)
class Question:
    """One query: qname, qtype, option 65245's data, an ECS subnet."""

    qname: str
    qtype: str
    cluster: str | None = None
    ecs: str | None = None

    def message(self) -> dns.message.Message:
        """The query, with EDNS0 (version 0, dnspython's payload size) and its options."""
        return dns.message.make_query(self.qname, self.qtype, use_edns=0, options=edns_options(self.cluster, self.ecs))


def questions(rng: random.Random, count: int) -> list[Question]:
    """``count`` questions drawn from every kind of name the records can make."""
    def service() -> str:
        return f"{rng.choice(SERVICES)}.{rng.choice(NAMESPACES)}.{rng.choice(FEDERATIONS)}.svc.{ZONE}"
    pool: list[Callable[[], tuple[str, str]]] = [
        lambda: (service(), rng.choice(("A", "A", "AAAA", "TXT", "ANY"))),
        lambda: (f"_http._tcp.{service()}", "SRV"),
        lambda: (f"{rng.choice(CLUSTERS)}.{service()}", rng.choice(("A", "AAAA"))),
        lambda: (f"_tcp.{service()}", "A"),
        lambda: (f"x{rng.randrange(1000)}.{service()}", "A"),
        lambda: (f"x{rng.randrange(1000)}.{rng.choice(NAMESPACES)}.{rng.choice(FEDERATIONS)}.svc.{ZONE}", "A"),
        lambda: (f"{rng.choice(NAMESPACES)}.{rng.choice(FEDERATIONS)}.svc.{ZONE}", "A"),
        lambda: (f"{rng.choice(FEDERATIONS)}.svc.{ZONE}", "A"),
        lambda: (f"_whoami.{rng.choice(FEDERATIONS)}.svc.{ZONE}", "TXT"),
        lambda: (f"{rng.choice(SERVICES)}.{rng.choice(NAMESPACES)}.svc.{MCS}", rng.choice(("A", "SRV"))),
        lambda: (f"s00007.aaa.f1.svc.{ZONE}", "A"),
        lambda: (f"svc.{ZONE}", "A"),
    ]
    out = []
    for _ in range(count):
        qname, qtype = rng.choice(pool)()
        if rng.random() < 0.3:
            qname = "".join(c.upper() if rng.random() < 0.5 else c for c in qname)
        out.append(Question(qname, qtype, rng.choice(OPTIONS), rng.choice(ECS) if rng.random() < 0.4 else None))
    return out


_SERIAL = re.compile(r"(IN SOA \S+ \S+ )\d+")


def seen(reply: dns.message.Message) -> tuple[object, ...]:
    """What a user reads in a reply: rcode, flags, each section as text in order (the SOA's
    serial left out: each server takes its start time), the ECS scope."""
    scopes = tuple(o.scopelen for o in reply.options if isinstance(o, dns.edns.ECSOption))

    def text(section: list[dns.rrset.RRset]) -> tuple[str, ...]:
        return tuple(_SERIAL.sub(r"\1SERIAL", rrset.to_text()) for rrset in section)
    return (dns.rcode.to_text(reply.rcode()), dns.flags.to_text(reply.flags & ~dns.flags.RD),
            text(reply.answer), text(reply.authority), text(reply.additional), scopes)


def ask(server: ServeProcess, question: Question, tcp: bool) -> tuple[object, ...]:
    """What ``server`` answers ``question`` (:func:`seen`); a UDP query lost is sent once more."""
    if tcp:
        return seen(dns.query.tcp(question.message(), "127.0.0.1", port=server.port, timeout=5))
    try:
        return seen(dns.query.udp(question.message(), "127.0.0.1", port=server.port, timeout=3))
    except dns.exception.Timeout:
        return seen(dns.query.udp(question.message(), "127.0.0.1", port=server.port, timeout=3))


def ready(server: ServeProcess) -> bool:
    """True when the server's ``/ready`` says 200 (it needs ``--metrics``)."""
    assert server.metrics_url is not None
    try:
        with urllib.request.urlopen(server.metrics_url + "/ready", timeout=2) as reply:
            return bool(reply.status == 200)
    except urllib.error.HTTPError:
        return False


def b64(data: str | bytes) -> str:
    """Base64 of ``data`` (UTF-8 for text), as etcd's JSON gateway takes keys and values."""
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


class World:
    """What the machine drives: the etcd, the prefix and the two servers that follow it."""

    def __init__(self, etcd: EtcdServer, prefix: str) -> None:
        self.etcd = etcd
        self.prefix = prefix
        filler = {f"{prefix}/f1/aaa/s{n:05d}/c1": '{"clusterIP": "10.50.0.1"}' for n in range(FILLER)}
        etcd.put_many(filler)  # type: ignore[arg-type]
        self.live = ServeProcess(etcd_url=etcd.url, prefix=prefix, extra_args=SERVE_ARGS)
        self.workers = ServeProcess(etcd_url=etcd.url, prefix=prefix, extra_args=SERVE_ARGS, workers=2)
        self.compared = 0
        """Questions compared (each asked of every server, over UDP and TCP)."""
        self.steps = 0
        self.examples = 0

    def close(self) -> None:
        self.live.stop()
        self.workers.stop()

    def begin(self) -> None:
        """A new example: no records under test, and both servers started afresh on the filler
        (so that an example, replayed to shrink it, meets the servers as it first did)."""
        self.close()
        for namespace in NAMESPACES:
            self.etcd.delete(f"{self.prefix}/f1/{namespace}/", prefix=True)
        self.etcd.delete(f"{self.prefix}/f1/_clusters/", prefix=True)
        self.etcd.delete(f"{self.prefix}/f2/", prefix=True)
        self.live = ServeProcess(etcd_url=self.etcd.url, prefix=self.prefix, extra_args=SERVE_ARGS)
        self.workers = ServeProcess(etcd_url=self.etcd.url, prefix=self.prefix, extra_args=SERVE_ARGS, workers=2)
        with ThreadPoolExecutor(2) as pool:
            for started in [pool.submit(self.live.start, 30), pool.submit(self.workers.start, 60)]:
                started.result()
        self.examples += 1

    def caught_up(self) -> None:
        """Wait until both servers have applied etcd's current revision."""
        revision = self.etcd.revision()
        for server in (self.live, self.workers):
            wait_until(lambda s=server: s.metrics().get("feddns_records_revision", 0) >= revision and ready(s),
                       timeout=30, what="the watch to catch up")


_WORKER_READY = re.compile(r"\(worker \d+\): ready")


class Differential(RuleBasedStateMachine):
    """The state machine (see the module): set ``world`` and ``question_count`` before running."""

    world: World
    question_count = 60

    def __init__(self) -> None:
        super().__init__()
        self.world.begin()
        self.keys: set[str] = set()
        self.questions: list[Question] = []

    def key(self, federation: str, namespace: str, service: str, cluster: str) -> str:
        """The etcd key of a shard record (docs/reference.md section 4)."""
        return f"{self.world.prefix}/{federation}/{namespace}/{service}/{cluster}"

    def cluster_key(self, federation: str, cluster: str) -> str:
        """The etcd key of a cluster record."""
        return f"{self.world.prefix}/{federation}/_clusters/{cluster}"

    # -- rules: changes in etcd -----------------------------------------------------------

    @rule(seed=st.integers(0, 2**32 - 1))
    def ask_new_questions(self, seed: int) -> None:
        self.questions = questions(random.Random(seed), self.question_count)

    @rule(f=st.sampled_from(FEDERATIONS), n=st.sampled_from(NAMESPACES), s=st.sampled_from(SERVICES),
          c=st.sampled_from(CLUSTERS), value=VALUES)
    def put_shard(self, f: str, n: str, s: str, c: str, value: bytes) -> None:
        key = self.key(f, n, s, c)
        self.world.etcd.put(key, value)
        self.keys.add(key)

    @rule(f=st.sampled_from(FEDERATIONS), c=st.sampled_from(CLUSTERS[:3]), zone=st.sampled_from(("z1", "z2")),
          region=st.sampled_from(("r1", "r2")), stale=st.booleans(), bad=st.booleans())
    def put_cluster(self, f: str, c: str, zone: str, region: str, stale: bool, bad: bool) -> None:
        key = self.cluster_key(f, c)
        self.world.etcd.put(key, BAD_VALUES[0] if bad else cluster_value(c, zone, region, stale))
        self.keys.add(key)

    @precondition(lambda self: self.keys)
    @rule(data=st.data())
    def delete_key(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.keys)))
        self.world.etcd.delete(key)
        self.keys.discard(key)

    @rule(f=st.sampled_from(FEDERATIONS), n=st.sampled_from(NAMESPACES), s=st.sampled_from(SERVICES))
    def delete_service(self, f: str, n: str, s: str) -> None:
        prefix = f"{self.world.prefix}/{f}/{n}/{s}/"
        self.world.etcd.delete(prefix, prefix=True)
        self.keys = {k for k in self.keys if not k.startswith(prefix)}

    @rule(f=st.sampled_from(FEDERATIONS), c=st.sampled_from(CLUSTERS))
    def remove_cluster(self, f: str, c: str) -> None:
        """A whole cluster leaves the federation: its record and every shard, in one transaction."""
        gone = [k for k in self.keys if k.startswith(f"{self.world.prefix}/{f}/") and k.endswith(f"/{c}")]
        self.apply([(k, None) for k in gone])

    @rule(changes=st.lists(st.tuples(st.sampled_from(FEDERATIONS), st.sampled_from(NAMESPACES),
                                     st.sampled_from(SERVICES), st.sampled_from(CLUSTERS),
                                     st.one_of(st.none(), VALUES)), min_size=2, max_size=6))
    def transaction(self, changes: list[tuple[str, str, str, str, bytes | None]]) -> None:
        """Several puts and deletes at one revision (an etcd transaction: one watch response)."""
        self.apply([(self.key(f, n, s, c), value) for f, n, s, c, value in changes])

    def apply(self, changes: list[tuple[str, bytes | None]]) -> None:
        """Put (a value) or delete (``None``) each key, in one transaction."""
        ops: list[dict[str, object]] = []
        done: set[str] = set()
        for key, value in changes:
            if key in done:  # etcd refuses a key twice in one transaction
                continue
            done.add(key)
            if value is None:
                ops.append({"request_delete_range": {"key": b64(key)}})
                self.keys.discard(key)
            else:
                ops.append({"request_put": {"key": b64(key), "value": b64(value)}})
                self.keys.add(key)
        if ops:
            self.world.etcd.call("/v3/kv/txn", {"success": ops})

    @rule()
    def kill_a_worker(self) -> None:
        """SIGKILL one worker of ``--workers 2``: it is started again, loads on its own and answers."""
        server = self.world.workers
        before = server.worker_pids()
        said = len(_WORKER_READY.findall(server.log))
        victim = before[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: ended(victim) or victim not in server.worker_pids(), timeout=10, what="the worker gone")
        wait_until(lambda: len(_WORKER_READY.findall(server.log)) > said, timeout=60, what="the worker ready again")

    # -- after every step: the comparison ----------------------------------------------------

    @invariant()
    def every_server_answers_alike(self) -> None:
        if not self.questions:
            self.questions = questions(random.Random(len(self.keys)), self.question_count)
        world = self.world
        world.caught_up()
        world.steps += 1
        with ServeProcess(etcd_url=world.etcd.url, prefix=world.prefix, extra_args=SERVE_ARGS) as cold:
            wait_until(lambda: ready(cold), timeout=30, interval=0.002, what="the cold server ready")
            for question in self.questions:
                replies = {
                    "cold udp": ask(cold, question, False),
                    "live udp": ask(world.live, question, False),
                    "live udp again": ask(world.live, question, False),
                    "workers udp": ask(world.workers, question, False),
                }
                self.agree(question, replies)
                tcp = {"cold tcp": ask(cold, question, True), "live tcp": ask(world.live, question, True)}
                self.agree(question, tcp)
                world.compared += 1

    def agree(self, question: Question, replies: dict[str, tuple[object, ...]]) -> None:
        """Raise ``AssertionError`` naming the question, each reply and the records unless every
        reply of ``replies`` (server and transport to :func:`seen`) is the same."""
        first = next(iter(replies.values()))
        differ = {name: reply for name, reply in replies.items() if reply != first}
        if differ:
            lines = "\n".join(f"  {name}: {reply}" for name, reply in replies.items())
            raise AssertionError(f"{question} is answered differently:\n{lines}\nrecords:\n"
                                 + "\n".join(f"  {k}: {v}" for k, v in sorted(self.records().items())))

    def records(self) -> dict[str, str]:
        """The records under test, by key below the prefix (as text)."""
        prefix = self.world.prefix
        return {k[len(prefix):]: v for k, v in self.world.etcd.get_prefix(prefix + "/f").items()}
