"""Connecting to etcd with ``aetcd``, the maintained asyncio fork of ``etcd3``.

``etcd3`` (named in the design card) no longer imports with current protobuf and
has had no release since 2020; ``aetcd`` keeps its API (docs/choices.md).
The gRPC receive limit is raised from the 4 MiB default: a range read of
100,000 shard records is larger than that.
"""

import logging

import aetcd
import aetcd.exceptions

from feddns.errors import ConfigError
from feddns.hostport import parse_etcd_url

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 512 * 1024 * 1024
"""gRPC send and receive limit (bytes) for etcd calls."""

GRPC_OPTIONS = {
    "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
    "grpc.max_send_message_length": MAX_MESSAGE_BYTES,
    # Notice a dead etcd or a cut connection within seconds, not minutes. An etcd
    # that is frozen (SIGSTOP, a stalled VM) keeps its socket open and answers
    # nothing: only an unanswered ping tells. With the keepalive settings alone,
    # grpcio 1.85 left a watch on a frozen etcd hanging for over 45 s; with
    # ``ping_timeout_ms`` it fails within 5-15 s (tests/dns/test_etcd.py freezes etcd).
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.keepalive_permit_without_calls": 1,
    "grpc.http2.max_pings_without_data": 0,
    "grpc.http2.ping_timeout_ms": 5_000,
}

EtcdError = aetcd.exceptions.ClientError
"""What every failed etcd call raises (connection failures, timeouts, compaction)."""


class Endpoints:
    """The etcd client URLs of one cluster (``--etcd``, repeatable), tried in turn.

    ``urls`` are ``http://host:port`` strings; raises :class:`ConfigError` when
    the list is empty or a URL is bad. ``client()`` returns a new
    ``aetcd.Client`` for the current endpoint; ``failover()`` moves on to the
    next one after a failure.
    """

    def __init__(self, urls: list[str], timeout: float = 5.0) -> None:
        if not urls:
            raise ConfigError("at least one etcd endpoint is needed")
        self.addresses = [parse_etcd_url(url) for url in urls]
        self.timeout = timeout
        self._current = 0

    @property
    def current(self) -> str:
        host, port = self.addresses[self._current]
        return f"{host}:{port}"

    def client(self) -> aetcd.Client:
        """A client for the current endpoint (connects lazily on the first call)."""
        host, port = self.addresses[self._current]
        return aetcd.Client(host=host, port=port, timeout=self.timeout, options=dict(GRPC_OPTIONS))

    def failover(self) -> None:
        """Move to the next endpoint (wrapping round)."""
        self._current = (self._current + 1) % len(self.addresses)
        if len(self.addresses) > 1:
            log.info("etcd: trying endpoint %s", self.current)


def prefix_range_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes ``[prefix, range_end)`` every key under ``prefix``."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"
