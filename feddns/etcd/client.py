"""The etcd client of every component: aetcd's ``Client`` with TLS, a leader required, and feddns's errors.

aetcd 1.0 makes plain channels only; :meth:`EtcdClient.connect` makes a TLS channel
when credentials are given. Every call feddns makes raises
:class:`~feddns.errors.EtcdError` (:class:`~feddns.errors.EtcdCompacted`,
:class:`~feddns.errors.EtcdTimeout`) from aetcd's or gRPC's error, so that callers
name no library class; a watch's events are read the same way.

Every call, watches included, asks etcd to require a leader (:data:`REQUIRE_LEADER`),
as etcd's own client does with ``WithRequireLeader``. A member cut off from the
others, or left without a quorum, answers what it last knew, forever and without
a word, unless asked so: with it, a call to such a member fails at once
(``etcdserver: no leader``, :func:`feddns.etcd.failures.failure_kind` ``"no-leader"``)
and the caller moves to another endpoint, and a watch already open is ended by
etcd a few election timeouts after the member lost its leader.

:class:`feddns.etcd.endpoints.EtcdEndpoints` imports this module when its first
client is made (this module never imports it): aetcd and gRPC take about 70 ms
to import, and ``feddns stubzone --backend skydns`` (etcd's v2 HTTP API) never
needs them.
"""

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import aetcd
import aetcd.exceptions
import aetcd.rpc
import aetcd.transactions
import aetcd.watcher
import grpc

from feddns.errors import EtcdCompacted, EtcdError, EtcdTimeout
from feddns.etcd.failures import cancelled_by_client
from feddns.etcd.urls import EtcdURL
from feddns.filewatch import Identities

log = logging.getLogger(__name__)

_Operation = aetcd.transactions.Put | aetcd.transactions.Delete

REQUIRE_LEADER = ("hasleader", "true")
"""gRPC metadata asking etcd to fail the call when the member has no leader: etcd's
``rpctypes.MetadataRequireLeaderKey`` and ``MetadataHasLeader``, what clientv3's
``WithRequireLeader`` sets. etcd checks it in its unary and stream interceptors
(``etcdserver/api/v3rpc/interceptor.go``): a call fails at once with ``no leader``,
and a watch stream open on a member that lost its leader is cancelled by etcd's
``monitorLeader``, which looks once per election timeout and waits for several
looks without one (2.2 s after the loss with etcd 3.4's 1 s default, measured)."""

MAX_MESSAGE_BYTES = 512 * 1024 * 1024
"""gRPC send and receive limit (bytes) for etcd calls, raised from the 4 MiB default:
a range read of 100,000 shard records is larger than that."""


def grpc_options(timeout: float) -> dict[str, int]:
    """gRPC channel options for calls that time out after ``timeout`` seconds.

    A dead etcd or a cut connection is noticed within seconds, not minutes: a
    keep-alive ping every 10 s that must be answered within ``timeout`` (at
    most 5 s). Pings never come more often: etcd closes a connection that pings
    more often than its ``--grpc-keepalive-min-time`` (5 s by default).

    An etcd that is frozen (SIGSTOP, a stalled VM) keeps its socket open and
    answers nothing: only an unanswered ping tells. With the keep-alive options
    alone, grpcio 1.85 left a watch on a frozen etcd hanging for over 45 s; it
    closes the connection for an unanswered ping after ``ping_timeout_ms``, so
    that is set to the same time (tests/dns/test_etcd.py freezes etcd).
    """
    return {
        "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
        "grpc.max_send_message_length": MAX_MESSAGE_BYTES,
        "grpc.keepalive_time_ms": 10_000,
        "grpc.keepalive_timeout_ms": int(1000 * min(timeout, 5.0)),
        "grpc.keepalive_permit_without_calls": 1,
        "grpc.http2.max_pings_without_data": 0,
        "grpc.http2.ping_timeout_ms": int(1000 * min(timeout, 5.0)),
    }


