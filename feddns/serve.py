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
each loading and following the records itself; this process checks the flags,
binds, starts and keeps the workers (``feddns.workers``), serves ``/metrics``
and ``/ready`` for all of them, and says where it listens once every worker
answers. The cache and the TCP connection limit are the whole server's, split
evenly between the workers. ``--workers 1`` is the one process, as before.
"""

import argparse
import asyncio
import ipaddress
import logging
import re
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

import feddns.etcd.credentials
import feddns.etcd.endpoints
import feddns.etcd.flags
from feddns import cpus, logs, names, workers
from feddns.dns import transport
from feddns.dns.answer import OUR_PAYLOAD
from feddns.dns.index import Index
from feddns.dns.metrics import ServeCollector
from feddns.dns.responder import AnswerSettings, Responder
from feddns.dns.wire import OPTION_ECS, UDP_PLAIN_BYTES
from feddns.errors import ConfigError
from feddns.hostport import check_resolves, host_port, parse_hostport
from feddns.keys import Layout
from feddns.lifecycle import StopSignals, cannot_listen
from feddns.observe import ObserveServer
from feddns.querylog import DEFAULT_RATE, WINDOW_SECONDS, DroppedCollector, QueryLog
from feddns.records import IPAddress
from feddns.store import Feed
from feddns.store.file import EXAMPLE, FileSource, read_records

if TYPE_CHECKING:
    from feddns.store.etcdfeed import EtcdSource

log = logging.getLogger("feddns serve")
"""The command's own lines (listening, ready, stopping): named for the command, as its error line is."""

RESERVED_OPTION_CODE = 65535
"""EDNS0 option code 65535 is reserved for future expansion (RFC 6891 9)."""

MAX_TCP_IDLE_SECONDS = 3600
"""The longest ``--tcp-idle-timeout``: an hour."""

MAX_UDP_BYTES = 65535
"""The largest ``--max-udp-size``: what the 16-bit payload size of an OPT holds (RFC 6891 6.1.2); the
smallest is 512 bytes, what every DNS message over UDP may be (RFC 1035 4.2.1)."""


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
    add("--example", action="store_true",
        help="serve the built-in example federation (clusters foo, bar, baz with made-up addresses), to try feddns")
    add("--metrics", metavar="HOST:PORT", help="serve Prometheus /metrics, /health and /ready here")
    add("--order", choices=("rotate", "stable"), default="rotate",
        help="order within a tier: rotate from query to query (default) or stable")
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
    add("--tcp-idle-timeout", type=float, default=10.0, metavar="SECONDS",
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


def settings_from(args: argparse.Namespace, listens: list[tuple[str, int]]) -> AnswerSettings:
    """Check the flags and build :class:`AnswerSettings`; raises :class:`ConfigError`."""
    try:
        zone = names.normalize_zone(args.zone)
    except ValueError as exc:
        raise ConfigError(f"--zone: {exc}") from exc
    for flag, value in (("--ttl", args.ttl), ("--negative-ttl", args.negative_ttl)):
        if not 0 <= value <= 2**31 - 1:
            raise ConfigError(f"{flag} {value} is not from 0 to 2147483647 seconds")
    if not 0 < args.cluster_option_code < RESERVED_OPTION_CODE or args.cluster_option_code == OPTION_ECS:
        raise ConfigError(f"--cluster-option-code {args.cluster_option_code} is not a usable EDNS0 option code")
    if not UDP_PLAIN_BYTES <= args.max_udp_size <= MAX_UDP_BYTES:
        raise ConfigError(f"--max-udp-size {args.max_udp_size} is not from {UDP_PLAIN_BYTES} to {MAX_UDP_BYTES} bytes")
    mcs_zone, mcs_federation = _mcs(args.mcs_zone, args.mcs_federation, zone)
    return AnswerSettings(
        zone=zone, ttl=args.ttl, negative_ttl=args.negative_ttl, option_code=args.cluster_option_code,
        stable=args.order == "stable", ns_addresses=_ns_addresses(args.ns_address, listens),
        serial=int(time.time()) & 0xFFFFFFFF, cache_size=parse_size(args.cache_size),
        mcs_zone=mcs_zone, mcs_federation=mcs_federation, max_udp_size=args.max_udp_size,
    )


def _mcs(text: str | None, federation: str | None, zone: str) -> tuple[str | None, str | None]:
    """Check ``--mcs-zone`` and ``--mcs-federation``; raises :class:`ConfigError`."""
    if text is None:
        if federation is not None:
            raise ConfigError("--mcs-federation needs --mcs-zone")
        return None, None
    try:
        mcs_zone = names.normalize_zone(text)
    except ValueError as exc:
        raise ConfigError(f"--mcs-zone: {exc}") from exc
    if ("." + mcs_zone).endswith("." + zone) or ("." + zone).endswith("." + mcs_zone):
        raise ConfigError(f"--mcs-zone {mcs_zone} must not be --zone {zone}, nor above or below it")
    if federation is not None and not names.is_label(federation):
        raise ConfigError(f"--mcs-federation {federation!r} is not a lowercase DNS label")
    return mcs_zone, federation


_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3, "gib": 1024**3}
MIN_CACHE_BYTES = 64 * 1024


