"""The controller's etcd side: one shared connection and leader-guarded writes.

Every write of the controller is an etcd transaction whose compare is "the
election key still has the create revision it had when this replica won"
(:class:`Guard`). A replica that lost the election, whose lease expired while
it was cut off, or that was replaced by another leader, therefore cannot write:
etcd refuses, and the writer learns it is no longer the leader
(:class:`NotLeader`). Transactions carry at most :data:`MAX_TXN_OPS`
operations (etcd's ``--max-txn-ops`` defaults to 128).
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import aetcd
import aetcd.transactions

from feddns.etcd import Endpoints, prefix_range_end

log = logging.getLogger(__name__)

MAX_TXN_OPS = 100
"""Operations per transaction, below etcd's default limit of 128."""

Op: TypeAlias = "aetcd.transactions.Put | aetcd.transactions.Delete"


class NotLeader(Exception):
    """A guarded transaction failed its compare: this replica is not the leader."""


@dataclass(frozen=True, slots=True)
class Guard:
    """Leadership as etcd sees it: ``key`` (the election key) was created at ``revision`` by us."""

    key: bytes
    revision: int


class EtcdLink:
    """The one etcd client of the controller, shared by the elector and the writer.

    ``client`` creates it on first use; ``failed(client)`` drops a client after
    an error (only if it is still the current one) and moves to the next
    endpoint, so that a new gRPC channel is made instead of waiting out gRPC's
    reconnect backoff. Raises nothing itself.
    """

    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints
        self._client: aetcd.Client | None = None

    @property
    def client(self) -> aetcd.Client:
        if self._client is None:
            self._client = self.endpoints.client()
        return self._client

    async def failed(self, client: aetcd.Client) -> None:
        if client is not self._client:
            return
        self._client = None
        self.endpoints.failover()
        await _close_quietly(client)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await _close_quietly(client)


async def _close_quietly(client: aetcd.Client) -> None:
    try:
        await client.close()
    except Exception as exc:  # noqa: BLE001 - closing a broken channel may fail any way
        log.debug("etcd: closing a failed client: %s", exc)


async def read_prefix(client: aetcd.Client, prefix: str) -> dict[str, bytes]:
    """Every key under ``prefix`` with its value (one range read). Raises ``EtcdError``."""
    raw = prefix.encode()
    result = await client.get_range(raw, prefix_range_end(raw))
    return {kv.key.decode(): kv.value for kv in result.kvs}


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
