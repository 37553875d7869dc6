# aetcd.client: the Client (aetcd/client.py), with the calls feddns makes.
#
# The channel, the service stubs and the watcher are None until connect() has run;
# they are typed as connect() leaves them, because they are only used after it (every
# call method connects first; feddns.etcd.client.EtcdClient's connect() sets them itself).

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

from . import rpc, transactions
from .leases import Lease
from .rtypes import Event, EventKind, Get, GetRange, Watch
from .transactions import BaseCompare
from .watcher import Watcher

_Operation = transactions.Put | transactions.Delete
_Response = rpc.ResponseOp | list[tuple[bytes, Get]]

class Transactions:
    create: type[transactions.Create]
    mod: type[transactions.Mod]
    put: type[transactions.Put]
    delete: type[transactions.Delete]

class Status:
    # leader (a Member or None) is left out: feddns does not read it.
    version: str
    db_size: int
    raft_index: int
    raft_term: int

class Client:
    transactions: Transactions
    channel: rpc.Channel
    metadata: tuple[tuple[str, str], ...] | None
    auth_stub: rpc.AuthStub | None
    kvstub: rpc.KVStub
    clusterstub: rpc.ClusterStub
    leasestub: rpc.LeaseStub
    maintenancestub: rpc.MaintenanceStub
    _host: str
    _port: int
    _username: str | None
    _password: str | None
    _timeout: float | None
    _options: dict[str, Any]
    _connect_wait_timeout: float
    _connected: asyncio.Event
    _is_connecting: bool
    _watcher: Watcher
    def __init__(self, host: str = "localhost", port: int = 2379, username: str | None = None,
                 password: str | None = None, timeout: float | None = None,
                 options: dict[str, Any] | None = None, connect_wait_timeout: float = 3) -> None: ...
    async def connect(self) -> None: ...
    async def close(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None: ...
    async def get(self, key: bytes, serializable: bool = False) -> Get | None: ...
    async def get_range(self, range_start: bytes, range_end: bytes, sort_order: str | None = None,
                        sort_target: str = "key") -> GetRange: ...
    # aetcd defaults success and failure to None, which fails in the call: always give both.
    # The responses are protobuf ResponseOps, and for a Get a list of (value, Get) pairs.
    async def transaction(self, compare: Sequence[BaseCompare], success: Sequence[_Operation],
                          failure: Sequence[_Operation]) -> tuple[bool, list[_Response]]: ...
    async def lease(self, ttl: int, lease_id: int | None = None) -> Lease: ...
    async def revoke_lease(self, lease_id: int) -> None: ...
    # The first keep-alive reply; None when etcd ends the stream without one.
    async def refresh_lease(self, lease_id: int) -> rpc.LeaseKeepAliveResponse | None: ...
    async def status(self) -> Status: ...
    async def watch(self, key: bytes, range_end: bytes | None = None, start_revision: int | None = None,
                    progress_notify: bool = False, kind: EventKind | None = None, prev_kv: bool = False,
                    watch_id: int | None = None, fragment: bool = False) -> Watch: ...
    # The first event; or the error that ended the stream, returned, not raised (None when
    # the client was closed). WatchTimeoutError when nothing came within ``timeout``.
    async def watch_once(self, key: bytes, timeout: float | None = None, range_end: bytes | None = None,  # noqa: ASYNC109
                         start_revision: int | None = None, progress_notify: bool = False,
                         kind: EventKind | None = None, prev_kv: bool = False, watch_id: int | None = None,
                         fragment: bool = False) -> Event | Exception | None: ...
