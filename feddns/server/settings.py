"""``feddns serve``'s settings: one root, :class:`ServeSettings`, built from the flags by
:func:`settings_from` (docs/serve.md; the flags of docs/reference.md section 6).

The settings are grouped, a frozen dataclass per concern, each field with a docstring
giving its unit and its flag, after kopf's ``OperatorSettings``. The groups the answer path
reads belong to its layer and stay there, as fields of the root:
:class:`~feddns.dns.responder.AnswerSettings` (which holds the cache's budget too,
``cache_size``, since the responder makes the cache) and
:class:`~feddns.dns.transport.TcpLimits`; ``feddns.dns`` never imports this package.

:func:`settings_from` makes every check of a flag, before any socket opens, in the order
the command has always made them, and raises :class:`ConfigError` (one line, exit 2) for
the first that fails. A records file is named here and read by the command, which loads it.
With ``--workers N`` each worker runs with its share of the whole server's settings
(:func:`worker_shares`): the cache budget, the TCP connections and the query log's rate,
split evenly.
"""

import argparse
import ipaddress
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import feddns.etcd.flags
from feddns import configfile, names
from feddns.dns.responder import AnswerSettings
from feddns.dns.transport import TcpLimits
from feddns.dns.wire import OPTION_COOKIE, OPTION_ECS, UDP_PLAIN_BYTES
from feddns.errors import ConfigError
from feddns.etcd.credentials import Access
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.hostport import check_resolves, parse_hostport
from feddns.keys import Layout
from feddns.querylog import DEFAULT_RATE
from feddns.records import IPAddress, NoneReady
from feddns.server import cpus
from feddns.store.file import EXAMPLE

DEFAULT_LISTEN = "127.0.0.1:5353"
"""The address answered on without ``--listen``."""

RESERVED_OPTION_CODE = 65535
"""EDNS0 option code 65535 is reserved for future expansion (RFC 6891 9)."""

MAX_TCP_IDLE_SECONDS = 3600
"""The longest ``--tcp-idle-timeout``: an hour."""

MAX_UDP_BYTES = 65535
"""The largest ``--max-udp-size``: what the 16-bit payload size of an OPT holds (RFC 6891 6.1.2); the
smallest is 512 bytes, what every DNS message over UDP may be (RFC 1035 4.2.1)."""

MIN_CACHE_BYTES = 64 * 1024
"""The smallest ``--cache-size``, and the smallest share of it a worker may have: 64 KiB."""


CHOOSE_SOURCE = ("choose where the records come from: --etcd URL (Federated-DNS's etcd), --records FILE "
                 "(a YAML records file) or --example (the built-in example federation)")

SourceKind = Literal["etcd", "records", "example"]


@dataclass(frozen=True, slots=True)
class WorkerTiming:
    """How the parent of ``--workers N`` starts, restarts, asks and stops its workers (no flags)."""

    first_backoff: float = 0.1
    """Nominal seconds before a worker that exited is started again, the first time (a
    :class:`feddns.backoff.Backoff`: each wait is drawn from the upper half of the nominal delay)."""
    most_backoff: float = 10.0
    """The longest nominal wait before a start again; each exit of a worker that ran less than ``steady``
    doubles it."""
    steady: float = 30.0
    """Seconds a worker must have answered for before its exit is waited for about ``first_backoff`` again."""
    drain: float = 10.0
    """Seconds the workers have to stop after SIGTERM before they get SIGKILL."""
    ask: float = 5.0
    """Seconds a worker has to answer a question of the parent's (a scrape, a probe)."""


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """The processes that answer (``feddns.server.workers``)."""

    count: int = 1
    """Processes answering on the same port with SO_REUSEPORT (``--workers``; by default the CPUs this
    process may use, :func:`feddns.server.cpus.available`); 1 is one process, with no parent."""
    timing: WorkerTiming = field(default_factory=WorkerTiming)
    """How the parent keeps them (seconds; no flags)."""


