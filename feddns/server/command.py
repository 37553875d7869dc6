"""``feddns serve``: the Federated-DNS server (docs/reference.md sections 1-4 and 6).

Flags are checked, and the records file read, before any socket opens: a bad
one exits 2 with one line. The records come from etcd (``--etcd``), a records
file (``--records``) or the built-in example (``--example``), chosen
explicitly. Then it binds UDP and TCP on every ``--listen`` address and the
``--metrics`` address, and only once all are bound says where it listens (a
bind failure names the flag and the address and exits 2); it loads records
and keeps them in step, on one asyncio loop (uvloop where installed), until
SIGTERM or SIGINT, logging the stop.

With ``--workers N`` over 1 (by default, one per CPU the process may use) the
same server runs in N worker processes on the same addresses (SO_REUSEPORT),
forked from one read of etcd (``feddns.server.forking``) or each loading the records
itself, and each following them; this process checks the flags,
binds, starts and keeps the workers (``feddns.server.workers``), serves ``/metrics``
and ``/ready`` for all of them, and says where it listens once every worker
answers. The cache and the TCP connection limit are the whole server's, split
evenly between the workers. ``--workers 1`` is the one process, as before.

The flags become one :class:`~feddns.server.settings.ServeSettings`, where every flag
is checked (``feddns.server.settings``); this module runs by it.
"""

import argparse
import asyncio
import logging
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, NoReturn

from prometheus_client import CollectorRegistry

import feddns.etcd.flags
from feddns import logs, numbers
from feddns.dns import transport
from feddns.dns.answer import OUR_PAYLOAD
from feddns.dns.index import Index
from feddns.dns.metrics import ServeCollector
from feddns.dns.responder import Responder
from feddns.errors import ConfigError
from feddns.hostport import host_port
from feddns.libc import one_malloc_arena
from feddns.lifecycle import StopSignals, cannot_listen
from feddns.observe import ObserveServer
from feddns.querylog import DEFAULT_RATE, WINDOW_SECONDS, DroppedCollector, QueryLog
from feddns.records import NoneReady
from feddns.server import forking, workers
from feddns.server.settings import (
    MAX_TCP_IDLE_SECONDS,
    ServeSettings,
    add_records_size_argument,
    settings_from,
    worker_shares,
)
from feddns.store import Feed
from feddns.store.file import FileSource, read_records

if TYPE_CHECKING:
    from feddns.store.etcdfeed import EtcdSource
    from feddns.store.preload import Preloaded