def parse_size(text: str) -> int:
    """``--cache-size``: bytes, with an optional binary suffix (``64MiB``, ``512k``).

    Raises :class:`ConfigError` for anything else or less than 64 KiB.
    """
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ConfigError(f"--cache-size {text!r} is not a size in bytes (e.g. 67108864, 64MiB, 512KiB)")
    size = int(match.group(1)) * unit
    if size < MIN_CACHE_BYTES:
        raise ConfigError(f"--cache-size {text} is less than 64KiB")
    return size


def tcp_limits_from(args: argparse.Namespace) -> transport.TcpLimits:
    """Check the TCP flags; raises :class:`ConfigError`."""
    if args.max_tcp_connections < 1:
        raise ConfigError(f"--max-tcp-connections {args.max_tcp_connections} is not at least 1")
    if not 0 < args.tcp_idle_timeout <= MAX_TCP_IDLE_SECONDS:
        raise ConfigError(f"--tcp-idle-timeout {args.tcp_idle_timeout} is not from 0 to 3600 seconds")
    return transport.TcpLimits(idle_timeout=args.tcp_idle_timeout, max_connections=args.max_tcp_connections)


def _ns_addresses(given: list[str] | None, listens: list[tuple[str, int]]) -> tuple[IPAddress, ...]:
    if given:
        try:
            return tuple(ipaddress.ip_address(a) for a in given)
        except ValueError as exc:
            raise ConfigError(f"--ns-address: {exc}") from exc
    out = []
    for host, _ in listens:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            continue
        if not ip.is_unspecified:
            out.append(ip)
    return tuple(out)


CHOOSE_SOURCE = ("choose where the records come from: --etcd URL (Federated-DNS's etcd), --records FILE "
                 "(a YAML records file) or --example (the built-in example federation)")


def check_source(args: argparse.Namespace) -> str:
    """Which source the flags choose: ``"etcd"``, ``"records"`` or ``"example"``.

    Exactly one of ``--etcd``, ``--records`` and ``--example`` must be given
    (docs/reference.md section 6); raises :class:`ConfigError` saying how to choose.
    """
    chosen = [name for name, given in (("etcd", args.etcd), ("records", args.records), ("example", args.example))
              if given]
    if len(chosen) != 1:
        given = " and ".join(f"--{name}" for name in chosen)
        raise ConfigError(f"{given} together: {CHOOSE_SOURCE}" if chosen else CHOOSE_SOURCE)
    return chosen[0]


def run(args: argparse.Namespace) -> int:
    """Check everything, then serve until SIGTERM or SIGINT. Returns the exit status."""
    listens = [parse_hostport(text, flag="--listen") for text in (args.listen or ["127.0.0.1:5353"])]
    settings = settings_from(args, listens)
    limits = tcp_limits_from(args)
    for host, port in listens:
        check_resolves("--listen", host, port)
    if args.metrics:
        check_resolves("--metrics", *parse_hostport(args.metrics, flag="--metrics"))
    count = workers_from(args)
    query_log_rate(args, count)
    if count > 1:
        return _run_workers(args, listens, settings, limits, count)
    server = _records(args, settings, query_log_from(args, args.query_log_rate))
    metrics = None
    tcp: list[transport.TcpConnections] = []
    if args.metrics:
        registry = _registry(server, tcp)
        detail = server.etcd_source.readiness if server.etcd_source is not None else None
        metrics = ObserveServer(args.metrics, registry, lambda: True, lambda: server.responder.ready, detail)
    _install_uvloop()
    return asyncio.run(_serve(server, listens, limits, tcp, metrics))