@dataclass(frozen=True, slots=True)
class QueryLogSettings:
    """The log of answered queries (``feddns.querylog``)."""

    enabled: bool = False
    """Whether a line is written for every answered query (``--query-log``)."""
    rate: int = DEFAULT_RATE
    """Lines a second at most (``--query-log-rate``): the whole server's, or a worker's share of it in
    :func:`worker_shares`; the queries past it are counted."""


RECORDS_SIZE_FLAG = "--max-records-size"
DEFAULT_RECORDS_LIMIT = configfile.SizeLimit(configfile.DEFAULT_MAX_RECORDS_BYTES, RECORDS_SIZE_FLAG)


def add_records_size_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--max-records-size``, the cap of a ``--records`` file, to every command that reads one
    (``serve``, ``explain``); read back with :func:`records_limit`."""
    parser.add_argument(RECORDS_SIZE_FLAG, default="16MiB", metavar="BYTES",
                        help="refuse a --records file larger than this, unread; suffixes KiB, MiB, GiB "
                             "(default 16MiB)")


def records_limit(args: argparse.Namespace) -> configfile.SizeLimit:
    """The cap ``--max-records-size`` sets; raises :class:`ConfigError` when it is not a size."""
    return configfile.SizeLimit(configfile.parse_bytes(args.max_records_size, RECORDS_SIZE_FLAG), RECORDS_SIZE_FLAG)


@dataclass(frozen=True, slots=True)
class RecordsSource:
    """Where the records come from (docs/reference.md sections 4 and 6)."""

    kind: SourceKind
    """``"etcd"`` (``--etcd``), ``"records"`` (``--records``) or ``"example"`` (``--example``)."""
    layout: Layout
    """The key layout under ``--etcd-prefix`` (docs/reference.md section 4), of etcd or of the records file."""
    path: Path | None = None
    """The YAML records file: ``--records``, or the built-in example for ``--example``; ``None`` for etcd."""
    etcd: tuple[str, ...] = ()
    """The etcd client URLs (``--etcd``, repeatable); empty unless ``kind`` is ``"etcd"``."""
    access: Access = field(default_factory=Access)
    """The etcd TLS files and user (``--etcd-cacert``, ``--etcd-cert``, ``--etcd-key``, ``--etcd-user``,
    ``--etcd-password-file``)."""
    limit: configfile.SizeLimit = DEFAULT_RECORDS_LIMIT
    """The records file's size cap (``--max-records-size``): a larger file is refused unread."""

    def endpoints(self) -> EtcdEndpoints | None:
        """New etcd endpoints (each process makes its own: they fail over and watch their files);
        ``None`` for a records file. Raises :class:`ConfigError` for a bad URL or a file that cannot
        be read (:func:`settings_from` has made them once, to check)."""
        return EtcdEndpoints(list(self.etcd), access=self.access) if self.kind == "etcd" else None


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """Everything ``feddns serve`` runs by: the root of its settings, one group per concern."""

    listens: tuple[tuple[str, int], ...]
    """The ``(host, port)`` pairs answered on over UDP and TCP (``--listen``, repeatable; port 0: the
    OS picks one)."""
    records: RecordsSource
    """Where the records come from (``--etcd``, ``--records`` or ``--example``)."""
    answers: AnswerSettings = field(default_factory=AnswerSettings)
    """How queries are answered: zone, TTLs in seconds, EDNS0 option, order, NS addresses, the cache's
    budget in bytes (``--cache-size``), MCS names, the UDP reply bound in bytes (``--max-udp-size``)."""
    tcp: TcpLimits = field(default_factory=TcpLimits)
    """DNS over TCP: the idle timeout in seconds (``--tcp-idle-timeout``) and the open connections at
    most (``--max-tcp-connections``)."""
    workers: WorkerSettings = field(default_factory=WorkerSettings)
    """The processes that answer (``--workers``)."""
    query_log: QueryLogSettings = field(default_factory=QueryLogSettings)
    """The log of answered queries (``--query-log``, ``--query-log-rate``)."""
    metrics: str | None = None
    """``HOST:PORT`` where ``/metrics``, ``/health`` and ``/ready`` are served (``--metrics``); ``None``:
    nowhere."""


