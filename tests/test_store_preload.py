"""The read before the workers' fork (feddns.store.preload) when etcd fails in the middle of it.

A member that fails after its first page cannot be made to on demand with a real etcd, so
these tests give the reading child's loop pages from a stand-in for
``feddns.store.etcdfeed.read_pages`` and the template's side frames written by hand; the
whole path through a real etcd is tests/dns/test_workers.py."""

import asyncio
import io
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

import feddns.store.etcdfeed
from feddns.dns.index import Index
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.keys import Layout
from feddns.store import preload

RECORD = b'{"clusterIP": "10.0.0.1", "externalIP": "192.0.2.1"}'


def page(revision: int, *keys: str) -> io.BytesIO:
    """One frame as the reading child writes it."""
    out = io.BytesIO()
    preload._write_page(out, [SimpleNamespace(key=key.encode(), value=RECORD) for key in keys], revision)
    return out


def test_pages_of_two_revisions_are_refused():
    """A read resumed on another member could give pages of another revision: the template
    refuses them instead of merging two reads (a record deleted between them would live on)."""
    pipe = io.BytesIO(page(10, "/fed/ns/gone/a").getvalue() + page(20, "/fed/ns/kept/a").getvalue())
    with pytest.raises(preload.PreloadFailed, match="revisions 10 and 20"):
        preload._store_frames(pipe, Index(Layout()))


def test_pages_of_one_revision_are_stored():
    pipe = io.BytesIO(page(10, "/fed/ns/one/a", "/fed/ns/one/b").getvalue() + page(10, "/fed/ns/two/a").getvalue())
    index = Index(Layout())
    assert preload._store_frames(pipe, index) == 10
    index.parse_all()
    assert len(index) == 3


def test_a_member_failing_after_its_first_page_fails_the_read(monkeypatch: pytest.MonkeyPatch):
    """The child moves to the next endpoint only before any page is written."""
    tried: list[str] = []

    async def pages(client: Any, root: bytes) -> AsyncIterator[tuple[list[Any], int]]:
        tried.append(client.url)
        yield [SimpleNamespace(key=b"/fed/ns/gone/a", value=RECORD)], 10
        raise ConnectionError("member went away")

    monkeypatch.setattr(feddns.store.etcdfeed, "read_pages", pages)
    endpoints = EtcdEndpoints(["http://127.0.0.1:1", "http://127.0.0.1:2"])
    monkeypatch.setattr(endpoints, "client", lambda: SimpleNamespace(url=endpoints.current))
    monkeypatch.setattr("feddns.etcd.client.close_quietly", lambda client: asyncio.sleep(0))
    out = io.BytesIO()
    with pytest.raises(ConnectionError):
        asyncio.run(preload._read_any(endpoints, b"/", out))
    assert tried == ["http://127.0.0.1:1"]


def test_a_member_failing_before_its_first_page_moves_to_the_next(monkeypatch: pytest.MonkeyPatch):
    async def pages(client: Any, root: bytes) -> AsyncIterator[tuple[list[Any], int]]:
        if client.url.endswith(":1"):
            raise ConnectionError("refused")
        yield [SimpleNamespace(key=b"/fed/ns/kept/a", value=RECORD)], 20

    monkeypatch.setattr(feddns.store.etcdfeed, "read_pages", pages)
    endpoints = EtcdEndpoints(["http://127.0.0.1:1", "http://127.0.0.1:2"])
    monkeypatch.setattr(endpoints, "client", lambda: SimpleNamespace(url=endpoints.current))
    monkeypatch.setattr("feddns.etcd.client.close_quietly", lambda client: asyncio.sleep(0))
    out = io.BytesIO()
    asyncio.run(preload._read_any(endpoints, b"/", out))
    out.seek(0)
    assert preload._store_frames(out, Index(Layout())) == 20
