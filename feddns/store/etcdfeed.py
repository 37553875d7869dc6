"""Records from etcd: a paged range read at one revision, then a watch from the next.

The design document's Federated-DNS "retrieves all the matching records ...
from its etcd" on every lookup; we read once and watch instead (CoreDNS's
etcd plugin reads per query, which users report as slow). The first read is
paged (:data:`PAGE_KEYS` keys a request, every page at the same revision), and
each page is parsed into a new index in a worker thread while the loop goes on
answering from the old one and etcd reads the next page; the new index replaces the
old one when complete.

When the watch breaks, it resumes from the last revision seen; when that
revision has been compacted, it lists again. When the client certificate or
password files change (a rotated Secret), it reconnects with the new ones and
resumes from the revision. While etcd is unreachable the last
records are served (before the first load there are none: every query in the
zone is answered SERVFAIL until one succeeds), and retries back off
exponentially (:class:`feddns.backoff.Backoff`, 0.1 s doubling to 5 s, moving to
the next ``--etcd`` endpoint each time); the delay is reset only once etcd
answers again. The loss is logged once (WARNING) and the return once
(INFO); the retries in between are logged at DEBUG.

A member that has lost its leader (cut off from the others by a partition, or
left without a quorum) would go on answering what it knew, and the records would
silently stop following etcd. Every call requires a leader
(:data:`feddns.etcd.client.REQUIRE_LEADER`), and beside the watch the member is
asked every :attr:`EtcdSource.leader_check` seconds whether it still has one:
etcd itself ends a watch on a leaderless member only a few election timeouts
after the loss. A member without a leader is a loss like any other: the next endpoint
is tried, and until one with a leader answers, ``/ready``'s body and
``feddns_etcd_leader`` (:class:`EtcdCollector`) say that the records of revision
N are served with no leader behind them.
"""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import aetcd
import aetcd.exceptions
from aetcd import rpc
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from feddns.backoff import Backoff
from feddns.dns.index import Index
from feddns.errors import EtcdCompacted, FeddnsError
from feddns.etcd.client import EtcdClient, close_quietly, prefix_range_end
from feddns.etcd.endpoints import EtcdEndpoints, unless_changed
from feddns.etcd.failures import describe
from feddns.keys import Layout
from feddns.store import Feed, collections_paused

log = logging.getLogger(__name__)

PAGE_KEYS = 100_000
"""Keys read per range request of a full load (about 15 MB of records). etcd 3.4
counts every key left in the range on each paged request, so fewer, larger pages
read a million keys in a tenth of the time of 10,000-key pages."""


_ETCD_FAILURES = (aetcd.exceptions.ClientError, rpc.AioRpcError, OSError, TimeoutError, FeddnsError)
"""How talking to etcd fails: its refusals, gRPC errors, the network, timeouts, unreadable
credentials files; anything else is a bug."""