log = logging.getLogger("feddns serve")
"""The command's own lines (listening, ready, stopping): named for the command, as its error line is."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``feddns serve`` flags."""
    add = parser.add_argument
    add("--listen", action="append", metavar="HOST:PORT",
        help="UDP and TCP address to answer on (repeatable; default 127.0.0.1:5353; port 0 picks one)")
    add("--zone", default="federation.", help="the zone served (default federation.)")
    add("--ttl", type=int, default=30, help="TTL of answers in seconds (default 30)")
    add("--negative-ttl", type=int, default=30,
        help="SOA minimum: TTL of NXDOMAIN and NODATA answers in seconds (default 30)")
    add("--etcd", action="append", metavar="URL", help="etcd client URL (repeatable), e.g. http://127.0.0.1:2379")
    add("--etcd-prefix", default="", help="key prefix P of docs/reference.md section 4 (default empty)")
    feddns.etcd.flags.add_arguments(parser)
    add("--records", metavar="FILE",
        help="serve a YAML records file instead of etcd (keys and values of docs/reference.md section 4; "
             "reloaded when it changes)")
    add_records_size_argument(parser)
    add("--example", action="store_true",
        help="serve the built-in example federation (clusters foo, bar, baz with made-up addresses), to try feddns")
    add("--metrics", metavar="HOST:PORT", help="serve Prometheus /metrics, /health and /ready here")
    add("--order", choices=("rotate", "stable"), default="rotate",
        help="order within a tier: rotate from query to query (default) or stable")
    add("--none-ready", choices=tuple(NoneReady), default=NoneReady.ANSWER.value,
        help="when no shard of a service is ready: answer every shard as if it were (default: answer, fail "
             "open) or NOERROR with no records (nodata); a service's annotation federation.feddns.io/none-ready "
             "overrides it")
    add("--cluster-option-code", type=int, default=0xFEDD,
        help="EDNS0 option code carrying the asking cluster's name (default 65245)")
    add("--ns-address", action="append", metavar="IP",
        help="address(es) of this server for ns.dns.<zone> (default: the --listen addresses)")
    add("--workers", type=int, metavar="N",
        help="processes answering on the same port (SO_REUSEPORT), each from its own copy of the records "
             "(default: the CPUs this process may use, by its affinity and cgroup CPU quota; 1: one process)")
    add("--cache-size", default="64MiB", metavar="BYTES",
        help="bound of the reply and answer cache in bytes, for the whole server: the --workers split it "
             "evenly; suffixes KiB, MiB, GiB (default 64MiB)")
    add("--max-tcp-connections", type=int, default=1000, metavar="N",
        help="open DNS-over-TCP connections at most, for the whole server: the --workers split it evenly; "
             "more are closed at once (default 1000)")
    add("--tcp-idle-timeout", **numbers.seconds(MAX_TCP_IDLE_SECONDS), default=10.0, metavar="SECONDS",
        help="close a TCP connection that completes no message for this long (default 10)")
    add("--max-udp-size", type=int, default=OUR_PAYLOAD, metavar="BYTES",
        help="UDP replies at most this long, whatever the asker's EDNS buffer; longer ones are truncated "
             f"(TC=1; default {OUR_PAYLOAD}, DNS Flag Day 2020)")
    add("--mcs-zone", metavar="ZONE",
        help="also answer the Multi-Cluster Services names <svc>.<ns>.svc.ZONE and <cluster>.<svc>.<ns>.svc.ZONE "
             "(e.g. clusterset.local.; default off)")
    add("--mcs-federation", metavar="F",
        help="the federation whose services the --mcs-zone shows (default: the only federation held)")
    add("--query-log", action="store_true",
        help="log every answered query as CoreDNS's log plugin does: client, qtype, qname, source cluster, "
             "rcode, reply bytes, duration in seconds (default off)")
    add("--query-log-rate", type=int, default=DEFAULT_RATE, metavar="N",
        help="--query-log writes at most N lines a second, for the whole server; the queries past it are "
             f"counted (feddns_query_log_dropped_total) and the count logged once a second (default {DEFAULT_RATE})")


def run(args: argparse.Namespace) -> int:
    """Check everything, then serve until SIGTERM or SIGINT. Returns the exit status."""
    settings = settings_from(args)
    if settings.workers.count > 1:
        return _run_workers(args, settings)
    server = _records(settings)
    metrics = None
    tcp: list[transport.TcpConnections] = []
    if settings.metrics:
        registry = _registry(server, tcp)
        detail = server.etcd_source.readiness if server.etcd_source is not None else None
        metrics = ObserveServer(settings.metrics, registry, lambda: True, lambda: server.responder.ready, detail)
    _install_uvloop()
    return asyncio.run(_serve(server, settings, tcp, metrics))


def query_log_from(settings: ServeSettings) -> QueryLog | None:
    """The query log of one process, writing at most ``settings.query_log.rate`` lines a second (its
    share of ``--query-log-rate``); ``None`` without ``--query-log``, the one check the answer path makes."""
    if not settings.query_log.enabled:
        return None
    return QueryLog(settings.query_log.rate, settings.answers.option_code)


@dataclass(frozen=True, slots=True)
class _Records:
    """What one process answers from: the responder, the feed and the source that fills it
    (``etcd_source`` too when it is etcd: its metrics and its word on ``/ready``), and the
    query log the answer path writes (``None`` without ``--query-log``)."""

    responder: Responder
    feed: Feed
    source: "EtcdSource | FileSource"
    etcd_source: "EtcdSource | None"
    query_log: QueryLog | None