def settings_from(args: argparse.Namespace) -> ServeSettings:
    """The settings the parsed ``feddns serve`` flags ask for (``feddns.server.command.configure``).

    Every flag is checked here, before any socket opens; raises :class:`ConfigError` naming the
    flag (exit 2). A records file is not read (the command loads it); etcd's TLS and password
    files are.
    """
    listens = tuple(parse_hostport(text, flag="--listen") for text in (args.listen or [DEFAULT_LISTEN]))
    answers = _answers(args, listens)
    tcp = _tcp_limits(args)
    for host, port in listens:
        check_resolves("--listen", host, port)
    if args.metrics:
        check_resolves("--metrics", *parse_hostport(args.metrics, flag="--metrics"))
    workers = WorkerSettings(count=_worker_count(args))
    query_log = _query_log(args, workers.count)
    if workers.count > 1:
        _check_shares(args.cache_size, answers, tcp, workers.count)
    return ServeSettings(listens=listens, records=_records_source(args), answers=answers, tcp=tcp,
                         workers=workers, query_log=query_log, metrics=args.metrics)


def _answers(args: argparse.Namespace, listens: tuple[tuple[str, int], ...]) -> AnswerSettings:
    """Check the flags the answers take and build :class:`AnswerSettings`; raises :class:`ConfigError`."""
    try:
        zone = names.normalize_zone(args.zone)
    except ValueError as exc:
        raise ConfigError(f"--zone: {exc}") from exc
    for flag, value in (("--ttl", args.ttl), ("--negative-ttl", args.negative_ttl)):
        if not 0 <= value <= 2**31 - 1:
            raise ConfigError(f"{flag} {value} is not from 0 to 2147483647 seconds")
    code = args.cluster_option_code
    if not 0 < code < RESERVED_OPTION_CODE or code in (OPTION_ECS, OPTION_COOKIE):  # options whose data we check
        raise ConfigError(f"--cluster-option-code {args.cluster_option_code} is not a usable EDNS0 option code")
    if not UDP_PLAIN_BYTES <= args.max_udp_size <= MAX_UDP_BYTES:
        raise ConfigError(f"--max-udp-size {args.max_udp_size} is not from {UDP_PLAIN_BYTES} to {MAX_UDP_BYTES} bytes")
    mcs_zone, mcs_federation = _mcs(args.mcs_zone, args.mcs_federation, zone)
    return AnswerSettings(
        zone=zone, ttl=args.ttl, negative_ttl=args.negative_ttl, option_code=args.cluster_option_code,
        stable=args.order == "stable", none_ready=NoneReady(args.none_ready),
        ns_addresses=_ns_addresses(args.ns_address, listens),
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


def parse_size(text: str) -> int:
    """``--cache-size``: bytes, with an optional binary suffix (``64MiB``, ``512k``).

    Raises :class:`ConfigError` for anything else or less than 64 KiB.
    """
    size = configfile.parse_bytes(text, "--cache-size")
    if size < MIN_CACHE_BYTES:
        raise ConfigError(f"--cache-size {text} is less than 64KiB")
    return size


def _tcp_limits(args: argparse.Namespace) -> TcpLimits:
    """Check the TCP flags; raises :class:`ConfigError`."""
    if args.max_tcp_connections < 1:
        raise ConfigError(f"--max-tcp-connections {args.max_tcp_connections} is not at least 1")
    return TcpLimits(idle_timeout=args.tcp_idle_timeout, max_connections=args.max_tcp_connections)


def _ns_addresses(given: list[str] | None, listens: tuple[tuple[str, int], ...]) -> tuple[IPAddress, ...]:
    """``--ns-address``, or the ``--listen`` addresses that are IP addresses and not unspecified."""
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


def _worker_count(args: argparse.Namespace) -> int:
    """``--workers``, or the CPUs this process may use (``feddns.server.cpus``); raises :class:`ConfigError`."""
    if args.workers is None:
        return cpus.available()
    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers} is not at least 1")
    return int(args.workers)