class EtcdSource:
    """Keeps ``feed`` in step with every key under ``layout.root`` in etcd.

    ``backoff`` is ``(first, most)`` in seconds between retries (:class:`feddns.backoff.Backoff`); ``leader_check`` the
    seconds between two questions to the member followed whether it still has a leader.
    """

    def __init__(self, endpoints: EtcdEndpoints, layout: Layout, feed: Feed,
                 backoff: tuple[float, float] = (0.1, 5.0), leader_check: float = 1.0) -> None:
        self.endpoints = endpoints
        self.root = layout.root.encode()
        self.feed = feed
        self.backoff = backoff
        self.leader_check = leader_check
        self.revision: int | None = None
        self.lost_since: float | None = None
        """Monotonic time since when no etcd member with a leader has answered (``None``: one does)."""
        self.lost_why = ""
        """The endpoint and the failure that began the loss, for ``/ready``."""

    @property
    def following(self) -> bool:
        """True while the records served follow an etcd member that has a leader."""
        return self.lost_since is None and self.feed.responder.ready

    def collector(self) -> "EtcdCollector":
        """Its metrics, for the registry of ``--metrics``."""
        return EtcdCollector(self)

    def readiness(self) -> str:
        """What ``/ready`` adds to its status: nothing while the records follow a member
        with a leader; otherwise which records are served, and for how long nothing has been
        behind them."""
        lost_since = self.lost_since
        if lost_since is None:
            return "" if self.feed.responder.ready else "no records loaded yet (reading etcd)"
        if not self.feed.responder.ready:
            return f"no records loaded yet: etcd {self.lost_why}"
        return (f"serving the records of revision {self.feed.index.revision} with no etcd leader behind them "
                f"for {time.monotonic() - lost_since:.0f} s (etcd {self.lost_why})")

    async def run(self) -> None:
        """Run until cancelled; never raises for etcd failures."""
        retry = Backoff(*self.backoff)
        while True:
            client = self.endpoints.client()
            try:
                if self.revision is None:
                    await self._load(client)
                else:
                    await client.check_leader()  # etcd answers, with a leader: the watch can start
                self._back()
                retry.reset()
                if await unless_changed(self.endpoints, client, self._follow(client)):
                    continue  # new certificate or password files: reconnect, resume from the revision
            except EtcdCompacted as exc:
                log.warning("etcd: revision %s is compacted (%s); listing again", self.revision, exc)
                self.revision = None
                self.feed.restarts += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever fails, the last records are served and etcd retried
                self._lost(exc, retry.delay)
                self.endpoints.failover()
                await retry.sleep()
            finally:
                await close_quietly(client)

    def _lost(self, exc: BaseException, delay: float) -> None:
        self.feed.restarts += 1
        reason = describe_failure(exc)
        if self.lost_since is None:
            self.lost_since = time.monotonic()
            self.lost_why = f"{self.endpoints.current}: {reason}"
            others = "the other endpoints" if len(self.endpoints.urls) > 1 else "it"
            log.warning("etcd %s lost: %s; %s, trying %s with backoff up to %.0fs",
                        self.endpoints.current, reason, self._serving(), others, self.backoff[1])
        else:
            log.debug("etcd %s: %s; retrying in %.1fs", self.endpoints.current, reason, delay)  # at most: Backoff
        if not isinstance(exc, _ETCD_FAILURES):  # not how etcd fails: a bug, shown with its traceback
            log.error("following etcd failed unexpectedly; retrying", exc_info=exc)

    def _serving(self) -> str:
        """What queries are answered from while etcd is lost, for its log line."""
        if not self.feed.responder.ready:
            return "no records loaded yet: answering SERVFAIL in the zone until the first load"
        return f"serving the records of revision {self.feed.index.revision}"

    def _back(self) -> None:
        if self.lost_since is not None:
            log.info("etcd %s back after %.1fs", self.endpoints.current, time.monotonic() - self.lost_since)
            self.lost_since = None
            self.lost_why = ""

    async def _load(self, client: aetcd.Client) -> None:
        """Read every key under the prefix, page by page at one revision (:func:`read_pages`,
        which asks for the next page while this one is parsed), with the collector paused."""
        fresh = Index(self.feed.index.layout)
        revision = 0
        with collections_paused():
            async for kvs, read_at in read_pages(client, self.root):
                await asyncio.to_thread(_add_page, fresh, kvs)
                revision = read_at
        fresh.revision = revision
        self.feed.install(fresh)
        self.revision = revision
        log.info("etcd: loaded %d records at revision %d (%d invalid keys; values are read as asked for, "
                 "the rest between queries)", len(fresh), revision, len(fresh.invalid))

    async def _follow(self, client: EtcdClient) -> None:
        """The watch, and beside it the leader check; returns never, raises what ends either."""
        watch = asyncio.ensure_future(self._watch(client))
        check = asyncio.ensure_future(self._check_leader(client))
        try:
            done, _ = await asyncio.wait([watch, check], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (watch, check):
                task.cancel()
            await asyncio.gather(watch, check, return_exceptions=True)
        for task in done:
            task.result()
        raise ConnectionError("watch ended")

    async def _check_leader(self, client: EtcdClient) -> None:
        """Every ``leader_check`` seconds, a call that fails when the member has lost its leader."""
        while True:
            await asyncio.sleep(self.leader_check)
            await client.check_leader()

    async def _watch(self, client: aetcd.Client) -> None:
        assert self.revision is not None
        watch = await client.watch(
            self.root, range_end=prefix_range_end(self.root), start_revision=self.revision + 1
        )
        async for event in watch:
            key = event.kv.key.decode("utf-8", "replace")
            revision = event.kv.mod_revision
            if event.kind == aetcd.EventKind.PUT:
                self.feed.put(key, event.kv.value, revision)
            else:
                self.feed.delete(key, revision)
            self.revision = revision
        raise ConnectionError("watch ended")


async def read_pages(client: aetcd.Client, root: bytes) -> AsyncIterator[tuple[Any, int]]:
    """Every key under ``root``, read page by page (:data:`PAGE_KEYS` keys each) at one
    revision: yields ``(kvs, revision)``, the page's etcd ``KeyValue`` messages (key,
    value, ``mod_revision``) and the revision read at. Connects ``client`` first.

    The next page is asked for before a page is yielded, so that etcd reads and sends it
    while the caller parses this one: a load takes about the longer of the two, not their
    sum (docs/performance.md, "Cold load"). At most two pages are held at once.

    Raises :class:`EtcdCompacted` when that revision is compacted between two pages, and
    what the client raises when etcd cannot be reached (``_ETCD_FAILURES``).
    """
    await client.connect()
    start, end = root, prefix_range_end(root)
    response = await _range(client, start, end, 0)
    revision = response.header.revision
    following: asyncio.Future[Any] | None = None
    try:
        while True:
            kvs = response.kvs
            if response.more and kvs:
                following = asyncio.ensure_future(_range(client, kvs[-1].key + b"\0", end, revision))
            yield kvs, revision
            if following is None:
                break
            response, following = await following, None
    finally:
        if following is not None:  # the reader stopped, or failed, while the next page was asked for
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)