def _records(settings: ServeSettings, preloaded: "Preloaded | None" = None) -> _Records:
    """The responder and its source; a records file is read here (a bad one: :class:`ConfigError`).
    ``preloaded``: the records a worker was forked with (``feddns.server.forking``), answered from
    at once and followed from their revision."""
    one_malloc_arena()  # before any thread: the load's pages are stored by a second one
    records = settings.records
    index = Index(records.layout)
    responder = Responder(settings.answers)
    feed = Feed(index, responder, freeze=True)
    query_log = query_log_from(settings)
    endpoints = records.endpoints()
    if endpoints is not None:
        from feddns.store.etcdfeed import EtcdSource  # noqa: PLC0415 - aetcd and gRPC only with --etcd

        etcd_source = EtcdSource(endpoints, records.layout, feed)
        if preloaded is not None:
            feed.install(preloaded.index, settled=True)
            etcd_source.revision = preloaded.revision
        return _Records(responder, feed, etcd_source, etcd_source, query_log)
    assert records.path is not None  # a records file, or the example
    source = FileSource(records.path, records.layout, feed, records.limit)
    source.load()  # a bad records file stops start-up here (exit 2)
    return _Records(responder, feed, source, None, query_log)


def _check_records(settings: ServeSettings) -> None:
    """What :func:`_records` checks, loading nothing: for the parent of workers, which answers no
    query (a records file is read and checked, but no index is built)."""
    if settings.records.path is not None:
        read_records(settings.records.path, settings.records.layout, settings.records.limit)


def _registry(server: _Records, tcp: list[transport.TcpConnections]) -> CollectorRegistry:
    """The metrics of one process (``etcd_source``'s too)."""
    registry = CollectorRegistry()
    feed = server.feed
    registry.register(ServeCollector(server.responder, lambda: feed.restarts, lambda: feed.skipped,
                                     lambda: (sum(c.open for c in tcp), sum(c.refused for c in tcp))))
    if server.etcd_source is not None:  # whether a leader is behind the records
        registry.register(server.etcd_source.collector())
    registry.register(DroppedCollector(server.query_log))  # 0 without --query-log: one set of families
    return registry


def _install_uvloop() -> None:
    try:
        import uvloop  # noqa: PLC0415 - optional: not installed on every platform (pyproject.toml)
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _serve(server: _Records, settings: ServeSettings, tcp: list[transport.TcpConnections],
                 metrics: ObserveServer | None) -> int:
    closers: list[Any] = []
    signals = StopSignals()
    try:
        bound = await _bind(server, settings.listens, settings.tcp, tcp, closers, metrics)
    except BaseException:
        signals.close()
        _close(closers, metrics)
        raise
    for host, port in bound:
        log.info("listening on udp+tcp %s", host_port(host, port))
    if metrics is not None:
        log.info("metrics on %s/metrics", metrics.url)
    tasks = [asyncio.create_task(server.source.run()), *_companions(server)]
    log.info("stopping (%s)", await signals.wait())
    signals.close()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    _close(closers, metrics)
    log.info("stopped")
    return 0


def _companions(server: _Records) -> list["asyncio.Task[None]"]:
    """The tasks that run beside the source in a process that answers: the one "ready" line, and
    the query log's second (its drops told when the queries stop)."""
    tasks = [] if _said_ready(server) else [asyncio.create_task(_say_ready(server))]
    if server.query_log is not None:
        tasks.append(asyncio.create_task(_roll_every_second(server.query_log)))
    return tasks


async def _say_ready(server: _Records) -> None:
    """Log once that the first load of records is done (``/ready`` answers 200 from then on)."""
    # Responder.ready is the feed's plain attribute (the query path reads it): a look every 20 ms
    # costs nothing beside a load of records.
    while not _said_ready(server):  # noqa: ASYNC110
        await asyncio.sleep(LOAD_POLL)


