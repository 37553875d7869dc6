"""Leader election over an etcd lease: of several replicas, one writes.

A replica campaigns by creating the election key, attached to a lease of
``ttl`` seconds, in a transaction that succeeds only if the key does not
exist (``create_revision == 0``). The winner keeps the lease alive every
``ttl / 10`` seconds (so that an etcd stall shorter than the lease does not
expire it); its leadership is the key's create revision
(:class:`~controller.etcdlink.Guard`), which every write compares. A replica that
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
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import aetcd
import aetcd.transactions

from controller.etcdlink import EtcdLink, Guard, NotLeader
from feddns.errors import EtcdError, EtcdTimeout
from feddns.etcd.failures import cancelled_by_client, describe
from feddns.keys import Layout

log = logging.getLogger(__name__)


def election_key(prefix: str, federation: str) -> bytes:
    """The election key of ``federation`` under etcd prefix ``prefix`` (``feddns.keys``)."""
    return Layout(prefix).election_key(federation).encode()


def identity() -> str:
    """This replica's name in the election key's value: ``host/pid/random``."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


KEEPALIVES_PER_LEASE = 10
"""Keep-alives sent per lease TTL. etcd counts the TTL from the last keep-alive it
received, so an etcd that stalls for up to ``ttl * (1 - 1/KEEPALIVES_PER_LEASE)``
seconds (13.5 s of a 15 s lease) resumes with our lease still alive, and the
keep-alive queued during the stall renews it."""

RETRY_PAUSE = 0.2
"""Seconds between keep-alive attempts while etcd does not answer (each waits for
the call timeout first; a refused connection fails at once)."""