async def _range(client: aetcd.Client, start: bytes, end: bytes, revision: int) -> Any:
    """One page of a full load: at most :data:`PAGE_KEYS` keys of ``[start, end)`` at ``revision``
    (0: the latest, whose number the response's header gives); raises :class:`EtcdCompacted` when
    ``revision`` has been compacted since the first page."""
    request = rpc.RangeRequest(key=start, range_end=end, limit=PAGE_KEYS, revision=revision)
    try:
        return await client.kvstub.Range(request, timeout=client._timeout, metadata=client.metadata)
    except rpc.AioRpcError as exc:
        if "compacted" in (exc.details() or ""):
            raise EtcdCompacted(exc.details() or "compacted") from exc
        raise


def _add_page(index: Index, kvs: Iterable[Any]) -> None:
    index.put_page((kv.key.decode("utf-8", "replace"), kv.value) for kv in kvs)


def describe_failure(exc: BaseException) -> str:
    """etcd's failure in one line: an authentication or TLS failure says so (feddns.etcd.failures.describe)."""
    if isinstance(exc, rpc.AioRpcError):
        return f"{exc.code().name}: {describe(Exception(exc.details()))}"
    return describe(exc)


class EtcdCollector(Collector):
    """``feddns_etcd_leader`` of ``source`` (docs/operations.md): with ``feddns_records_revision``
    it says which records are served with no leader behind them."""

    def __init__(self, source: EtcdSource) -> None:
        self.source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "feddns_etcd_leader",
            "1 while the records follow an etcd member that has a leader; 0 while none is reached "
            "(no leader, or etcd unreachable) and the last records are served",
            value=1 if self.source.following else 0)
