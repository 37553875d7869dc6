"""``feddns stubzone``: the stub-zone HTTPS endpoint of a cluster's DNS pod (CONTRACTS 5 and 6).

Every flag is checked, the certificates loaded and the etcd URLs parsed
before a socket is opened; a bad one exits 2 with one line. Then the server
listens, logs ``listening on https://HOST:PORT`` (the bound port, so
``--listen 127.0.0.1:0`` works), and serves until SIGTERM or SIGINT.
"""

import argparse
import asyncio
import logging
import os
import signal
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from feddns.errors import ConfigError
from feddns.etcd import Endpoints
from feddns.hostport import parse_hostport
from feddns.observe import ObserveServer
from stubzone import tls
from stubzone.app import Metrics, make_app
from stubzone.auth import AllowList
from stubzone.skydns import SkyDNSLayout, SkyDNSStubs

log = logging.getLogger("stubzone")

DEFAULT_ETCD = "http://127.0.0.1:2379"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``feddns stubzone``."""
    parser.add_argument("--listen", default="0.0.0.0:8443", metavar="HOST:PORT",
                        help="HTTPS address (default 0.0.0.0:8443; port 0 picks a free port)")
    parser.add_argument("--cert", type=Path, required=True, help="server certificate, PEM (feddns certs issue-server)")
    parser.add_argument("--key", type=Path, required=True, help="server private key, PEM")
    parser.add_argument("--client-ca", type=Path, required=True, help="CA that signs client certificates, PEM")
    parser.add_argument("--allow", action="append", default=[], metavar="NAME",
                        help="client identity let in: a certificate CN or SAN (repeatable; at least one)")
    parser.add_argument("--etcd", action="append", metavar="URL",
                        help=f"the cluster's SkyDNS etcd (repeatable; default {DEFAULT_ETCD})")
    parser.add_argument("--etcd-prefix", default="/skydns",
                        help="'/' + SkyDNS's -path-prefix (default /skydns)")
    parser.add_argument("--etcd-timeout", type=float, default=5.0, metavar="SECONDS",
                        help="deadline of each etcd call (default 5)")
    parser.add_argument("--skydns-domain", default="cluster.local.", help="SkyDNS's -domain (default cluster.local.)")
    parser.add_argument("--federation-zone", default="federation.",
                        help="zone of the stub domains F.svc.ZONE (default federation.)")
    parser.add_argument("--tls-handshake-timeout", type=float, default=tls.HANDSHAKE_TIMEOUT, metavar="SECONDS",
                        help=f"time a client has to finish the TLS handshake (default {tls.HANDSHAKE_TIMEOUT:g})")
    parser.add_argument("--metrics", metavar="HOST:PORT",
                        help="plain-HTTP /metrics, /health and /ready for Prometheus and kubelet probes")


@dataclass(frozen=True)
class Settings:
    """Everything ``feddns stubzone`` needs, checked (see :func:`settings_from`)."""

    listen: tuple[str, int]
    context: ssl.SSLContext
    allow: AllowList
    store: SkyDNSStubs
    metrics_listen: str | None
    handshake_timeout: float


def settings_from(args: argparse.Namespace) -> Settings:
    """Check the flags; raises :class:`ConfigError` naming the first bad one."""
    if not args.etcd_prefix.startswith("/"):
        raise ConfigError(f"--etcd-prefix {args.etcd_prefix!r} must start with '/'")
    for flag, seconds in (("--etcd-timeout", args.etcd_timeout), ("--tls-handshake-timeout", args.tls_handshake_timeout)):
        if not seconds > 0:
            raise ConfigError(f"{flag} must be more than 0 seconds")
    try:
        layout = SkyDNSLayout(args.etcd_prefix, args.skydns_domain, args.federation_zone)
    except ValueError as exc:
        raise ConfigError(f"--skydns-domain/--federation-zone: {exc}") from exc
    if args.metrics:
        parse_hostport(args.metrics)
    return Settings(
        listen=parse_hostport(args.listen),
        context=tls.server_context(args.cert, args.key, args.client_ca),
        allow=AllowList(args.allow),
        store=SkyDNSStubs(Endpoints(args.etcd or [DEFAULT_ETCD], timeout=args.etcd_timeout), layout),
        metrics_listen=args.metrics,
        handshake_timeout=args.tls_handshake_timeout,
    )


def run(args: argparse.Namespace) -> int:
    """Check the flags, then serve until SIGTERM or SIGINT; returns the exit status."""
    return asyncio.run(serve(settings_from(args)))


async def serve(settings: Settings) -> int:
    """Serve the API over TLS on ``settings.listen`` until a signal; returns 0."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    runner = web.AppRunner(make_app(settings.store, settings.allow, metrics), access_log=None, handle_signals=False)
    await runner.setup()
    handshakes: set[asyncio.Task[None]] = set()

    def refused(peer: str, reason: str) -> None:
        metrics.tls_refused.inc()
        log.warning('TLS handshake refused: peer=%s reason="%s"', peer, reason)

    server: asyncio.Server | None = None
    observe: ObserveServer | None = None
    try:
        http = runner.server
        assert http is not None, "runner.setup() makes it"
        server = await _listen(settings, lambda: tls.TLSAcceptor(
            http, settings.context, refused, handshakes, settings.handshake_timeout))
        observe = _observe(settings.metrics_listen, registry)
        await _until_signal()
        log.info("stopping")
    finally:
        if server is not None:
            server.close()
        for task in list(handshakes):
            task.cancel()
        if observe is not None:
            observe.stop()
        await runner.cleanup()
    return 0


async def _listen(settings: Settings, factory: Callable[[], asyncio.Protocol]) -> asyncio.Server:
    host, port = settings.listen
    try:
        server = await asyncio.get_running_loop().create_server(factory, host, port, reuse_address=True)
    except OSError as exc:  # asyncio rewords strerror; the errno is the one line worth printing
        raise ConfigError(f"--listen {host}:{port}: {os.strerror(exc.errno) if exc.errno else exc}") from exc
    for sock in server.sockets:
        address = sock.getsockname()
        shown = f"[{address[0]}]" if ":" in address[0] else address[0]
        log.info("listening on https://%s:%d", shown, address[1])
    return server


def _observe(listen: str | None, registry: CollectorRegistry) -> ObserveServer | None:
    if listen is None:
        return None
    observe = ObserveServer(listen, registry, health=lambda: True, ready=lambda: True)
    try:
        observe.start()
    except OSError as exc:
        raise ConfigError(f"--metrics {listen}: {exc.strerror or exc}") from exc
    log.info("metrics on http://%s (/metrics, /health, /ready)", listen)
    return observe


async def _until_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
