"""``feddns controller --config FILE [--metrics HOST:PORT]`` (docs/reference.md sections 6 and 7).

The config file is validated in full, and the metrics address parsed, before
anything connects; a bad one is a :class:`~feddns.errors.ConfigError` (one
line, exit status 2), as is a ``--metrics`` address that cannot be bound. Then
the controller runs until SIGINT or SIGTERM, when it stops its watches and
gives up leadership so that another replica takes over at once; the stop is
logged.
"""

from __future__ import annotations  # Controller is imported only in run()

import argparse
import asyncio
import logging
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from feddns.hostport import check_resolves, parse_hostport
from feddns.lifecycle import StopSignals, cannot_listen
from feddns.observe import ObserveServer

if TYPE_CHECKING:
    from controller.app import Controller

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the controller's flags."""
    parser.add_argument(
        "--config", required=True, metavar="FILE",
        help="the controller config file (YAML; docs/reference.md section 7, docs/controller.md)",
    )
    parser.add_argument(
        "--max-config-size", default="1MiB", metavar="BYTES",
        help="refuse a config file larger than this, unread, at start and on reload; suffixes KiB, MiB "
             "(default 1MiB, the most a ConfigMap holds)",
    )
    parser.add_argument(
        "--allow-loopback-nameservers", action="store_true",
        help="let nameservers list loopback addresses (a test on one host; the stub-zone endpoints "
             "need the same flag to take them)",
    )
    parser.add_argument(
        "--metrics", metavar="HOST:PORT",
        help="serve Prometheus /metrics, /health and /ready here (port 0 picks one)",
    )


def run(args: argparse.Namespace) -> int:
    """Validate, then run until signalled; returns the exit status."""
    # The controller imports the kubernetes client (a second or more): only once the command runs
    # and the config is loaded, so that --help and a bad config answer at once.
    from controller.config import CONFIG_SIZE_FLAG, load_config  # noqa: PLC0415
    from feddns.configfile import SizeLimit, parse_bytes  # noqa: PLC0415

    limit = SizeLimit(parse_bytes(args.max_config_size, CONFIG_SIZE_FLAG), CONFIG_SIZE_FLAG)
    config = load_config(args.config, limit, loopback=args.allow_loopback_nameservers)
    from controller.app import Controller  # noqa: PLC0415

    if args.metrics:
        check_resolves("--metrics", *parse_hostport(args.metrics, flag="--metrics"))
    registry = CollectorRegistry()
    controller = Controller(config, registry)
    controller.config_path = args.config
    controller.config_limit = limit
    controller.config_loopback = args.allow_loopback_nameservers
    observe = _observe(args.metrics, registry, controller) if args.metrics else None
    try:
        asyncio.run(_main(controller, observe))
    finally:
        if observe is not None:
            observe.stop()
    return 0


def _observe(listen: str, registry: CollectorRegistry, controller: Controller) -> ObserveServer:
    observe = ObserveServer(listen, registry, controller.healthy, controller.ready, controller.readiness)
    try:
        observe.start()
    except OSError as exc:
        raise cannot_listen("--metrics", listen, exc) from exc
    return observe


async def _main(controller: Controller, observe: ObserveServer | None) -> None:
    stop = asyncio.Event()
    signals = StopSignals()
    if observe is not None:
        log.info("metrics on %s/metrics", observe.url)

    async def wait_for_signal() -> None:
        log.info("stopping (%s)", await signals.wait())
        stop.set()

    waiter = asyncio.create_task(wait_for_signal())
    log.info(
        "federation %s: %d clusters, etcd %s prefix %r",
        controller.config.federation, len(controller.config.clusters),
        ", ".join(controller.config.etcd_endpoints), controller.config.etcd_prefix,
    )
    try:
        await controller.run(stop)
    finally:
        waiter.cancel()
        signals.close()
    log.info("stopped")
