"""``feddns links``: the service-links mutating admission webhook (docs/reference.md sections 6 and 8).

Every flag is checked, the certificate and the policy file loaded, the
kubeconfig read and the resolver chosen before a socket is opened; a bad one
exits 2 with one line. Then it listens (HTTPS, through the listener it shares
with ``feddns stubzone``: :mod:`feddns.https`), logs ``listening on
https://HOST:PORT`` with the bound port (``--listen 127.0.0.1:0`` works),
lists and watches the local shards, polls the policy file and the
certificate for changes, and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations  # the settings name types of modules imported only in run()

import argparse
import asyncio
import contextlib
import gc
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from feddns import numbers
from feddns.configfile import SizeLimit, parse_bytes
from feddns.errors import ConfigError
from feddns.hostport import parse_ip_port
from feddns.https import ListenerMetrics, ListenerSettings, TLSListener
from feddns.lifecycle import StopSignals
from feddns.listen import (
    ListenAddresses,
    add_https_arguments,
    listener_settings,
    log_listening,
    start_observe,
)
from feddns.names import normalize_zone
from links.gating import DEFAULT_TIMEOUT, Gate
from links.selector import check_key

if TYPE_CHECKING:
    from feddns.observe import ObserveServer
    from links import files
    from links.app import LinksMetrics
    from links.shards import LocalShards

# aiohttp, kubernetes and pydantic (links.app, links.shards, links.files) are imported once the
# command runs: --help answers without them.

log = logging.getLogger("links")

MAX_GATING_TIMEOUT = 4.0
"""Seconds: gating must end well inside the API server's webhook timeout (5 s in deploy/links/)."""


POLICIES_SIZE_FLAG = "--max-policies-size"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``feddns links``."""
    add_https_arguments(parser, serves="POST /mutate", ready="ready once Services are listed")
    parser.add_argument("--policies", type=Path, metavar="FILE",
                        help="link policy file (YAML: namespace, selector, links); reloaded when it changes")
    parser.add_argument("--max-policies-size", default="1MiB", metavar="BYTES",
                        help="refuse a policy file larger than this, unread, at start and on reload; suffixes KiB, "
                             "MiB (default 1MiB, the most a ConfigMap holds)")
    parser.add_argument("--resolver", metavar="HOST:PORT",
                        help="the cluster DNS asked whether required links exist (default: /etc/resolv.conf)")
    parser.add_argument("--gating-timeout", **numbers.seconds(MAX_GATING_TIMEOUT),
                        default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"time all DNS checks of one pod may take (default {DEFAULT_TIMEOUT:g}, "
                             f"at most {MAX_GATING_TIMEOUT:g})")
    parser.add_argument("--zone", default="federation.", help="the federation zone Z of <svc>.<ns>.F.svc.Z "
                        "(default federation.)")
    parser.add_argument("--kubeconfig", help="kubeconfig of the local cluster (default: the pod's service account)")
    parser.add_argument("--context", help="kubeconfig context (default: its current context)")
    parser.add_argument("--federation-label", metavar="KEY",
                        help="label whose value names a Service's federation (default federation.feddns.io/name, "
                             "the controller's)")


@dataclass(frozen=True)
class LinksSettings:
    """Everything ``feddns links`` needs, checked and loaded from its flags (see :func:`settings_from`)."""

    addresses: ListenAddresses
    """The HTTPS address of ``POST /mutate`` and the metrics address (``--listen``, ``--metrics``)."""
    listener: ListenerSettings
    """The bounds of the HTTPS socket: pools, handshake, request and idle timeouts."""
    certificate: files.ServerCertificate
    """The server certificate and key, loaded and followed on disk (``--cert``, ``--key``)."""
    policies: files.PolicyFile
    """The link policies, loaded and followed on disk (``--policies``; none without it)."""
    gate: Gate
    """The DNS existence checks of required links: resolver and seconds per pod (``--resolver``,
    ``--gating-timeout``)."""
    shards: LocalShards
    """The local cluster's Services carrying ``--federation-label``, not listed until :meth:`LocalShards.start`."""
    zone: str
    """The federation zone, absolute and lowercase (``--zone``)."""


