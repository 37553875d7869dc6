"""Where a serving component listens: its own address (``--listen``) and its plain-HTTP observe address
(``--metrics``), checked before any socket opens and announced once bound (docs/reference.md section 6);
and, for the HTTPS components, the bounds of their listener (:class:`feddns.https.ListenerSettings`).
"""

import argparse
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from feddns import numbers
from feddns.hostport import check_resolves, host_port, parse_hostport
from feddns.https import ListenerSettings
from feddns.lifecycle import cannot_listen
from feddns.observe import Check, Detail, ObserveServer


@dataclass(frozen=True)
class ListenAddresses:
    """The two addresses of a component that serves HTTPS (``feddns stubzone``, ``feddns links``)."""

    listen: tuple[str, int]
    """``(host, port)`` of the HTTPS socket, IPv6 without brackets; port 0 lets the system pick one (``--listen``)."""
    metrics: str | None
    """``HOST:PORT`` of plain-HTTP ``/metrics``, ``/health`` and ``/ready``; ``None``: not served (``--metrics``)."""

    @classmethod
    def from_flags(cls, listen: str, metrics: str | None) -> "ListenAddresses":
        """Check ``--listen`` and ``--metrics``; raises :class:`ConfigError` naming the bad one."""
        address = parse_hostport(listen, flag="--listen")
        check_resolves("--listen", *address)
        if metrics:
            check_resolves("--metrics", *parse_hostport(metrics, flag="--metrics"))
        return cls(address, metrics or None)


DEFAULT_LISTEN = "0.0.0.0:8443"
"""``--listen`` of the HTTPS components when not given."""
LISTENER = ListenerSettings()
"""The defaults of the listener's flags."""


def add_https_arguments(parser: argparse.ArgumentParser, *, serves: str, ready: str) -> None:
    """Add the flags every HTTPS component (``feddns stubzone``, ``feddns links``) takes alike:
    ``--listen`` (the HTTPS address: ``serves`` names what is served there), ``--cert`` and
    ``--key`` (PEM files, read again when they change) and ``--metrics`` (the observe address:
    ``ready`` says when ``/ready`` answers 200). Read back with :meth:`ListenAddresses.from_flags`.
    """
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                        help=f"HTTPS address of {serves} (default {DEFAULT_LISTEN}; port 0 picks a free port)")
    parser.add_argument("--cert", type=Path, required=True,
                        help="server certificate, PEM (feddns certs issue-server); read again when it changes")
    parser.add_argument("--key", type=Path, required=True, help="server private key, PEM")
    parser.add_argument("--metrics", metavar="HOST:PORT",
                        help=f"plain-HTTP /metrics, /health and /ready ({ready})")
    limits = parser.add_argument_group("connections (no peer can use them up for the others)")
    limits.add_argument("--max-connections", type=int, default=LISTENER.max_connections, metavar="N",
                        help="connections past the TLS handshake open at once; more are closed "
                             f"(default {LISTENER.max_connections})")
    limits.add_argument("--max-connections-per-client", type=int, default=LISTENER.max_connections_per_client,
                        metavar="N", help="of those, from one address (IPv6: one /64), and with one client "
                                          "certificate; more are closed after their handshake (default "
                                          f"{LISTENER.max_connections_per_client})")
    limits.add_argument("--max-pending", type=int, default=LISTENER.max_pending, metavar="N",
                        help="connections whose TLS handshake is not done, open at once; when full, the oldest "
                             "of the address holding the most is closed (default "
                             f"{LISTENER.max_pending})")
    limits.add_argument("--max-pending-per-address", type=int, default=LISTENER.max_pending_per_address,
                        metavar="N", help="of those, from one address (IPv6: one /64); above it, that "
                                          f"address's oldest is closed (default {LISTENER.max_pending_per_address})")
    limits.add_argument("--tls-handshake-timeout", **numbers.seconds(),
                        default=LISTENER.handshake_timeout, metavar="SECONDS",
                        help="time a client has from the accept to finish the TLS handshake "
                             f"(default {LISTENER.handshake_timeout:g})")
    limits.add_argument("--request-timeout", **numbers.seconds(), default=LISTENER.request_timeout, metavar="SECONDS",
                        help="time a request has from its first byte to arrive whole, head and body "
                             f"(default {LISTENER.request_timeout:g})")
    limits.add_argument("--idle-timeout", **numbers.seconds(), default=LISTENER.idle_timeout, metavar="SECONDS",
                        help=f"time a kept-alive connection may wait for its next request "
                             f"(default {LISTENER.idle_timeout:g})")


def listener_settings(args: argparse.Namespace) -> ListenerSettings:
    """The listener's bounds from the flags of :func:`add_https_arguments`; :class:`ConfigError` naming a bad one."""
    return ListenerSettings(
        handshake_timeout=args.tls_handshake_timeout, max_connections=args.max_connections,
        max_pending=args.max_pending, max_pending_per_address=args.max_pending_per_address,
        max_connections_per_client=args.max_connections_per_client,
        request_timeout=args.request_timeout, idle_timeout=args.idle_timeout,
    ).check()


def log_listening(log: logging.Logger, scheme: str, addresses: Iterable[Any]) -> None:
    """Log ``listening on SCHEME://HOST:PORT`` once per bound socket address (``getsockname()``: host, port...)."""
    for address in addresses:
        log.info("listening on %s://%s", scheme, host_port(address[0], address[1]))


def start_observe(metrics: str | None, registry: CollectorRegistry, ready: Check,
                  health_detail: Detail | None = None) -> ObserveServer | None:
    """Serve ``registry`` at ``metrics`` ``/metrics``, ``/health`` (always 200; ``health_detail``'s text
    after ``ok``) and ``/ready`` (``ready()``); ``None`` when ``metrics`` is ``None``. Raises
    :class:`ConfigError` naming ``--metrics`` when it cannot bind."""
    if metrics is None:
        return None
    observe = ObserveServer(metrics, registry, health=lambda: True, ready=ready, health_detail=health_detail)
    try:
        observe.start()
    except OSError as exc:
        raise cannot_listen("--metrics", metrics, exc) from exc
    return observe
