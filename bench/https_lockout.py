"""What a good client sees of `feddns stubzone` and `feddns links` while one peer holds 300 connections past
the TLS handshake, each trickling a request head (docs/stubzone.md, "Connections and memory").

Starts, on loopback, every limit at its default:

- a real etcd and `feddns stubzone --backend skydns` (PKI made by `feddns certs`); the peer
  (tests/stubzone/flood.py --heads 300, each connection reopened a second after it is closed)
  shows the allowed certificate `san_only`, from one address (127.0.0.3) and then from 32
  (127.0.0.3 to 127.0.0.34: the share by certificate), and the good client (certificate
  `client`, from 127.0.0.1) POSTs, each on a new TLS connection, as the control plane does;
- a fake API server (tests/support/fakekube.py) and `feddns links`; the peer shows no
  certificate, from 127.0.0.3, and the good client sends AdmissionReviews, each on a new
  connection.

For --seconds each, prints how many of the good client's requests succeeded, and the p50, p99
and max of their time. The tests (tests/stubzone/test_lockout.py, tests/links/test_connections.py)
assert the success rate only.

Usage: python bench/https_lockout.py [--seconds 12]
"""

import argparse
import http.client
import json
import math
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.etcd import EtcdServer  # noqa: E402
from harness.ports import free_port, wait_until  # noqa: E402
from harness.process import ChildProcess  # noqa: E402
from harness.scrape import unlabelled_sample  # noqa: E402
from harness.stubzone import Endpoint  # noqa: E402
from harness.stubzone import make_pki as stubzone_pki  # noqa: E402
from tests.links.support import LinksProcess, admission_review, pod  # noqa: E402  (the test suite's helpers)
from tests.links.support import make_pki as links_pki  # noqa: E402
from tests.support.fakekube import FakeKube  # noqa: E402

HEADS = 300


def flood(port: int, ca: str, sources: list[str], path: str, cert: tuple[str, str] | None) -> ChildProcess:
    """tests/stubzone/flood.py holding :data:`HEADS` trickled heads to 127.0.0.1:``port``, started."""
    shown = ["--cert", cert[0], "--key", cert[1]] if cert else []
    child = ChildProcess([sys.executable, "-m", "tests.stubzone.flood", "--port", str(port), "--idle", "0",
                          "--trickling", "0", "--heads", str(HEADS), "--reopen-after", "1", "--path", path,
                          "--ca", ca, *shown, "--sources", *sources], ready="^flooding$", name="flood", cwd=REPO)
    child.start(timeout=60)
    return child


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def succeeded(request: Callable[[], int]) -> bool:
    """Whether ``request`` (one request of the good client, its status) answered 200."""
    try:
        return request() == 200
    except (OSError, ssl.SSLError, http.client.HTTPException):
        return False


def during_flood(label: str, peer: ChildProcess, refused: Callable[[], float], seconds: float,
                 request: Callable[[], int]) -> None:
    """Once the server has closed the ``peer``'s connections over its share (``refused``: its counter), send
    ``request`` for ``seconds``; print how many succeeded and their p50, p99 and max. Stops ``peer``."""
    try:
        wait_until(lambda: refused() >= HEADS - 256, timeout=30, what="the peer's connections over its share closed")
        latencies: list[float] = []
        count = 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            before = time.monotonic()
            count += succeeded(request)
            latencies.append(time.monotonic() - before)
    finally:
        peer.stop()
    print(f"{label}: {count} of {len(latencies)} succeeded ({100 * count / len(latencies):.1f} %), "
          f"p50 {percentile(latencies, 0.5) * 1000:.0f} ms, p99 {percentile(latencies, 0.99) * 1000:.0f} ms, "
          f"max {max(latencies) * 1000:.0f} ms", flush=True)


def stubzone(root: Path, seconds: float) -> None:
    pki = stubzone_pki(root / "stubzone-pki")
    etcd = EtcdServer()
    etcd.start()
    try:
        with Endpoint(pki, etcd.url, "/bench/skydns") as server:
            for sources, what in ((["127.0.0.3"], "one address"),
                                  ([f"127.0.0.{i}" for i in range(3, 35)], "32 addresses, one certificate")):
                peer = flood(server.port, pki.ca, sources, "/federations/fed", pki.cert("san_only"))
                during_flood(f"stubzone POSTs, {HEADS} heads from {what}", peer,
                             lambda: server.metric("feddns_stubzone_connections_refused_total"), seconds,
                             lambda: server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.1"]}).status)
    finally:
        etcd.destroy()


def links(root: Path, seconds: float) -> None:
    pki = links_pki(root / "links-pki")
    kube = FakeKube("foo")
    kube.start()
    try:
        metrics = free_port()
        webhook = LinksProcess(pki, "--metrics", f"127.0.0.1:{metrics}", resolver="127.0.0.1:53",
                               kubeconfig=kube.write_kubeconfig(str(root / "foo.kubeconfig"))).start()
        try:
            body = json.dumps(admission_review(pod())).encode()
            peer = flood(webhook.port, str(pki.ca), ["127.0.0.3"], "/mutate", None)
            during_flood(f"links reviews, {HEADS} heads from one address", peer,
                         lambda: unlabelled_sample(metrics, "feddns_links_connections_refused_total"), seconds,
                         lambda: webhook.post(body, timeout=10).status)
        finally:
            webhook.stop()
    finally:
        kube.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=12.0, help="how long the good client sends, each case")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        stubzone(Path(directory), options.seconds)
        links(Path(directory), options.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
