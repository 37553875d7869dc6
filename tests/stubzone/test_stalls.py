"""The store hangs during requests (docs/reference.md section 5, "503"): every backend answers 503 within
``--backend-timeout`` however many requests queue, and a 503 that says ``"mayHaveApplied": false`` is never
followed by the change appearing in the store.

The TCP stores (the real kube-apiserver of coredns and kube-dns, over TLS; etcd v2 and v3) are reached through a
:class:`StallProxy`, which can make the store stall at an exact byte of a request, as SIGSTOP would at that
instant; unbound is stopped with SIGSTOP, at the start of the n-th run of ``unbound-control``.
"""

import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.ports import wait_until
from harness.stubzone import Answer, StubzoneProcess
from tests.stubzone.stores import ConfigMapStore, SkyDNSStore, Store, UnboundStore, make_store
from tests.support.stallproxy import StallProxy

TIMEOUT = 2.0
"""--backend-timeout of these tests, seconds."""
SLACK = 1.5
"""Seconds a 503 may come after the timeout on a loaded machine (TLS handshake, thread hand-offs)."""


@dataclass
class Stallable:
    """A store, the endpoint flags that reach it, and how to make it hang and resume."""

    store: Store
    args: list[str]
    freeze: Callable[[], None]
    thaw: Callable[[], None]
    proxy: StallProxy | None = None


def _through_proxy(store: Store, tmp_path: Path) -> tuple[list[str], StallProxy]:
    """The store's flags with its address replaced by a proxy's."""
    args = store.args()
    if isinstance(store, SkyDNSStore):
        proxy = StallProxy(("127.0.0.1", store.etcd.client_port))
        args[args.index("--etcd") + 1] = proxy.url
        return args, proxy
    assert isinstance(store, ConfigMapStore)
    proxy = StallProxy(("127.0.0.1", store.kube.port))  # TLS passes through: the serving certificate names 127.0.0.1
    kubeconfig = store.kube.write_kubeconfig(tmp_path / "proxied.kubeconfig")
    Path(kubeconfig).write_text(Path(kubeconfig).read_text().replace(store.kube.url, f"https://127.0.0.1:{proxy.port}"))
    args[args.index("--kubeconfig") + 1] = kubeconfig
    return args, proxy


