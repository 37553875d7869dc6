"""Fixtures of the stub-zone tests: one PKI per session, one real `feddns stubzone` per module."""

import uuid
from collections.abc import Iterator

import pytest

from tests.stubzone.support import Pki, StubzoneProcess, make_pki
from tests.support.etcd import EtcdServer


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
    """The real `feddns stubzone` command against the session etcd."""
    server = StubzoneProcess(pki, etcd.url, skydns_prefix)
    server.start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        try:
            assert server.stop() == 0, server.lines[-20:]
        finally:
            if server.proc.poll() is None:
                server.proc.kill()
