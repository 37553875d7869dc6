"""POST latency of `feddns stubzone`, per backend, next to the write an operator would do by hand.

For each backend this starts the real store (a fake API server for coredns and
kube-dns, etcd 3.4 for skydns v2 and v3, a real unbound) and the real
`feddns stubzone` process, then times, --requests times each, in turns:

- endpoint: one POST /federations/bench over HTTPS with a client certificate
  (a new TLS connection each time, as the control plane makes), the list
  alternating so every POST changes the store;
- by hand: the same change written straight to the store, the way an operator
  or a script would do it without the endpoint (no TLS, no checks):
  coredns/kube-dns: GET + PUT of the ConfigMap with the kubernetes client;
  skydns v2: one PUT per key on /v2/keys; skydns v3: one put per key through
  etcd's JSON gateway; unbound: write F.conf, then `unbound-control
  reload_keep_cache` and `list_forwards` (unbound answers "ok" before it
  reloads; the next command waits for the reload, and shows it took).

Both run in the same process and run, against the same store, so the ratio
holds on a noisy machine. Prints median and p95 in milliseconds, the ratio of
the medians, an unchanged POST (idempotent: read, compare, nothing written),
and the HTTPS round trip alone (a new TLS connection and a 404 that touches no
store), which is most of the difference for the quick stores.

Usage: python bench/stubzone_post.py [--requests 40] [--backends coredns,kube-dns,skydns-v2,skydns-v3,unbound]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import kubernetes.client  # noqa: E402
import kubernetes.config  # noqa: E402

from harness.stubzone import StubzoneProcess, make_pki  # noqa: E402
from harness.unbound import CONTROL  # noqa: E402
from stubzone.backends.unbound import render as render_unbound  # noqa: E402
from stubzone.model import Nameserver  # noqa: E402
from tests.stubzone.stores import ConfigMapStore, SkyDNSStore, UnboundStore, make_store  # noqa: E402

LISTS = (["192.0.2.1", "192.0.2.2"], ["198.51.100.1", "198.51.100.2"])
"""What the endpoint POSTs, in turns."""
BY_HAND = (["203.0.113.1", "203.0.113.2"], ["203.0.113.3", "203.0.113.4"])
"""What the direct write puts, in turns: never what the endpoint's next POST holds, so every POST changes the store."""


def by_hand(store: object) -> Callable[[list[str]], None]:
    """The direct write of ``store``'s backend (see the module doc)."""
    if isinstance(store, ConfigMapStore):
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=store.kubeconfig, client_configuration=configuration)
        api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))

        def configmap(nameservers: list[str]) -> None:
            obj = api.read_namespaced_config_map(store.configmap, "kube-system")
            value = json.dumps({"bench.svc.federation": nameservers}) if store.name == "kube-dns" else \
                f"bench.svc.federation.:53 {{\n    forward . {' '.join(nameservers)}\n}}\n"
            obj.data = {**(obj.data or {}), ("stubDomains" if store.name == "kube-dns" else "bench.server"): value}
            api.replace_namespaced_config_map(store.configmap, "kube-system", obj)
        return configmap
    if isinstance(store, SkyDNSStore):
        def skydns(nameservers: list[str]) -> None:
            for i, host in enumerate(nameservers, 1):
                key = f"{store.directory('bench')}ns{i}"
                value = json.dumps({"host": host, "port": 53})
                store.etcd.v2_put(key, value) if store.api == "v2" else store.etcd.put(key, value)
        return skydns
    assert isinstance(store, UnboundStore)

    def unbound(nameservers: list[str]) -> None:
        text = render_unbound("bench", "bench.svc.federation.", "foo", [Nameserver.parse(ns) for ns in nameservers])
        (store.feddns_dir / "bench.conf").write_text(text)
        for command in ("reload_keep_cache", "list_forwards"):  # "ok" comes before the reload: wait for it
            subprocess.run([CONTROL, "-c", str(store.resolver.conf), command], check=True, capture_output=True)
    return unbound


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered) * 1000:6.1f} ms  p95 {p95 * 1000:6.1f} ms"


def measure(name: str, pki: object, directory: Path, requests: int) -> None:
    store = make_store(name, directory)
    try:
        direct = by_hand(store)
        with StubzoneProcess(pki, *store.args()) as server:  # type: ignore[arg-type]
            endpoint_times, direct_times = [], []
            for i in range(requests):
                nameservers = LISTS[i % 2]
                start = time.perf_counter()
                answer = server.request("POST", "/federations/bench", {"nameservers": nameservers})
                endpoint_times.append(time.perf_counter() - start)
                assert answer.status == 200, answer
                start = time.perf_counter()
                direct(BY_HAND[i % 2])
                direct_times.append(time.perf_counter() - start)
            server.request("POST", "/federations/bench", {"nameservers": LISTS[0]})
            unchanged = []
            for _ in range(requests):  # the same list again: read, compare, nothing written
                start = time.perf_counter()
                assert server.request("POST", "/federations/bench", {"nameservers": LISTS[0]}).status == 200
                unchanged.append(time.perf_counter() - start)
            https = []
            for _ in range(requests):  # TLS handshake, client check, 404: no store involved
                start = time.perf_counter()
                assert server.request("GET", "/no-such-route").status == 404
                https.append(time.perf_counter() - start)
        ratio = statistics.median(endpoint_times) / statistics.median(direct_times)
        print(f"{name:10} endpoint POST {summary(endpoint_times)} | by hand {summary(direct_times)} | "
              f"ratio {ratio:4.1f} | unchanged POST {statistics.median(unchanged) * 1000:5.1f} ms | "
              f"HTTPS alone {statistics.median(https) * 1000:4.1f} ms")
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--backends", default="coredns,kube-dns,skydns-v2,skydns-v3,unbound")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        pki = make_pki(Path(directory) / "pki")
        for name in args.backends.split(","):
            measure(name, pki, Path(directory), args.requests)


if __name__ == "__main__":
    main()