def settings_from(args: argparse.Namespace) -> LinksSettings:
    """Check the flags and load the files; raises :class:`ConfigError` naming the first bad one."""
    from links import files  # noqa: PLC0415 - pydantic, only once the command runs
    from links.shards import FEDERATION_LABEL, LocalShards, connector  # noqa: PLC0415 - kubernetes, likewise

    addresses = ListenAddresses.from_flags(args.listen, args.metrics)
    listener = listener_settings(args)
    try:
        zone = normalize_zone(args.zone)
    except ValueError as exc:
        raise ConfigError(f"--zone {args.zone!r}: {exc}") from exc
    try:
        label = check_key(args.federation_label or FEDERATION_LABEL)
    except ValueError as exc:
        raise ConfigError(f"--federation-label: {exc}") from exc
    resolver = None
    if args.resolver:
        address, port = parse_ip_port(args.resolver, None, flag="--resolver")  # HOST:PORT, docs/reference.md
        resolver = (str(address), port)
    return LinksSettings(
        addresses=addresses,
        listener=listener,
        certificate=files.ServerCertificate(args.cert, args.key),
        policies=files.PolicyFile(args.policies, SizeLimit(parse_bytes(args.max_policies_size, POLICIES_SIZE_FLAG),
                                                           POLICIES_SIZE_FLAG)),
        gate=Gate(resolver, args.gating_timeout),
        shards=LocalShards(connector(args.kubeconfig, args.context), label),
        zone=zone,
    )


def run(args: argparse.Namespace) -> int:
    """Check the flags, then serve until SIGTERM or SIGINT; returns the exit status."""
    settings = settings_from(args)
    _install_uvloop()
    return asyncio.run(serve(settings))


def _install_uvloop() -> None:
    """uvloop where installed: its TLS and HTTP parsing take a third off each review's time."""
    try:
        import uvloop  # noqa: PLC0415 - optional: not installed on every platform (pyproject.toml)
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def serve(settings: LinksSettings) -> int:
    """Serve ``POST /mutate`` over TLS on ``settings.addresses.listen`` until a signal; returns 0."""
    from aiohttp import web  # noqa: PLC0415 - only once the command runs
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from links.app import NAMESPACE, LinksMetrics, make_app  # noqa: PLC0415
    from links.review import Reviewer  # noqa: PLC0415

    registry = CollectorRegistry()
    metrics = LinksMetrics(registry)
    reviewer = Reviewer(settings.zone, settings.policies.current, settings.shards, settings.gate)
    runner = web.AppRunner(make_app(reviewer, metrics), access_log=None, handle_signals=False,
                           keepalive_timeout=settings.listener.idle_timeout)
    await runner.setup()
    assert runner.server is not None, "runner.setup() makes it"
    certificate = settings.certificate
    listener = TLSListener(runner.server, lambda: certificate.context, ListenerMetrics(registry, NAMESPACE),
                           settings.listener, log)
    # The kubernetes client alone leaves some 60,000 objects that live as long as the process; a full
    # collection scanning them takes tens of milliseconds, which would be the p99 of every review.
    gc.freeze()
    server: asyncio.Server | None = None
    observe: ObserveServer | None = None
    watcher: asyncio.Task[None] | None = None
    signals = StopSignals()
    try:
        server = await listener.bind(*settings.addresses.listen)
        log_listening(log, "https", (sock.getsockname() for sock in server.sockets))
        observe = start_observe(settings.addresses.metrics, registry, ready=lambda: settings.shards.ready)
        if observe is not None:
            log.info("metrics on %s (/metrics, /health, /ready)", observe.url)
        log.info("policies: %d; asking %s whether required links exist", len(settings.policies.current()),
                 ", ".join(settings.gate.nameservers))
        settings.shards.start()
        watcher = asyncio.create_task(_watch_files(settings, metrics))
        log.info("stopping (%s)", await signals.wait())
    finally:
        signals.close()
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        settings.shards.stop()
        await listener.shut_down(server, observe, runner.cleanup)
    log.info("stopped")
    return 0


async def _watch_files(settings: LinksSettings, metrics: LinksMetrics) -> None:
    """Poll the policy file and the certificate; keep the shard gauge current."""
    from links import files  # noqa: PLC0415 - imported by settings_from already
    watched = {"policies": settings.policies.watched, "certificate": settings.certificate.watched}
    while True:
        await asyncio.sleep(files.POLL_SECONDS)
        for name, item in watched.items():
            reloaded = item.check()
            if reloaded is not None:
                metrics.reloads.labels(name, "ok" if reloaded else "failed").inc()
        metrics.shards.set(len(settings.shards))