def query_log_rate(args: argparse.Namespace, count: int) -> list[int]:
    """``--query-log-rate`` split between ``count`` workers (``[rate]`` for one process); raises
    :class:`ConfigError` when a share is less than one line a second."""
    rate = args.query_log_rate
    if rate < 1:
        raise ConfigError(f"--query-log-rate {rate} is not at least 1 line a second")
    if rate < count:
        raise ConfigError(f"--query-log-rate {rate} is fewer lines a second than the {count} workers that split it")
    return split(rate, count)


def query_log_from(args: argparse.Namespace, rate: int) -> QueryLog | None:
    """The query log of one process, writing at most ``rate`` lines a second (its share of
    ``--query-log-rate``); ``None`` without ``--query-log``, the one check the answer path makes."""
    return QueryLog(rate, args.cluster_option_code) if args.query_log else None


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


def _records(args: argparse.Namespace, settings: AnswerSettings, query_log: QueryLog | None) -> _Records:
    """The responder and its source; a records file is read here (a bad one: :class:`ConfigError`)."""
    layout = Layout(args.etcd_prefix)
    kind = check_source(args)
    index = Index(layout)
    responder = Responder(settings)
    feed = Feed(index, responder, freeze=True)
    endpoints = _endpoints(args, kind)
    if endpoints is not None:
        from feddns.store.etcdfeed import EtcdSource  # noqa: PLC0415 - aetcd and gRPC only with --etcd

        etcd_source = EtcdSource(endpoints, layout, feed)
        return _Records(responder, feed, etcd_source, etcd_source, query_log)
    source = FileSource(Path(args.records) if kind == "records" else EXAMPLE, layout, feed)
    source.load()  # a bad records file stops start-up here (exit 2)
    return _Records(responder, feed, source, None, query_log)


def _check_records(args: argparse.Namespace) -> None:
    """What :func:`_records` checks, loading nothing: for the parent of workers, which answers no
    query (a records file is read and checked, but no index is built)."""
    layout = Layout(args.etcd_prefix)
    kind = check_source(args)
    if _endpoints(args, kind) is None:
        read_records(Path(args.records) if kind == "records" else EXAMPLE, layout)


def _endpoints(args: argparse.Namespace, kind: str) -> feddns.etcd.endpoints.EtcdEndpoints | None:
    """The etcd endpoints with their TLS files and user (``None`` for a records file, which
    takes none of them); raises :class:`ConfigError`."""
    access = feddns.etcd.flags.access_from(args)
    if kind == "etcd":
        return feddns.etcd.endpoints.EtcdEndpoints(args.etcd, access=access)
    if access != feddns.etcd.credentials.Access():
        raise ConfigError("--etcd-cacert, --etcd-cert, --etcd-key, --etcd-user and --etcd-password-file "
                          "need --etcd")
    return None


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


async def _serve(server: _Records, listens: list[tuple[str, int]], limits: transport.TcpLimits,
                 tcp: list[transport.TcpConnections], metrics: ObserveServer | None) -> int:
    closers: list[Any] = []
    signals = StopSignals()
    try:
        bound = await _bind(server, listens, limits, tcp, closers, metrics)
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


async def _bind(server: _Records, listens: list[tuple[str, int]], limits: transport.TcpLimits,
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

WORKER_COMMAND = (sys.executable, "-c", "from feddns.serve import worker_main; worker_main()")
"""How the parent runs a worker: a fresh interpreter (feddns.workers appends its pair's descriptor)."""

ACROSS_WORKERS: dict[str, workers.Combine] = {
    # What every worker holds alike, as the one furthest behind holds it; the rest is added up.
    "feddns_ready": min, "feddns_records_revision": min, "feddns_records_loaded": min,
    "feddns_records_invalid": min, "feddns_etcd_leader": min,
    "feddns_records_skipped": max,  # each worker skips the same records: counted once
}
"""How ``/metrics`` combines a family over the workers, when not by adding it up."""


def workers_from(args: argparse.Namespace) -> int:
    """``--workers``, or the CPUs this process may use (``feddns.cpus``); raises :class:`ConfigError`."""
    if args.workers is None:
        return cpus.available()
    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers} is not at least 1")
    return int(args.workers)