class EtcdClient(aetcd.Client):
    """An ``aetcd.Client`` that can also speak TLS, requires a leader, and raises :class:`EtcdError`.

    ``timeout`` (seconds) bounds each call and sets the keep-alive (:func:`grpc_options`);
    ``credentials`` (``None``: a plain channel) are used by :meth:`connect`, which
    otherwise does what aetcd does (authenticate when a user is set, then the
    stubs and the watcher), with :data:`REQUIRE_LEADER` in the metadata of every
    call. ``files`` are the identities of the certificate, key and password files the
    client was made from (:meth:`feddns.etcd.endpoints.EtcdEndpoints.changed`).
    """

    def __init__(self, url: EtcdURL, *, credentials: grpc.ChannelCredentials | None, user: str | None,
                 password: str | None, timeout: float, files: Identities = ()) -> None:
        super().__init__(host=url.host, port=url.port, username=user, password=password,
                         timeout=timeout, options=grpc_options(timeout))
        self._credentials = credentials
        self.url = url
        self.files = files

    async def connect(self) -> None:
        with _etcd_errors():
            await self._connect()

    async def _connect(self) -> None:
        """aetcd's ``connect`` (aetcd/client.py, ``Client.connect``), over TLS when credentials
        were given, and with :data:`REQUIRE_LEADER` in ``metadata``.

        aetcd passes ``metadata`` to every call, and to the watcher, which it makes here
        with the metadata of the moment: so it is set before the watcher, not after
        ``super().connect()``. The authentication itself requires a leader too: etcd
        puts it through raft, and a member without a leader would let it time out."""
        if self._connected.is_set():
            return
        if self._is_connecting:
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        self._is_connecting = True
        try:
            options = list(self._options.items())
            if self._credentials is None:
                channel = aetcd.rpc.insecure_channel(self.url.target, options=options)
            else:
                channel = aetcd.rpc.secure_channel(self.url.target, self._credentials, options=options)
            self.channel = channel
            metadata: tuple[tuple[str, str], ...] = (REQUIRE_LEADER,)
            if self._username is not None and self._password is not None:
                self.auth_stub = aetcd.rpc.AuthStub(channel)
                reply = await self.auth_stub.Authenticate(
                    aetcd.rpc.AuthenticateRequest(name=self._username, password=self._password),
                    timeout=self._timeout, metadata=metadata)
                metadata += (("token", reply.token),)
            self.metadata = metadata
            self.kvstub = aetcd.rpc.KVStub(channel)
            self.clusterstub = aetcd.rpc.ClusterStub(channel)
            self.leasestub = aetcd.rpc.LeaseStub(channel)
            self.maintenancestub = aetcd.rpc.MaintenanceStub(channel)
            self._watcher = aetcd.watcher.Watcher(aetcd.rpc.WatchStub(channel), timeout=self._timeout,
                                                  metadata=self.metadata)
            self._connected.set()
        finally:
            self._is_connecting = False

    # -- the calls feddns makes, with feddns's errors ------------------------------------------

    async def get(self, key: bytes, serializable: bool = False) -> aetcd.Get | None:
        with _etcd_errors():
            return await super().get(key, serializable)

    async def get_range(self, range_start: bytes, range_end: bytes, sort_order: str | None = None,
                        sort_target: str = "key") -> aetcd.GetRange:
        with _etcd_errors():
            return await super().get_range(range_start, range_end, sort_order, sort_target)

    async def transaction(self, compare: Sequence[aetcd.transactions.BaseCompare], success: Sequence[_Operation],
                          failure: Sequence[_Operation]) -> tuple[bool, list[Any]]:
        with _etcd_errors():
            return await super().transaction(compare, success, failure)

    async def lease(self, ttl: int, lease_id: int | None = None) -> aetcd.Lease:
        with _etcd_errors():
            return await super().lease(ttl, lease_id)

    async def revoke_lease(self, lease_id: int) -> None:
        with _etcd_errors():
            await super().revoke_lease(lease_id)

    async def refresh_lease(self, lease_id: int) -> aetcd.rpc.LeaseKeepAliveResponse | None:
        with _etcd_errors():
            return await super().refresh_lease(lease_id)

    async def status(self) -> aetcd.Status:
        with _etcd_errors():
            return await super().status()

    async def check_leader(self) -> None:
        """One ``Status`` call, which etcd fails (``no leader``) when this member has no leader.

        Cheaper than :meth:`status` (which also lists the members); raises :class:`EtcdError`."""
        with _etcd_errors():
            await self.connect()
            reply = await self.maintenancestub.Status(aetcd.rpc.StatusRequest(), timeout=self._timeout,
                                                      metadata=self.metadata)
        if reply.leader == 0:  # etcd refuses the call itself first; this holds whatever the interceptor does
            raise EtcdError("etcdserver: no leader")

    # The watch calls take aetcd's parameters, too many for ruff's taste: an override
    # must accept what the method it overrides accepts.

    async def watch(self, key: bytes, range_end: bytes | None = None, start_revision: int | None = None,  # noqa: PLR0913, PLR0917
                    progress_notify: bool = False, kind: aetcd.EventKind | None = None, prev_kv: bool = False,
                    watch_id: int | None = None, fragment: bool = False) -> aetcd.Watch:
        """aetcd's watch, whose events raise :class:`EtcdError` too."""
        with _etcd_errors():
            watch = await super().watch(key, range_end, start_revision, progress_notify, kind, prev_kv,
                                        watch_id, fragment)
        return aetcd.Watch(functools.partial(_events, watch), watch.cancel, watch.watch_id)

    async def watch_once(self, key: bytes, timeout: float | None = None, range_end: bytes | None = None,  # noqa: ASYNC109, PLR0913, PLR0917
                         start_revision: int | None = None, progress_notify: bool = False,
                         kind: aetcd.EventKind | None = None, prev_kv: bool = False, watch_id: int | None = None,
                         fragment: bool = False) -> aetcd.Event | Exception | None:
        """aetcd's watch_once; the error that ended the stream is returned as aetcd returns it."""
        with _etcd_errors():
            return await super().watch_once(key, timeout, range_end, start_revision, progress_notify, kind,
                                            prev_kv, watch_id, fragment)