def _said_ready(server: _Records) -> bool:
    """Whether the records are loaded, logging it when they are (a records file: before the first query)."""
    if server.responder.ready:
        log.info("ready: answering from %d records", len(server.feed.index))
    return bool(server.responder.ready)


async def _roll_every_second(query_log: QueryLog) -> None:
    while True:
        await asyncio.sleep(WINDOW_SECONDS)
        query_log.roll(query_log.clock())


async def _bind(server: _Records, listens: Sequence[tuple[str, int]], limits: transport.TcpLimits,
                tcp: list[transport.TcpConnections], closers: list[Any],
                metrics: ObserveServer | None) -> list[tuple[str, int]]:
    """Bind every ``--listen`` address (UDP and TCP) and ``--metrics``; returns the
    bound ``(host, port)`` pairs. Raises :class:`ConfigError` naming the flag and
    the address that cannot be bound; what was bound is in ``closers``."""
    bound = []
    for host, port in listens:
        try:
            transports, port_bound, connections = await transport.listen(server.responder, host, port, limits,
                                                                             server.query_log)
        except OSError as exc:
            raise cannot_listen("--listen", host_port(host, port), exc) from exc
        closers.extend(transports)
        tcp.append(connections)
        bound.append((host, port_bound))
    if metrics is not None:
        try:
            metrics.start()
        except OSError as exc:
            raise cannot_listen("--metrics", metrics.listen, exc) from exc
    return bound


def _close(closers: list[Any], metrics: ObserveServer | None) -> None:
    for closer in closers:
        closer.close()
    if metrics is not None:
        metrics.stop()


# --- --workers N ----------------------------------------------------------------------------------------

WORKER_COMMAND = (sys.executable, "-c", "from feddns.server.command import worker_main; worker_main()")
"""How the parent runs a worker: a fresh interpreter (feddns.server.workers appends its pair's descriptor)."""

ACROSS_WORKERS: dict[str, workers.Combine] = {
    # What every worker holds alike, as the one furthest behind holds it; the rest is added up.
    "feddns_ready": min, "feddns_records_revision": min, "feddns_records_loaded": min,
    "feddns_records_invalid": min, "feddns_etcd_leader": min,
    "feddns_records_skipped": max,  # each worker skips the same records: counted once
}
"""How ``/metrics`` combines a family over the workers, when not by adding it up."""


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """What a worker runs with: its share of the settings the parent made once (one SOA serial
    for all; :func:`~feddns.server.settings.worker_shares`), the addresses bound (a worker
    started again binds its own sockets on them), and the ``--log-level`` and ``--log-format``."""

    settings: ServeSettings
    addresses: list[tuple[str, int]]
    log_level: str
    log_format: str


def _run_workers(args: argparse.Namespace, settings: ServeSettings) -> int:
    """``settings.workers.count`` workers on the ``--listen`` addresses (``feddns.server.workers``);
    this process binds, serves ``/metrics``, and keeps them. With etcd, the workers are forked
    from one read of the records (``feddns.server.forking``) before this process starts any
    thread or loop; otherwise each is a fresh interpreter that reads the records itself."""
    shares = worker_shares(settings)
    _check_records(settings)  # as one process checks them: a bad records file exits 2 here
    addresses: list[tuple[str, int]] = []

    def plan(number: int) -> WorkerPlan:
        return WorkerPlan(shares[number - 1], addresses, args.log_level, args.log_format)

    supervisor = workers.Supervisor(settings.workers.count, WORKER_COMMAND, plan, settings.workers.timing)
    metrics = None
    if settings.metrics:
        registry = CollectorRegistry()
        registry.register(workers.WorkersCollector(supervisor, ACROSS_WORKERS))
        metrics = ObserveServer(settings.metrics, registry, lambda: True, supervisor.ready, supervisor.detail)
    sockets = _bind_shared(settings.listens, len(supervisor.workers), addresses)
    template = _fork_template(settings, sockets)
    return asyncio.run(_supervise(supervisor, sockets, template, addresses, metrics))


@dataclass
class _Forking:
    """The template forked (``feddns.server.forking``) and the parent's end of each worker's pair."""

    template: forking.Template
    parent_ends: list[socket.socket]


