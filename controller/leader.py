"""Leader election over an etcd lease: of several replicas, one writes.

A replica campaigns by creating the election key, attached to a lease of
``ttl`` seconds, in a transaction that succeeds only if the key does not
exist (``create_revision == 0``). The winner keeps the lease alive every
``ttl / 3`` seconds; its leadership is the key's create revision
(:class:`~controller.store.Guard`), which every write compares. A replica that
loses the key (lease expired while cut off from etcd, or the key deleted) stops
at its next write or keep-alive. The others watch the key and campaign as soon
as it is deleted, so a crashed leader is replaced once its lease expires, at
most ``ttl`` seconds after its last keep-alive; a leader that stops cleanly
revokes its lease and is replaced at once.

The election key lies outside every Federated-DNS prefix (it does not start
with ``/``) so that ``feddns serve`` never sees it:
``feddns-controller-leader<P>/<F>``.
"""

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

import aetcd
import aetcd.exceptions
import aetcd.transactions

from controller.store import EtcdLink, Guard, NotLeader
from feddns.etcd import EtcdError
from feddns.keys import Layout

log = logging.getLogger(__name__)


def election_key(prefix: str, federation: str) -> bytes:
    """The election key of ``federation`` under etcd prefix ``prefix`` (``feddns.keys``)."""
    return Layout(prefix).election_key(federation).encode()


def identity() -> str:
    """This replica's name in the election key's value: ``host/pid/random``."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


class Elector:
    """Campaigns for, holds and gives up leadership.

    ``on_change(True)`` is called when this replica becomes the leader,
    ``on_change(False)`` when it stops being one. ``guard()`` returns the
    current :class:`Guard` or raises :class:`NotLeader`; ``lost()`` is called by
    the writer when etcd refused a guarded write.
    """

    def __init__(
        self,
        link: EtcdLink,
        key: bytes,
        ttl: int,
        on_change: Callable[[bool], None],
        *,
        name: str | None = None,
    ) -> None:
        self.link, self.key, self.ttl = link, key, ttl
        self.name = name or identity()
        self._on_change = on_change
        self._guard: Guard | None = None
        self._lease: int | None = None
        self._lost = asyncio.Event()
        self.contacted = False
        """True once etcd has answered (the replica knows whether it leads)."""
        self._following: tuple[str, int] | None = None
        """The leader (its name and election key revision) this replica last said it follows."""

    @property
    def is_leader(self) -> bool:
        return self._guard is not None

    def guard(self) -> Guard:
        if self._guard is None:
            raise NotLeader("this replica is not the leader")
        return self._guard

    def lost(self) -> None:
        """The writer saw a guarded write fail: step down."""
        self._lost.set()

    async def run(self) -> None:
        """Campaign and hold, forever; errors are logged and retried after a pause."""
        while True:
            client = self.link.client
            try:
                if await self._campaign(client):
                    await self._hold(client)
                self._step_down()
            except Exception as exc:  # noqa: BLE001 - etcd errors, and whatever gRPC lets through
                self._step_down()
                log.warning("leader election: etcd %s: %s", self.link.endpoints.current, exc or type(exc).__name__)
                await self.link.failed(client)
                await asyncio.sleep(min(1.0, self.ttl / 3))

    async def resign(self) -> None:
        """Give up leadership now (revoke the lease) so that another replica takes over at once."""
        lease, self._lease = self._lease, None
        self._step_down()
        if lease is not None:
            try:
                await self.link.client.revoke_lease(lease)
            except EtcdError as exc:
                log.warning("leader election: could not revoke lease on exit: %s", exc)

    async def _campaign(self, client: aetcd.Client) -> bool:
        """Try to create the key; when another holds it, wait until it changes. True when we won."""
        lease = await client.lease(self.ttl)
        won, _ = await client.transaction(
            compare=[aetcd.transactions.Create(self.key) == 0],
            success=[aetcd.transactions.Put(self.key, self.name.encode(), lease=lease.id)],
            failure=[],
        )
        self.contacted = True
        current = await client.get(self.key)
        if won and current is not None and current.lease == lease.id:
            self._lease, self._lost = lease.id, asyncio.Event()
            self._guard = Guard(self.key, current.create_revision)
            self._following = None
            log.info("leader election: %s leads (revision %d)", self.name, current.create_revision)
            self._on_change(True)
            return True
        await client.revoke_lease(lease.id)
        if current is not None:
            self._follow(current.value.decode(errors="replace"), current.create_revision)
            await self._wait_for_change(client, current.header.revision)
        return False

    async def _wait_for_change(self, client: aetcd.Client, revision: int) -> None:
        try:
            await client.watch_once(self.key, timeout=self.ttl, start_revision=revision + 1)
        except aetcd.exceptions.WatchTimeoutError:
            pass  # look again: a watch can miss nothing, but a stuck one must not stall us

    async def _hold(self, client: aetcd.Client) -> None:
        """Keep the lease alive until it is lost, the writer reports a lost guard, or etcd
        has not confirmed the lease for ``ttl`` seconds."""
        assert self._lease is not None
        confirmed = time.monotonic()
        while True:
            try:
                await asyncio.wait_for(self._lost.wait(), self.ttl / 3)
                log.warning("leader election: a guarded write failed; stepping down")
                return
            except TimeoutError:
                pass
            try:
                reply = await client.refresh_lease(self._lease)
            except EtcdError as exc:
                if time.monotonic() - confirmed >= self.ttl:
                    log.warning("leader election: lease not renewed for %ds (%s); stepping down", self.ttl, exc)
                    return
                await self.link.failed(client)
                client = self.link.client
                continue
            if reply is None or reply.TTL <= 0:
                log.warning("leader election: lease expired; stepping down")
                return
            if not await self._still_ours(client):
                return
            confirmed = time.monotonic()

    async def _still_ours(self, client: aetcd.Client) -> bool:
        """The election key still exists with our create revision (it may have been
        deleted by hand, or by an operator revoking our lease)."""
        current = await client.get(self.key)
        if current is None or self._guard is None or current.create_revision != self._guard.revision:
            log.warning("leader election: the election key is no longer ours; stepping down")
            return False
        return True

    def _follow(self, leader: str, revision: int) -> None:
        """Say once which replica leads (again when another one does)."""
        if (leader, revision) != self._following:
            self._following = (leader, revision)
            log.info("following %s (leader since revision %d): not writing", leader, revision)
        else:
            log.debug("leader election: %s still leads; waiting", leader)

    def _step_down(self) -> None:
        if self._guard is not None:
            self._guard = None
            self._lease = None
            self._on_change(False)