def stallable(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> Stallable:
    store = make_store(name, tmp_path, request)
    if isinstance(store, UnboundStore):
        proc = store.resolver.proc
        assert proc is not None
        return Stallable(store, store.args(), lambda: proc.send_signal(signal.SIGSTOP),
                         lambda: proc.send_signal(signal.SIGCONT))
    args, proxy = _through_proxy(store, tmp_path)
    return Stallable(store, args, lambda: proxy.freeze_after(0), proxy.thaw, proxy)


@pytest.fixture(params=["coredns", "kube-dns", "skydns-v2", "skydns-v3", "unbound"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stallable]:
    made = stallable(request.param, tmp_path, request)
    yield made
    made.thaw()
    if made.proxy is not None:
        made.proxy.close()
    made.store.close()


def post(server: StubzoneProcess, nameservers: list[str]) -> tuple[Answer, float]:
    start = time.monotonic()
    answer = server.request("POST", "/federations/fed", {"nameservers": nameservers})
    return answer, time.monotonic() - start


def test_eight_queued_posts_all_answer_within_the_timeout_while_the_store_hangs(pki, target: Stallable):
    with StubzoneProcess(pki, *target.args, "--backend-timeout", str(TIMEOUT)) as server:
        first = ["192.0.2.1"]
        assert post(server, first)[0].status == 200
        target.freeze()
        results: list[tuple[list[str], Answer, float]] = []
        start = threading.Barrier(8)

        def one(i: int) -> None:
            value = [f"198.51.100.{i + 1}"]
            start.wait()
            answer, elapsed = post(server, value)
            results.append((value, answer, elapsed))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        finally:
            target.thaw()
        assert len(results) == 8
        assert [answer.status for _, answer, _ in results] == [503] * 8, [a for _, a, _ in results]
        slowest = max(elapsed for _, _, elapsed in results)
        assert slowest < TIMEOUT + SLACK, f"the last of 8 queued POSTs waited {slowest:.1f} s"
        maybe = [value for value, answer, _ in results if answer.body["mayHaveApplied"]]
        wait_until(lambda: server.request("GET", "/healthz").status == 200, timeout=15, what="healthz 200")
        if target.proxy is not None:
            wait_until(lambda: target.proxy.settled, timeout=15, what="held requests answered")
        assert target.store.stored("fed") in [first, *maybe]


def _posts_bytes(server: StubzoneProcess, proxy: StallProxy, nameservers: list[str]) -> int:
    before = proxy.sent
    answer, _ = post(server, nameservers)
    assert answer.status == 200, answer
    return proxy.sent - before


@pytest.mark.parametrize("name", ["coredns", "skydns-v2", "skydns-v3"])
def test_a_stall_at_any_byte_of_a_post_never_applies_what_a_503_said_it_did_not(pki, tmp_path, request, name):
    """A POST whose store stalls after k bytes, for k across the whole request: 200 means stored; 503
    with mayHaveApplied false means the store still holds the old list once the stall ends."""
    target = stallable(name, tmp_path, request)
    proxy = target.proxy
    assert proxy is not None
    outcomes = []
    try:
        with StubzoneProcess(pki, *target.args, "--backend-timeout", "1") as server:
            total = _posts_bytes(server, proxy, ["192.0.2.1", "192.0.2.2"])
            _posts_bytes(server, proxy, ["192.0.2.3"])
            for step in range(9):
                offset = total * step // 8 - (1 if step == 8 else 0)
                new = [f"203.0.113.{step + 1}", f"203.0.113.{step + 101}"][: 1 + step % 2]  # shrink, grow
                before = target.store.stored("fed")
                proxy.freeze_after(offset)
                answer, _ = post(server, new)
                proxy.thaw()
                wait_until(lambda: proxy.settled, timeout=15, what="held requests answered")
                after = target.store.stored("fed")
                outcomes.append((offset, answer.status, (answer.body or {}).get("mayHaveApplied"), before, after))
                if answer.status == 200:
                    assert after == new, outcomes[-1]
                else:
                    assert answer.status == 503, answer
                    if not answer.body["mayHaveApplied"]:
                        assert after == before, outcomes[-1]
                    else:  # part of the change may be in: only addresses of the two lists, never none
                        assert after and set(after) <= set(before) | set(new), outcomes[-1]
                wait_until(lambda: server.request("GET", "/healthz").status == 200, timeout=15, what="healthz")
        print(f"{name}: (stalled after byte, status, mayHaveApplied) of {total}:",
              [(offset, status, applied) for offset, status, applied, *_ in outcomes])
        assert any(applied for _, _, applied, *_ in outcomes), outcomes  # some stall came after a write was sent
    finally:
        proxy.close()
        target.store.close()


def _unbound_control_that_stops_unbound(tmp_path: Path, pid: int, at: int) -> str:
    """An ``--unbound-control`` that stops unbound (SIGSTOP) just before its ``at``-th run."""
    script = tmp_path / "unbound-control-stall"
    counter = tmp_path / "runs"
    counter.write_text("-1000")  # runs are counted from when the test writes 0
    script.write_text(f"""#!/bin/sh
n=$(($(cat {counter}) + 1)); echo $n > {counter}
[ "$n" = "{at}" ] && kill -STOP {pid}
exec unbound-control "$@"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.mark.parametrize("at", [1, 2, 3, 4])
def test_unbound_stopped_at_each_step_of_a_post(pki, tmp_path, at):
    """list_forwards, reload_keep_cache, flush_zone, the list_forwards that checks: unbound stops before each."""
    store = UnboundStore()
    proc = store.resolver.proc
    assert proc is not None
    try:
        control = _unbound_control_that_stops_unbound(tmp_path, proc.pid, at)
        with StubzoneProcess(pki, *store.args(), "--unbound-control", control, "--backend-timeout", "1") as server:
            assert post(server, ["192.0.2.1"])[0].status == 200
            (tmp_path / "runs").write_text("0")  # the runs of the next POST are counted from here
            answer, elapsed = post(server, ["192.0.2.9"])
            os.kill(proc.pid, signal.SIGCONT)
            wait_until(lambda: server.request("GET", "/healthz").status == 200, timeout=15, what="healthz")
            after = store.stored("fed")
        if answer.status == 200:
            assert after == ["192.0.2.9"]
        else:
            assert answer.status == 503, answer
            assert elapsed < 1 + SLACK
            if not answer.body["mayHaveApplied"]:
                assert after == ["192.0.2.1"], answer
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        store.close()