def _fork_template(settings: ServeSettings, sockets: workers.Sockets) -> _Forking | None:
    """Fork the template that reads etcd once and forks the workers; ``None`` without etcd or
    where this process cannot keep forked workers (not Linux 5.3 or later)."""
    endpoints = settings.records.endpoints()
    if endpoints is None or not forking.available():
        return None
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in sockets]
    own = [([fd for udp, tcp in mine for fd in (udp.fileno(), tcp.fileno())], child.fileno())
           for mine, (_, child) in zip(sockets, pairs, strict=True)]
    try:
        template = forking.fork_template(endpoints, settings.records.layout, own,
                                         [parent.fileno() for parent, _ in pairs], _forked_worker)
    finally:
        for _, child in pairs:
            child.close()
    return _Forking(template, [parent for parent, _ in pairs])


async def _supervise(supervisor: workers.Supervisor, sockets: workers.Sockets,
                     forked: _Forking | None, addresses: list[tuple[str, int]], metrics: ObserveServer | None) -> int:
    """Start the workers, say where it listens once they answer, and keep them until SIGTERM."""
    signals = StopSignals()
    try:
        if metrics is not None:
            _start_metrics(metrics)
    except BaseException:
        signals.close()
        if metrics is not None:
            metrics.stop()
        workers.close_sockets(sockets)
        if forked is not None:
            forked.template.stop()
        raise
    stop = asyncio.ensure_future(signals.wait())
    started = asyncio.ensure_future(_start(supervisor, sockets, forked))
    await asyncio.wait([stop, started], return_when=asyncio.FIRST_COMPLETED)
    status = 0
    if started.done() and started.exception() is None:
        _announce(addresses, len(supervisor.workers), metrics)
        await asyncio.wait([stop])
    if stop.done():
        log.info("stopping (%s)", stop.result())
    else:  # a worker exited before it answered (it said why)
        exc = started.exception()
        log.error("%s", exc)
        status = exc.status if isinstance(exc, workers.WorkerExited) and exc.status > 0 else 1
    signals.close()
    for task in (started, stop):
        task.cancel()
    await asyncio.gather(started, stop, return_exceptions=True)
    await supervisor.stop()
    if metrics is not None:
        metrics.stop()
    log.info("stopped")
    return status


async def _start(supervisor: workers.Supervisor, sockets: workers.Sockets,
                 forked: _Forking | None) -> None:
    """The workers started: forked by the template, or (without one, or when it failed) fresh ones."""
    if forked is not None:
        try:
            pids = await forked.template.workers()
        except forking.TemplateFailed as exc:
            log.error("%s: starting workers that read the records themselves", exc)
            for end in forked.parent_ends:
                end.close()
        else:
            await supervisor.start(sockets, list(zip(pids, forked.parent_ends, strict=True)))
            return
    await supervisor.start(sockets)


def _announce(addresses: list[tuple[str, int]], count: int, metrics: ObserveServer | None) -> None:
    for host, port in addresses:
        log.info("listening on udp+tcp %s (%d workers)", host_port(host, port), count)
    if metrics is not None:
        log.info("metrics on %s/metrics", metrics.url)


def _bind_shared(listens: Sequence[tuple[str, int]], count: int,
                 addresses: list[tuple[str, int]]) -> list[list[tuple[socket.socket, socket.socket]]]:
    """Every ``--listen`` address checked (as one process binds it) and bound once per worker,
    with SO_REUSEPORT; the addresses with the ports bound go into ``addresses``. Raises
    :class:`ConfigError` naming the flag and the address that cannot be bound."""
    sockets: list[list[tuple[socket.socket, socket.socket]]] = [[] for _ in range(count)]
    try:
        for host, port in listens:
            try:
                bound = transport.reserve(host, port)
                for own in sockets:
                    own.append(transport.bind_shared(host, bound))
            except OSError as exc:
                raise cannot_listen("--listen", host_port(host, port), exc) from exc
            addresses.append((host, bound))
    except BaseException:
        workers.close_sockets(sockets)
        raise
    return sockets