class Elector:
    """Campaigns for, holds and gives up leadership.

    ``on_change(True)`` is called when this replica becomes the leader,
    ``on_change(False)`` when it stops being one; ``on_confirm(t)`` each time etcd
    confirms the lease, with the Unix time ``t`` at which the confirmed request was sent. ``guard()`` returns the
    current :class:`Guard` or raises :class:`NotLeader`; ``lost()`` is called by
    the writer when etcd refused a guarded write. ``holds_lease()`` is true only
    while etcd cannot have expired the lease yet: the last keep-alive etcd
    confirmed was sent less than ``ttl`` (less a margin) ago. Writes that etcd
    cannot guard (the external DNS provider) ask it first.

    The elector owns its etcd connection (``link``): no other task closes it, and
    an etcd error, a timeout or a ``CancelledError`` from a closed channel is
    retried, never the end of the task; only a real cancellation ends ``run``.
    """

    def __init__(
        self,
        link: EtcdLink,
        key: bytes,
        ttl: int,
        on_change: Callable[[bool], None],
        *,
        name: str | None = None,
        on_confirm: Callable[[float], None] = lambda sent: None,
    ) -> None:
        self.link, self.key, self.ttl = link, key, ttl
        self.name = name or identity()
        self._on_change = on_change
        self._on_confirm = on_confirm
        self._guard: Guard | None = None
        self._lease: int | None = None
        self._last_lease: int | None = None
        self._lost = asyncio.Event()
        self._stop_asked = False
        self._wake = asyncio.Event()
        self._deadline = 0.0
        self.contacted = False
        """True once etcd has answered (the replica knows whether it leads)."""
        self.unreachable: str | None = "not asked yet"
        """Why etcd cannot be reached now (the last failure), or ``None`` while its last call
        succeeded: a campaign, a keep-alive, or a follower's wait for the election key."""
        self._following: tuple[str, int] | None = None
        """The leader (its name and election key revision) this replica last said it follows."""

    @property
    def is_leader(self) -> bool:
        return self._guard is not None

    @property
    def keepalive_interval(self) -> float:
        """Seconds between keep-alives of the lease."""
        return self.ttl / KEEPALIVES_PER_LEASE

    def holds_lease(self) -> bool:
        """Leader, and etcd confirmed the lease recently enough that it cannot have expired:
        a replica paused or cut off past its lease answers False before it has noticed."""
        return self._guard is not None and time.monotonic() < self._deadline

    def lease_left(self) -> float:
        """Seconds this replica may still count on its lease (0 when it does not lead): a request
        fenced by the lease must be over by then (:mod:`controller.stubzones`)."""
        return max(0.0, self._deadline - time.monotonic()) if self._guard is not None else 0.0

    def guard(self) -> Guard:
        if self._guard is None:
            raise NotLeader("this replica is not the leader")
        return self._guard

    def lost(self) -> None:
        """The writer saw a guarded write fail: step down."""
        self._lost.set()

    def stop(self) -> None:
        """Ask :meth:`run` to end at its next pause, without cancelling a call in flight: a
        gRPC call cancelled mid-flight can keep its task waiting on the channel (grpc.aio), so
        the controller's stop asks first and cancels only what has not ended in time."""
        self._stop_asked = True
        self._wake.set()
        self._lost.set()

    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop_asked

    async def run(self) -> None:
        """Campaign and hold until :meth:`stop`; errors are logged and retried after a pause."""
        failing = ""  # the failure last logged; "" while etcd answers
        while not self._stop_asked:
            client = self.link.client
            try:
                if await self._campaign(client):
                    await self._hold(client)
                if self.stopping():
                    return  # still the leader: resign() revokes the lease, for a successor at once
                self._step_down()
                failing = ""
                continue
            except asyncio.CancelledError as exc:
                if not cancelled_by_client(exc):
                    raise  # the controller is stopping
                error: BaseException = exc
            except Exception as exc:  # noqa: BLE001 - etcd errors, and whatever gRPC lets through: retried
                error = exc
            self._step_down()
            # a failure is logged when it starts and when its cause changes (a timeout, then a refused
            # password), each retry of the same cause (on any endpoint) at debug level
            cause = describe(error)
            level = logging.DEBUG if failing == cause else logging.WARNING
            self.unreachable = cause
            log.log(level, "leader election: etcd %s: %s", self.link.endpoints.current, cause)
            failing = cause
            await self.link.failed(client)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(1.0, self.ttl / 3)):  # not wait_for: controller.stubzones._sleep
                    await self._wake.wait()

    async def resign(self) -> None:
        """Give up leadership now (revoke the lease) so that another replica takes over at once."""
        lease, self._lease = self._lease, None
        self._step_down()
        if lease is not None:
            try:
                await asyncio.wait_for(self.link.client.revoke_lease(lease), 2)
            except (EtcdError, TimeoutError) as exc:
                log.warning("leader election: could not revoke lease on exit: %s", describe(exc))

    async def _campaign(self, client: aetcd.Client) -> bool:
        """Try to create the key; when another holds it, wait until it changes. True when we won."""
        sent = time.monotonic()
        lease = await client.lease(self.ttl)
        won, _ = await client.transaction(
            compare=[aetcd.transactions.Create(self.key) == 0],
            success=[aetcd.transactions.Put(self.key, self.name.encode(), lease=lease.id)],
            failure=[],
        )
        self.contacted = True
        self.unreachable = None
        current = await client.get(self.key)
        if won and current is not None and current.lease == lease.id:
            self._lead(lease.id, current.create_revision, sent)
            return True
        await client.revoke_lease(lease.id)
        if current is not None and await self._resume(client, current):
            return True
        if current is not None:
            self._follow(current.value.decode(errors="replace"), current.create_revision)
            await self._wait_for_change(client, current.header.revision)
        return False

    async def _resume(self, client: aetcd.Client, current: Any) -> bool:
        """The key is still ours, under the lease we held before a step-down that etcd
        did not see (a stall we gave up on too early): keep it instead of waiting it out."""
        if current.lease != self._last_lease or current.value != self.name.encode():
            return False
        sent = time.monotonic()
        reply = await client.refresh_lease(current.lease)
        if reply is None or reply.TTL <= 0:
            return False
        self._lead(current.lease, current.create_revision, sent)
        return True

    def _lead(self, lease: int, revision: int, sent: float) -> None:
        self._lease = self._last_lease = lease
        self._lost = asyncio.Event()
        self._confirmed(sent)
        self._guard = Guard(self.key, revision)
        self._following = None
        log.info("leader election: %s leads (revision %d)", self.name, revision)
        self._on_change(True)

    async def _wait_for_change(self, client: aetcd.Client, revision: int) -> None:
        # on a timeout look again: a watch can miss nothing, but a stuck one must not stall us
        with contextlib.suppress(EtcdTimeout):
            await client.watch_once(self.key, timeout=self.ttl, start_revision=revision + 1)

    async def _ends_in(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True when holding must end first: the writer saw a guarded
        write fail (:meth:`lost`), or the controller stops (:meth:`stop`)."""
        if self._stop_asked:
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):  # not wait_for: controller.stubzones._sleep
                await self._lost.wait()
            if not self._stop_asked:
                log.warning("leader election: a guarded write failed; stepping down")
            return True
        return False

    async def _hold(self, client: aetcd.Client) -> None:
        """Keep the lease alive until it is lost, the writer reports a lost guard, or the
        lease may have expired (no keep-alive confirmed within the TTL)."""
        assert self._lease is not None
        pause = self.keepalive_interval
        failing = False
        while not await self._ends_in(pause):
            if time.monotonic() >= self._deadline:
                log.warning("leader election: lease not confirmed for %ds; stepping down", self.ttl)
                return
            sent = time.monotonic()
            try:
                reply, ours = await asyncio.wait_for(self._confirm(client), max(0.1, self._deadline - sent))
            except (EtcdError, TimeoutError) as exc:
                self.unreachable = describe(exc)
                if not failing:
                    log.warning("leader election: keep-alive failed (%s); retrying while the lease lasts",
                                describe(exc))
                failing = True
                if not isinstance(exc, TimeoutError | EtcdTimeout):
                    await self.link.failed(client)  # a timed-out call keeps its channel: etcd may be slow
                    client = self.link.client
                pause = RETRY_PAUSE
                continue
            if reply is None or reply.TTL <= 0:
                log.warning("leader election: lease expired; stepping down")
                return
            if not ours:
                log.warning("leader election: the election key is no longer ours; stepping down")
                return
            self._confirmed(sent)
            self.unreachable = None
            if failing:
                log.info("leader election: keep-alive confirmed again; still the leader")
            # A reply that took long (etcd stalled) only vouches for the time the request was
            # sent: renew again at once so that the lease is known to last a full TTL again.
            late = time.monotonic() - sent > self.keepalive_interval
            failing, pause = False, 0.0 if late else self.keepalive_interval
            client = self.link.client  # a new one when the certificate files changed

    def _confirmed(self, sent: float) -> None:
        """etcd confirmed the lease with a request sent at ``sent`` (monotonic): it lasts at
        least ``ttl`` from then; we count on a little less."""
        self._deadline = sent + self.ttl * (1 - 1 / (2 * KEEPALIVES_PER_LEASE))
        self._on_confirm(time.time() - (time.monotonic() - sent))

    async def _confirm(self, client: aetcd.Client) -> tuple[Any, bool]:
        """Renew the lease, then check that the election key still exists with our create
        revision (it may have been deleted by hand, or by an operator revoking our lease).
        Returns the keep-alive reply and whether the key is ours; raises ``EtcdError``."""
        assert self._lease is not None
        reply = await client.refresh_lease(self._lease)
        if reply is None or reply.TTL <= 0:
            return reply, True
        current = await client.get(self.key)
        ours = current is not None and self._guard is not None and current.create_revision == self._guard.revision
        return reply, ours

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
            self._deadline = 0.0
            self._on_change(False)
