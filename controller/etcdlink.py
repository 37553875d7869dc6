"""The controller's etcd side: a connection per task and leader-guarded writes.

Every write of the controller is an etcd transaction whose compare is "the
election key still has the create revision it had when this replica won"
(:class:`Guard`). A replica that lost the election, whose lease expired while
it was cut off, or that was replaced by another leader, therefore cannot write:
etcd refuses, and the writer learns it is no longer the leader
(:class:`NotLeader`). Transactions carry at most :data:`MAX_TXN_OPS`
operations (etcd's ``--max-txn-ops`` defaults to 128).
"""

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import aetcd
import aetcd.transactions

from feddns.errors import FeddnsError
from feddns.etcd.client import close_quietly, prefix_range_end
from feddns.etcd.endpoints import EtcdEndpoints

log = logging.getLogger(__name__)

MAX_TXN_OPS = 100
"""Operations per transaction, below etcd's default limit of 128."""

Op: TypeAlias = "aetcd.transactions.Put | aetcd.transactions.Delete"


class NotLeader(FeddnsError):
    """A guarded transaction failed its compare: this replica is not the leader."""


@dataclass(frozen=True, slots=True)
class Guard:
    """Leadership as etcd sees it: ``key`` (the election key) was created at ``revision`` by us."""

    key: bytes
    revision: int


class EtcdLink:
    """The etcd client of one task of the controller (the elector, the writer, the
    prefix watch): each owns its own, so that one task giving up its connection
    never breaks a call of another (a write that times out must not cancel the
    lease keep-alive).

    ``client`` creates it on first use, and anew when the certificate or
    password files changed (a rotated Secret); ``failed(client)`` drops a client
    after an error (only if it is still the current one) and moves to the next
    endpoint, so that a new gRPC channel is made instead of waiting out gRPC's
    reconnect backoff. Raises nothing itself.
    """

    def __init__(self, endpoints: EtcdEndpoints) -> None:
        self.endpoints = endpoints
        self._client: aetcd.Client | None = None

    @property
    def client(self) -> aetcd.Client:
        """The current client: a new one after a failure or when the files changed."""
        if self._client is not None and self.endpoints.changed(self._client):
            log.info("etcd: the client certificate or password files changed; reconnecting")
            old, self._client = self._client, None
            _close_later(old)
        if self._client is None:
            self._client = self.endpoints.client()
        return self._client

    async def failed(self, client: aetcd.Client) -> None:
        if client is not self._client:
            return
        self._client = None
        self.endpoints.failover()
        await close_quietly(client)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await close_quietly(client)


_closing: set["asyncio.Task[None]"] = set()


def _close_later(client: aetcd.Client) -> None:
    """Close a replaced client in the background (its owner holds no call on it now)."""
    task = asyncio.get_running_loop().create_task(close_quietly(client))
    _closing.add(task)
    task.add_done_callback(_closing.discard)


async def read_prefix(client: aetcd.Client, prefix: str) -> tuple[dict[str, bytes], int]:
    """Every key under ``prefix`` with its value (one range read), and the revision read at.
    Raises ``EtcdError``."""
    raw = prefix.encode()
    result = await client.get_range(raw, prefix_range_end(raw))
    return {kv.key.decode(): kv.value for kv in result.kvs}, int(result.header.revision)


def put(key: str, value: bytes) -> Op:
    return aetcd.transactions.Put(key.encode(), value)


def delete(key: str) -> Op:
    return aetcd.transactions.Delete(key.encode())


async def commit(client: aetcd.Client, guard: Guard, ops: Sequence[Op]) -> None:
    """Apply ``ops`` in transactions of at most :data:`MAX_TXN_OPS`, each
    guarded by ``guard``. Raises :class:`NotLeader` when a guard fails (the
    batches before it are applied) and ``EtcdError`` on a failed call."""
    for start in range(0, len(ops), MAX_TXN_OPS):
        compare = aetcd.transactions.Create(guard.key) == guard.revision
        ok, _ = await client.transaction(
            compare=[compare], success=list(ops[start:start + MAX_TXN_OPS]), failure=[]
        )
        if not ok:
            raise NotLeader("the election key changed: another replica leads")
