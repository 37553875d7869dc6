"""Records from etcd: one range read at a revision, then a watch from the next.

The design document's Federated-DNS "retrieves all the matching records ...
from its etcd" on every lookup; we read once and watch instead (CoreDNS's
etcd plugin reads per query, which users report as slow). When the watch
breaks, it resumes from the last revision seen; when that revision has been
compacted, it lists again. While etcd is unreachable the index keeps the last
records and the source retries with exponential backoff, moving to the next
``--etcd`` endpoint each time.
"""

import asyncio
import logging

import aetcd
import aetcd.exceptions

from feddns.etcd import Endpoints, prefix_range_end
from feddns.keys import Layout
from feddns.store import Feed

log = logging.getLogger(__name__)


class EtcdSource:
    """Keeps ``feed`` in step with every key under ``layout.root`` in etcd.

    ``backoff`` is ``(first, most)`` in seconds between retries.
    """

    def __init__(self, endpoints: Endpoints, layout: Layout, feed: Feed,
                 backoff: tuple[float, float] = (0.1, 5.0)) -> None:
        self.endpoints = endpoints
        self.root = layout.root.encode()
        self.feed = feed
        self.backoff = backoff
        self.revision: int | None = None

    async def run(self) -> None:
        """Run until cancelled; never raises for etcd failures."""
        delay = self.backoff[0]
        while True:
            client = self.endpoints.client()
            try:
                if self.revision is None:
                    await self._load(client)
                delay = self.backoff[0]
                await self._watch(client)
            except aetcd.exceptions.RevisionCompactedError as exc:
                log.warning("etcd: revision %s is compacted (%s); listing again", self.revision, exc)
                self.revision = None
                self.feed.restarts += 1
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every etcd/gRPC failure: keep serving, retry
                log.warning("etcd %s: %s; keeping the last records, retrying in %.1fs",
                            self.endpoints.current, exc or type(exc).__name__, delay)
                self.feed.restarts += 1
                self.endpoints.failover()
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff[1])
            finally:
                await _close(client)

    async def _load(self, client: aetcd.Client) -> None:
        result = await client.get_prefix(self.root)
        revision = result.header.revision
        kvs = result.kvs
        await self.feed.replace_in_thread(((kv.key.decode("utf-8", "replace"), kv.value) for kv in kvs), revision)
        self.revision = revision
        log.info("etcd: loaded %d records at revision %d (%d invalid)",
                 len(self.feed.index), revision, len(self.feed.index.invalid))

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


async def _close(client: aetcd.Client) -> None:
    try:
        await asyncio.wait_for(client.close(), 2)
    except Exception:  # closing a broken channel may fail; nothing to keep
        pass
