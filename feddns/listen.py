"""Where a serving component listens: its own address (``--listen``) and its plain-HTTP observe address
(``--metrics``), checked before any socket opens and announced once bound (docs/reference.md section 6).
"""

import argparse
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from feddns.hostport import parse_hostport
from feddns.lifecycle import cannot_listen
from feddns.observe import Check, ObserveServer


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
        address = parse_hostport(listen)
        if metrics:
            parse_hostport(metrics)
        return cls(address, metrics or None)


DEFAULT_LISTEN = "0.0.0.0:8443"
"""``--listen`` of the HTTPS components when not given."""


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


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as written on a command line or in a URL: an IPv6 host in brackets (RFC 3986 section 3.2.2)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def log_listening(log: logging.Logger, scheme: str, addresses: Iterable[Any]) -> None:
    """Log ``listening on SCHEME://HOST:PORT`` once per bound socket address (``getsockname()``: host, port...)."""
    for address in addresses:
        log.info("listening on %s://%s", scheme, host_port(address[0], address[1]))


def start_observe(metrics: str | None, registry: CollectorRegistry, ready: Check) -> ObserveServer | None:
    """Serve ``registry`` at ``metrics`` ``/metrics``, ``/health`` (always 200) and ``/ready`` (``ready()``);
    ``None`` when ``metrics`` is ``None``. Raises :class:`ConfigError` naming ``--metrics`` when it cannot bind."""
    if metrics is None:
        return None
    observe = ObserveServer(metrics, registry, health=lambda: True, ready=ready)
    try:
        observe.start()
    except OSError as exc:
        raise cannot_listen("--metrics", metrics, exc) from exc
    return observe
