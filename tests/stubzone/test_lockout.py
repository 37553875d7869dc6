"""No peer can lock out the stub-zone endpoint (docs/stubzone.md, "Lockout"). While a peer without a
certificate holds 512 idle TCP connections and 256 trickling TLS connections (tests/stubzone/flood.py:
each reopened half a second after the server closes it), from one address and then from 32
(127.0.0.2 to 127.0.0.33), an allowed client POSTs for 12 s, each POST on a new TLS connection as the
control plane makes them: every one succeeds, the slowest 1% within 1 s, and the endpoint's RSS stays
under :data:`RSS_LIMIT`. Before the pending pool, 256 idle sockets from one address took every slot.

The figures printed are those of docs/stubzone.md:
``.venv/bin/python -m pytest tests/stubzone/test_lockout.py -s -p no:cacheprovider``."""

import http.client
import math
import ssl
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.ports import wait_until
from harness.process import ChildProcess
from harness.stubzone import Endpoint

REPO = Path(__file__).resolve().parents[2]
MB = 1024 * 1024
RSS_LIMIT = 128 * MB
"""The memory limit of the skydns manifest (deploy/cluster-dns/skydns/k8s-dns.yaml), the smallest of the
stub-zone manifests; docs/stubzone.md states it."""
SECONDS = 12.0
"""How long the allowed client POSTs: longer than --tls-handshake-timeout (10 s), so trickling connections
are closed at their timeout and opened again meanwhile."""
SOURCES = {"one address": ["127.0.0.2"], "32 addresses": [f"127.0.0.{i}" for i in range(2, 34)]}


class PeakRSS:
    """The highest RSS of ``endpoint`` seen by a thread reading it every 50 ms, until :meth:`stop`."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint, self.peak = endpoint, endpoint.rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.endpoint.rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def post(server: Endpoint) -> int:
    """One POST of the allowed client on a new connection: its status, 0 when the connection failed."""
    try:
        return server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.1"]}).status
    except (OSError, ssl.SSLError, http.client.HTTPException):
        return 0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


@pytest.mark.parametrize("sources", list(SOURCES.values()), ids=list(SOURCES))
def test_an_allowed_client_gets_through_a_flood_of_anonymous_connections(pki, etcd, etcd_prefix, sources):
    with Endpoint(pki, etcd.url, etcd_prefix) as server:  # every limit at its default
        for _ in range(3):  # TLS, the backend and the handler paths warmed up before the baseline
            assert post(server) == 200
        base = server.rss()
        flood = ChildProcess([sys.executable, "-m", "tests.stubzone.flood", "--port", str(server.port),
                              "--idle", "512", "--trickling", "256", "--sources", *sources],
                             ready="^flooding$", name="flood", cwd=REPO)
        flood.start(timeout=60)
        peak = PeakRSS(server)
        try:
            wait_until(lambda: server.metric("feddns_stubzone_connections_refused_total") >= 768 - 256, timeout=30,
                       what="the pool full and closing connections")
            latencies: list[float] = []
            statuses: list[int] = []
            started = time.monotonic()
            while time.monotonic() - started < SECONDS:
                before = time.monotonic()
                statuses.append(post(server))
                latencies.append(time.monotonic() - before)
            closed = server.metric("feddns_stubzone_connections_refused_total")
            timed_out = server.metric("feddns_stubzone_tls_refused_total")
            held = flood.lines[-1]
        finally:
            peak_rss = peak.stop()
            flood.stop()
        p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
        print(f"\n{len(sources)} source address(es), 512 idle + 256 trickling connections held ({held}): "
              f"{statuses.count(200)} of {len(statuses)} POSTs 200 in {SECONDS:g} s, p50 {p50 * 1000:.0f} ms, "
              f"p99 {p99 * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms; {closed:.0f} connections closed "
              f"over a pool's bound, {timed_out:.0f} handshakes refused or timed out; RSS {base / MB:.1f} MB "
              f"before, peak {peak_rss / MB:.1f} MB")
        assert statuses == [200] * len(statuses)
        assert p99 < 1.0, f"p99 {p99:.2f} s"
        assert peak_rss < RSS_LIMIT, f"peak RSS {peak_rss / MB:.0f} MB"


HEAD_SOURCES = {"one address": ["127.0.0.3"], "32 addresses, one certificate": [f"127.0.0.{i}" for i in range(3, 35)]}
GOOD_POSTS = 40


def flood_of_heads(server: Endpoint, sources: list[str], *cert: str) -> ChildProcess:
    """tests/stubzone/flood.py holding 300 connections past their handshake from ``sources``, each trickling a
    request head; ``cert``: the certificate and key they show (none: they show none)."""
    shown = ["--cert", cert[0], "--key", cert[1]] if cert else []
    return ChildProcess([sys.executable, "-m", "tests.stubzone.flood", "--port", str(server.port), "--idle", "0",
                         "--trickling", "0", "--heads", "300", "--reopen-after", "1", "--ca", server.pki.ca,
                         *shown, "--sources", *sources], ready="^flooding$", name="flood", cwd=REPO)


@pytest.mark.parametrize("sources", list(HEAD_SOURCES.values()), ids=list(HEAD_SOURCES))
def test_an_allowed_client_holding_connections_past_the_handshake_leaves_room_for_the_others(
        pki, etcd, etcd_prefix, sources):
    """Another allowed client (``san_only``) holds 300 connections trickling a request head, from one address
    (its --max-connections-per-client share by address) or from 32 (its share by certificate); the allowed
    client (``client``, from 127.0.0.1) still gets its POSTs through, each on a new connection. Before the
    shares, the flood held every one of the 256 --max-connections."""
    with Endpoint(pki, etcd.url, etcd_prefix) as server:  # every limit at its default
        assert post(server) == 200
        flood = flood_of_heads(server, sources, *pki.cert("san_only"))
        flood.start(timeout=60)
        try:
            wait_until(lambda: server.metric("feddns_stubzone_connections_refused_total") >= 300 - 256, timeout=30,
                       what="the flood's connections over its share closed")
            statuses = [post(server) for _ in range(GOOD_POSTS)]
        finally:
            flood.stop()
        print(f"\n{statuses.count(200)} of {GOOD_POSTS} POSTs 200 while 300 heads trickled from {len(sources)} "
              f"address(es)")
        assert statuses.count(200) >= 0.95 * GOOD_POSTS, statuses
