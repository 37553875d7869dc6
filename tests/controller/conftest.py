"""Fixtures of the controller tests: fake member clusters foo and bar."""

from collections.abc import Iterator

import pytest

from tests.controller.harness import FIXTURES
from tests.support.fakekube import FakeKube


def _cluster(name: str) -> Iterator[FakeKube]:
    fake = FakeKube(name, bookmark_interval=0.3)
    fake.start()
    fake.load(str(FIXTURES / f"{name}.yaml"))
    yield fake
    fake.close()


@pytest.fixture
def foo() -> Iterator[FakeKube]:
    """Fake cluster foo, loaded with fixtures/foo.yaml."""
    yield from _cluster("foo")


@pytest.fixture
def bar() -> Iterator[FakeKube]:
    """Fake cluster bar, loaded with fixtures/bar.yaml."""
    yield from _cluster("bar")


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    """An empty fake cluster "t" with quick bookmarks."""
    server = FakeKube("t", bookmark_interval=0.2)
    server.start()
    yield server
    server.close()