def _query_log(args: argparse.Namespace, count: int) -> QueryLogSettings:
    """``--query-log`` and ``--query-log-rate``; raises :class:`ConfigError` when the rate, split between
    ``count`` workers, gives one less than one line a second."""
    rate = args.query_log_rate
    if rate < 1:
        raise ConfigError(f"--query-log-rate {rate} is not at least 1 line a second")
    if rate < count:
        raise ConfigError(f"--query-log-rate {rate} is fewer lines a second than the {count} workers that split it")
    return QueryLogSettings(enabled=bool(args.query_log), rate=rate)


def _check_shares(cache_size: str, answers: AnswerSettings, tcp: TcpLimits, count: int) -> None:
    """Raise :class:`ConfigError` when a worker's share of the cache (``--cache-size``, given as
    ``cache_size``) or of the TCP connections is less than one server may have."""
    if min(split(answers.cache_size, count)) < MIN_CACHE_BYTES:
        raise ConfigError(f"--cache-size {cache_size} split between {count} workers is less than 64KiB each")
    if min(split(tcp.max_connections, count)) < 1:
        raise ConfigError(f"--max-tcp-connections {tcp.max_connections} is fewer than the {count} workers "
                          "that split it")


def check_source(args: argparse.Namespace) -> SourceKind:
    """Which source the flags choose: ``"etcd"``, ``"records"`` or ``"example"``.

    Exactly one of ``--etcd``, ``--records`` and ``--example`` must be given
    (docs/reference.md section 6); raises :class:`ConfigError` saying how to choose.
    """
    given: tuple[tuple[SourceKind, object], ...] = (
        ("etcd", args.etcd), ("records", args.records), ("example", args.example))
    chosen = [name for name, value in given if value]
    if len(chosen) != 1:
        both = " and ".join(f"--{name}" for name in chosen)
        raise ConfigError(f"{both} together: {CHOOSE_SOURCE}" if chosen else CHOOSE_SOURCE)
    return chosen[0]


def _records_source(args: argparse.Namespace) -> RecordsSource:
    """Check ``--etcd-prefix``, the choice of source and the ``--etcd-*`` flags (the etcd endpoints
    are made once, to check them); raises :class:`ConfigError`."""
    layout = Layout(args.etcd_prefix)
    kind = check_source(args)
    access = feddns.etcd.flags.access_from(args)
    path = Path(args.records) if kind == "records" else EXAMPLE if kind == "example" else None
    source = RecordsSource(kind, layout, path, tuple(args.etcd or ()), access, records_limit(args))
    if kind != "etcd" and access != Access():
        raise ConfigError("--etcd-cacert, --etcd-cert, --etcd-key, --etcd-user and --etcd-password-file "
                          "need --etcd")
    source.endpoints()
    return source


def split(total: int, count: int) -> list[int]:
    """``total`` shared by ``count`` workers as evenly as whole units go (the first ones get one more)."""
    return [total // count + (1 if number < total % count else 0) for number in range(count)]


def worker_shares(settings: ServeSettings) -> list[ServeSettings]:
    """Each worker's settings, worker 1's first: ``settings`` with the cache budget (bytes), the TCP
    connections and the query log's rate (lines a second) split by :func:`split`
    (:func:`settings_from` has checked that each share is enough)."""
    count = settings.workers.count
    caches = split(settings.answers.cache_size, count)
    connections = split(settings.tcp.max_connections, count)
    rates = split(settings.query_log.rate, count)
    return [replace(settings, answers=replace(settings.answers, cache_size=cache),
                    tcp=replace(settings.tcp, max_connections=most),
                    query_log=replace(settings.query_log, rate=rate))
            for cache, most, rate in zip(caches, connections, rates, strict=True)]
