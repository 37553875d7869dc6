"""Fixtures shared by every test package: real servers on loopback ports."""

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.etcd import EtcdServer
from tests.support.etcdpki import EtcdPki


@pytest.fixture(scope="session")
def etcd() -> Iterator[EtcdServer]:
    """A real etcd shared by the session; tests isolate themselves with ``etcd_prefix``."""
    server = EtcdServer()
    server.start()
    yield server
    server.destroy()


@pytest.fixture
def private_etcd() -> Iterator[EtcdServer]:
    """A real etcd of the test's own, for tests that stop, restart or compact it."""
    server = EtcdServer()
    server.start()
    yield server
    server.destroy()


@pytest.fixture
def tls_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A real etcd of the test's own with ``--client-cert-auth`` (tests/support/etcdpki.py)."""
    server = EtcdServer(pki=EtcdPki(tmp_path / "etcd-pki"))
    server.start()
    yield server
    server.destroy()


@pytest.fixture
def etcd_prefix() -> str:
    """A key prefix (``--etcd-prefix``) no other test uses."""
    return f"/t{uuid.uuid4().hex[:12]}"