async def _events(watch: aetcd.Watch) -> AsyncIterator[aetcd.Event]:
    with _etcd_errors():
        async for event in watch:
            yield event


@contextlib.contextmanager
def _etcd_errors() -> Iterator[None]:
    """Raise :class:`EtcdError` from aetcd's errors, and from gRPC's where aetcd lets them through."""
    try:
        yield
    except (aetcd.exceptions.ClientError, aetcd.rpc.AioRpcError) as exc:
        raise _wrapped(exc) from exc


def _wrapped(exc: aetcd.exceptions.ClientError | aetcd.rpc.AioRpcError) -> EtcdError:
    if isinstance(exc, aetcd.rpc.AioRpcError):
        message = exc.details() or exc.code().name
        return EtcdTimeout(message) if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED else EtcdError(message)
    message = str(exc) or type(exc).__name__
    if isinstance(exc, aetcd.exceptions.RevisionCompactedError):
        return EtcdCompacted(message, exc.compacted_revision)
    if isinstance(exc, aetcd.exceptions.WatchTimeoutError | aetcd.exceptions.ConnectionTimeoutError):
        return EtcdTimeout(message)
    return EtcdError(message)


async def close_quietly(client: aetcd.Client) -> None:
    """Close ``client``, within 2 s, whatever state its channel is in; a real cancellation still ends the caller."""
    try:
        await asyncio.wait_for(client.close(), 2)
    except (Exception, asyncio.CancelledError) as exc:  # a broken channel may fail any way
        if isinstance(exc, asyncio.CancelledError) and not cancelled_by_client(exc):
            raise
        log.debug("etcd: closing a client: %s", exc or type(exc).__name__)


MAX_BYTE = 0xFF


def prefix_range_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes ``[prefix, range_end)`` every key under ``prefix`` (etcd's
    ``RangeRequest``: clientv3's ``GetPrefixRangeEnd``); ``b"\\0"`` (every key) when ``prefix`` is all 0xFF."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < MAX_BYTE:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"
