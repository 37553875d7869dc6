"""Fixtures of the stub-zone tests: one PKI per session, one real `feddns stubzone` per module."""

import uuid
from collections.abc import Iterator

import pytest

from harness.etcd import EtcdServer
from harness.stubzone import Pki, StubzoneProcess, make_pki, skydns_args
from tests.support.fakekube import FakeKube


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """CA, server and client certificates made by `feddns certs` (see support.make_pki)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def skydns_prefix() -> str:
    """`--etcd-prefix` of the module's server: its SkyDNS keys live under it alone."""
    return f"/t{uuid.uuid4().hex[:12]}/skydns"


@pytest.fixture(scope="module")
def stubzone(pki: Pki, etcd: EtcdServer, skydns_prefix: str) -> Iterator[StubzoneProcess]:
    """The real `feddns stubzone --backend skydns` against the session etcd's v2 key space."""
    with StubzoneProcess(pki, *skydns_args(etcd.url, skydns_prefix)) as server:
        yield server


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    """The fake API server of tests/ (member cluster), for the faults a real one cannot show on demand
    (a 410 Gone, failures in a row, a held watch, a writer between a GET and a PUT, a write refused or
    cut after it applied): each test that uses it says which."""
    server = FakeKube("member")
    server.start()
    yield server
    server.close()
