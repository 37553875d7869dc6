"""Fixtures shared by every test package: real servers on loopback ports, and the checks that fail a test
which leaves a thread running or asyncio tasks pending (ResourceWarning is an error too: pyproject.toml)."""

import asyncio
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from harness.etcd import EtcdServer
from harness.etcdpki import EtcdPki
from harness.kubecluster import KubeCluster


@pytest.fixture(scope="session")
def etcd() -> Iterator[EtcdServer]:
    """A real etcd shared by the session; tests isolate themselves with ``etcd_prefix``."""
    server = EtcdServer()
    server.start()
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def kube_etcd() -> Iterator[EtcdServer]:
    """The etcd of the session's kube-apiservers: theirs alone, since an API server writes all the time
    (leases, events) and tests of the session's ``etcd`` count its revisions."""
    server = EtcdServer(enable_v2=False)
    server.start()
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def kube_foo(kube_etcd: EtcdServer) -> Iterator[KubeCluster]:
    """Member cluster foo: a real kube-apiserver, started once for the session (harness/kubecluster.py).

    Tests share it: each works in namespaces and names of its own and deletes what it made."""
    cluster = KubeCluster("foo", kube_etcd.url).start()
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def kube_bar(kube_etcd: EtcdServer) -> Iterator[KubeCluster]:
    """Member cluster bar, as ``kube_foo``."""
    cluster = KubeCluster("bar", kube_etcd.url).start()
    yield cluster
    cluster.close()


@pytest.fixture
def private_etcd() -> Iterator[EtcdServer]:
    """A real etcd of the test's own, for tests that stop, restart or compact it."""
    server = EtcdServer()
    server.start()
    yield server
    server.destroy()


@pytest.fixture
def tls_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A real etcd of the test's own with ``--client-cert-auth`` (harness/etcdpki.py)."""
    server = EtcdServer(pki=EtcdPki(tmp_path / "etcd-pki"))
    server.start()
    yield server
    server.destroy()


@pytest.fixture
def etcd_prefix() -> str:
    """A key prefix (``--etcd-prefix``) no other test uses."""
    return f"/t{uuid.uuid4().hex[:12]}"


LEAK_GRACE = 5.0
"""Seconds a thread started by a test may take to end after the test's own fixtures are torn down."""
PROCESS_THREADS = ("(_poll_wrapper)",)
"""Threads a library starts once for the whole process, not per use: gRPC's asyncio poller
(grpc/_cython/_cygrpc/aio/grpc_aio.pyx.pxi), started by the first etcd client."""
SESSION_THREAD = " (session)"
"""In the name of a thread that belongs to a fixture wider than the test although the test
started it: the reader of a session's kube-apiserver that a test restarted (KubeCluster.restart)."""


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a thread running (as kopf's tests fail one that leaks a task):
    a reader, server or watch thread the test started must end with it. Threads of
    fixtures wider than the test (a session's etcd, a module's server) were there before."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + LEAK_GRACE
    while leaked := [t for t in threading.enumerate() if t not in before and t.is_alive()
                     and not t.name.endswith(PROCESS_THREADS) and SESSION_THREAD not in t.name]:
        if time.monotonic() > deadline:
            pytest.fail(f"threads left running: {', '.join(sorted(t.name for t in leaked))}")
        time.sleep(0.02)


TASK_GRACE = 1.0
"""Seconds the tasks a test's coroutine started may take to end after it returned."""
T = TypeVar("T")


def _pending_tasks(loop: asyncio.AbstractEventLoop) -> list[asyncio.Task[Any]]:
    """The tasks of ``loop`` still pending ``TASK_GRACE`` seconds from now (fewer seconds if none are)."""
    def others() -> set[asyncio.Task[Any]]:
        return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}

    async def settle() -> list[asyncio.Task[Any]]:
        deadline = loop.time() + TASK_GRACE
        while (left := others()) and (remaining := deadline - loop.time()) > 0:
            await asyncio.wait(left, timeout=remaining)
        return list(others())

    return loop.run_until_complete(settle())


@pytest.fixture(autouse=True)
def _no_leaked_tasks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail a test whose coroutine returned with asyncio tasks of its still pending, as kopf's
    ``_no_asyncio_pending_tasks`` does. The tests run coroutines with ``asyncio.run`` (no pytest-asyncio),
    which would cancel such tasks without a word; during the test it is one that reports them."""
    leaked: list[str] = []

    def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
        with asyncio.Runner(debug=debug) as runner:
            result = runner.run(main)
            leaked.extend(repr(task) for task in _pending_tasks(runner.get_loop()))
        return result

    monkeypatch.setattr(asyncio, "run", run)
    yield
    if leaked:
        pytest.fail("asyncio tasks left pending: " + "; ".join(leaked))