def split(total: int, count: int) -> list[int]:
    """``total`` shared by ``count`` workers as evenly as whole units go (the first ones get one more)."""
    return [total // count + (1 if number < total % count else 0) for number in range(count)]


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """What a worker runs with: the flags, the settings made once by the parent (one SOA serial
    for all), its share of ``--cache-size`` and ``--max-tcp-connections``, and the addresses
    bound (a worker started again binds its own sockets on them); ``query_log_rate`` is its
    share of ``--query-log-rate``, in lines a second."""

    args: argparse.Namespace
    settings: AnswerSettings
    limits: transport.TcpLimits
    addresses: list[tuple[str, int]]
    query_log_rate: int = DEFAULT_RATE


def _shares(args: argparse.Namespace, settings: AnswerSettings, limits: transport.TcpLimits,
            count: int) -> tuple[list[int], list[int]]:
    """Each worker's cache bytes and TCP connections; raises :class:`ConfigError` when a share
    is less than one server may have."""
    caches = split(settings.cache_size, count)
    if min(caches) < MIN_CACHE_BYTES:
        raise ConfigError(f"--cache-size {args.cache_size} split between {count} workers is less than 64KiB each")
    connections = split(limits.max_connections, count)
    if min(connections) < 1:
        raise ConfigError(f"--max-tcp-connections {limits.max_connections} is fewer than the {count} workers "
                          "that split it")
    return caches, connections


def _run_workers(args: argparse.Namespace, listens: list[tuple[str, int]], settings: AnswerSettings,
                 limits: transport.TcpLimits, count: int) -> int:
    """``count`` workers on the ``--listen`` addresses (``feddns.workers``); this process binds,
    serves ``/metrics``, and keeps them."""
    caches, connections = _shares(args, settings, limits, count)
    rates = query_log_rate(args, count)
    _check_records(args)  # as one process checks them: a bad records file exits 2 here
    addresses: list[tuple[str, int]] = []

    def plan(number: int) -> WorkerPlan:
        return WorkerPlan(args, replace(settings, cache_size=caches[number - 1]),
                          replace(limits, max_connections=connections[number - 1]), addresses, rates[number - 1])

    supervisor = workers.Supervisor(count, WORKER_COMMAND, plan)
    metrics = None
    if args.metrics:
        registry = CollectorRegistry()
        registry.register(workers.WorkersCollector(supervisor, ACROSS_WORKERS))
        metrics = ObserveServer(args.metrics, registry, lambda: True, supervisor.ready, supervisor.detail)
    return asyncio.run(_supervise(supervisor, listens, addresses, metrics))


async def _supervise(supervisor: workers.Supervisor, listens: list[tuple[str, int]],
                     addresses: list[tuple[str, int]], metrics: ObserveServer | None) -> int:
    """Bind, start the workers, say where it listens once they answer, and keep them until SIGTERM."""
    signals = StopSignals()
    try:
        sockets = _bind_shared(listens, len(supervisor.workers), addresses)
        if metrics is not None:
            _start_metrics(metrics)
    except BaseException:
        signals.close()
        if metrics is not None:
            metrics.stop()
        raise
    stop = asyncio.ensure_future(signals.wait())
    started = asyncio.ensure_future(supervisor.start(sockets))
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


def _announce(addresses: list[tuple[str, int]], count: int, metrics: ObserveServer | None) -> None:
    for host, port in addresses:
        log.info("listening on udp+tcp %s (%d workers)", host_port(host, port), count)
    if metrics is not None:
        log.info("metrics on %s/metrics", metrics.url)


def _bind_shared(listens: list[tuple[str, int]], count: int,
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
        for own in sockets:
            for udp, tcp in own:
                udp.close()
                tcp.close()
        raise
    return sockets


def _start_metrics(metrics: ObserveServer) -> None:
    try:
        metrics.start()
    except OSError as exc:
        raise cannot_listen("--metrics", metrics.listen, exc) from exc


def worker_main() -> None:
    """A worker process (started by ``feddns.workers.Supervisor``): serve what the parent sends
    until SIGTERM or until the parent is gone; exit 2 on a :class:`ConfigError`."""
    parent = workers.Parent.from_argv()
    start = parent.start
    plan = start.plan
    assert isinstance(plan, WorkerPlan)
    logs.setup(plan.args.log_level, plan.args.log_format, process=f"worker {start.number}")
    try:
        server = _records(plan.args, plan.settings, query_log_from(plan.args, plan.query_log_rate))
        tcp: list[transport.TcpConnections] = []
        registry = _registry(server, tcp)
        readiness = server.etcd_source.readiness if server.etcd_source is not None else (lambda: "")
        parent.answer_questions(registry, lambda: server.responder.ready, readiness)
        _install_uvloop()
        asyncio.run(_serve_worker(server, plan, start.fds, parent, tcp))
    except ConfigError as exc:
        print(logs.error_line("feddns serve", f"worker {start.number}: {exc}", plan.args.log_format),
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
            transports, connections = await transport.answer_on(server.responder, udp_sock, tcp_sock, plan.limits,
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