def _start_metrics(metrics: ObserveServer) -> None:
    try:
        metrics.start()
    except OSError as exc:
        raise cannot_listen("--metrics", metrics.listen, exc) from exc


def worker_main() -> None:
    """A worker process (started by ``feddns.server.workers.Supervisor``): serve what the parent sends
    until SIGTERM or until the parent is gone; exit 2 on a :class:`ConfigError`."""
    _worker(workers.Parent.from_argv(), None)


def _forked_worker(pair: int, preloaded: "Preloaded | None") -> NoReturn:
    """A worker forked by the template (``feddns.server.forking``), with its end of the ``pair``
    to the parent and the records read (``None``: it reads them itself); exits, never returns."""
    status = 1
    try:
        parent = workers.Parent(Connection(pair))
    except (EOFError, OSError):  # the parent stopped, or the template failed, before it adopted this worker
        os._exit(1)
    try:
        _worker(parent, preloaded)
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except BaseException:  # a bug: its traceback, then the exit the parent reports
        log.exception("worker failed")
    finally:
        logging.shutdown()
        sys.stdout.flush()
        os._exit(status)


def _worker(parent: workers.Parent, preloaded: "Preloaded | None") -> None:
    start = parent.start
    plan = start.plan
    assert isinstance(plan, WorkerPlan)
    logs.setup(plan.log_level, plan.log_format, process=f"worker {start.number}")
    try:
        server = _records(plan.settings, preloaded)
        tcp: list[transport.TcpConnections] = []
        registry = _registry(server, tcp)
        readiness = server.etcd_source.readiness if server.etcd_source is not None else (lambda: "")
        parent.answer_questions(registry, lambda: server.responder.ready, readiness)
        _install_uvloop()
        asyncio.run(_serve_worker(server, plan, start.fds, parent, tcp))
    except ConfigError as exc:
        print(logs.error_line("feddns serve", f"worker {start.number}: {exc}", plan.log_format),
              file=sys.stderr, flush=True)
        sys.exit(2)
    answered = sum(s.value for f in registry.collect() if f.name == "feddns_dns_queries" for s in f.samples)
    log.info("stopped; this worker answered %d queries", answered)


async def _serve_worker(server: _Records, plan: WorkerPlan, fds: list[tuple[int, int]] | None,
                        parent: workers.Parent, tcp: list[transport.TcpConnections]) -> None:
    """Answer on the sockets the parent passed; or, started again, load first and bind its own
    then (the other workers answer meanwhile): it never answers SERVFAIL for want of records."""
    signals = StopSignals()
    stop = asyncio.ensure_future(signals.wait())
    tasks = [asyncio.create_task(server.source.run()), *_companions(server)]
    closers: list[Any] = []
    try:
        if fds is None:
            # Responder.ready is the feed's plain attribute (the query path reads it); a look every
            # 20 ms costs nothing beside a load of records.
            while not server.responder.ready and not stop.done():  # noqa: ASYNC110
                await asyncio.sleep(LOAD_POLL)
            if stop.done():
                return
            try:
                sockets = [transport.bind_shared(host, port) for host, port in plan.addresses]
            except OSError as exc:
                raise cannot_listen("--listen", ", ".join(f"{h}:{p}" for h, p in plan.addresses), exc) from exc
        else:
            sockets = [(socket.socket(fileno=udp), socket.socket(fileno=tcp_fd)) for udp, tcp_fd in fds]
        for udp_sock, tcp_sock in sockets:
            transports, connections = await transport.answer_on(server.responder, udp_sock, tcp_sock, plan.settings.tcp,
                                                                     server.query_log)
            closers.extend(transports)
            tcp.append(connections)
        parent.answering()
        await stop
    finally:
        signals.close()
        stop.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, stop, return_exceptions=True)
        _close(closers, None)


LOAD_POLL = 0.02
"""Seconds between two looks, by a worker started again, at whether its records are loaded."""
