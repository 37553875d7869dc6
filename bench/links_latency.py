"""How long `feddns links` takes to answer an AdmissionReview when no DNS gating is needed, against a floor.

Starts, on loopback:

- a fake API server (tests/support/fakekube.py) holding --services Services
  labelled as shards of the federation (the webhook lists and watches them);
- `feddns links` (a child process, as deployed) with a policy file of
  --policies policies over 20 namespaces, its --resolver a UDP socket that
  never answers, so a review that asked DNS would take 2 s and show at once;
- the floor: bench/floor_webhook.py, an aiohttp HTTPS server on the same TLS
  setup that parses the AdmissionReview and answers "allowed" with its uid
  and nothing else, the least any Python webhook on this stack does.

Then sends --reviews AdmissionReviews to each, over --connections keep-alive
HTTPS connections in parallel (the API server reuses its connections), each
from a client process of its own, alternating batches of 400 between the two
servers so that both see the same load from the rest of the machine, and
prints p50 / p99 / max of the time from sending a request to reading its
answer, for two pods: one with two links (required=false) and a matching
policy, patched; one without links, left alone. The ratio to the floor is
what to compare across machines.

Usage: python bench/links_latency.py [--reviews 3000] [--connections 4] [--services 1000] [--policies 50]
"""

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.objects import service  # noqa: E402
from harness.ports import wait_until  # noqa: E402
from tests.links.support import admission_review, make_pki  # noqa: E402  (the test suite's helpers)
from tests.support.fakekube import FakeKube  # noqa: E402

LABEL = {"federation.feddns.io/name": "myfederation"}
BATCH = 400
"""Reviews sent to one server before switching to the other."""


def policy_file(path: Path, count: int) -> Path:
    policies = [{"name": f"p{i}", "namespace": f"ns{i % 20}",
                 "selector": {"matchLabels": {"team": f"t{i}"}, "matchExpressions": [
                     {"key": "tier", "operator": "In", "values": ["web", "api"]}]},
                 "links": [{"prefix": f"SVC{i}", "service": f"svc{i}.ns{i % 20}.myfederation", "required": False}]}
                for i in range(count)]
    path.write_text(json.dumps({"policies": policies}))
    return path


def pod(links: bool) -> dict[str, Any]:
    """A pod of about 3 KB: two containers with some env, probes and resources, like a Deployment's."""
    container = {
        "name": "app", "image": "registry.example/app:1.4.2", "imagePullPolicy": "IfNotPresent",
        "command": ["/app", "--db=$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)"],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(10)]
        + [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
        "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
    }
    sidecar = dict(container, name="sidecar", command=["/proxy"])
    annotations = {"links.feddns.io/services": "DB=svc1.ns1.myfederation?required=false, "
                   "CACHE=svc2.ns2.myfederation?required=false&ports=redis:6379"} if links else {}
    labels = {"team": "t7", "tier": "web", "app": "shop"} if links else {"app": "shop"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "shop-7d9f-", "namespace": "ns7", "labels": labels,
                         "annotations": annotations},
            "spec": {"containers": [container, sidecar], "serviceAccountName": "default",
                     "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"}}


def start(args: list[str], pattern: str) -> tuple[subprocess.Popen[str], int, list[str]]:
    """A child process and the port its log line matching ``pattern`` names."""
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        lines.extend(proc.stderr)  # line by line, as the child writes them

    threading.Thread(target=read, daemon=True).start()
    regex = re.compile(pattern)
    try:
        line = wait_until(lambda: next((entry for entry in lines if regex.search(entry)), None), timeout=60,
                          what=pattern)
    except BaseException:
        proc.kill()  # never leave a child behind
        proc.wait()
        raise
    return proc, int(re.search(r":(\d+)\s*$", line.strip()).group(1)), lines  # type: ignore[union-attr]


def connection_latencies(port: int, ca: str, template: dict[str, Any], count: int) -> list[float]:
    """In a process of its own: latencies (seconds) of ``count`` reviews of ``template`` over one connection."""
    context = ssl.create_default_context(cafile=ca)
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    latencies = []
    for _ in range(count):
        body = json.dumps(admission_review(template, namespace="ns7", uid=str(uuid.uuid4()))).encode()
        started = time.perf_counter()
        connection.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        payload = json.loads(answer.read())
        latencies.append(time.perf_counter() - started)
        assert answer.status == 200 and payload["response"]["allowed"] is True, payload
    connection.close()
    return latencies


def measure(pool: ProcessPoolExecutor, port: int, ca: Path, template: dict[str, Any], reviews: int,
            connections: int) -> list[float]:
    """Latencies (seconds) of ``reviews`` reviews over ``connections`` connections, each its own client process
    (so the client's own GIL does not queue the answers)."""
    futures = [pool.submit(connection_latencies, port, str(ca), template, reviews // connections)
               for _ in range(connections)]
    return [latency for future in futures for latency in future.result()]


def server_side(log: list[str]) -> str:
    """The share of reviews the webhook itself answered within each histogram bucket, from its /metrics."""
    url = next(re.search(r"metrics on (http://\S+) ", line).group(1)  # type: ignore[union-attr]
               for line in log if "metrics on http" in line)
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    buckets = {float(m.group(1)): float(m.group(2)) for m in re.finditer(
        r'^feddns_links_review_seconds_bucket\{le="([0-9.e+-]+)"\} (\S+)$', text, re.MULTILINE)}
    total = float(re.search(r"^feddns_links_review_seconds_count (\S+)$", text, re.MULTILINE).group(1))  # type: ignore[union-attr]
    return ", ".join(f"{buckets[le] / total:.4f} within {le * 1e3:g} ms" for le in (0.001, 0.0025, 0.005, 0.01))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=3000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--policies", type=int, default=50)
    options = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-links-"))
    pki = make_pki(work / "pki")
    cert, key = pki.cert()
    fake = FakeKube("local")
    fake.start()
    for i in range(options.services):
        fake.apply(service(f"ns{i % 20}", f"svc{i}", labels=LABEL, ports=[("http", "TCP", 80), ("grpc", "TCP", 9090)]))
    kubeconfig = fake.write_kubeconfig(str(work / "kubeconfig"))
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    children = []
    try:
        links, links_port, links_log = start(
            [sys.executable, "-m", "feddns", "links", "--listen", "127.0.0.1:0", "--cert", str(cert), "--key",
             str(key), "--kubeconfig", kubeconfig, "--resolver", f"127.0.0.1:{silent.getsockname()[1]}",
             "--policies", str(policy_file(work / "policies.json", options.policies)),
             "--metrics", "127.0.0.1:0"],
            r"listening on https://127\.0\.0\.1:\d+")
        children.append(links)
        floor, floor_port, _ = start([sys.executable, str(REPO / "bench" / "floor_webhook.py"), str(cert), str(key)],
                                     r"floor webhook on https://127\.0\.0\.1:\d+")
        children.append(floor)
        wait_until(lambda: any("listed" in line for line in links_log), timeout=60, what="the Services listed")

        results: dict[tuple[str, str], list[float]] = {}
        with ProcessPoolExecutor(options.connections) as pool:
            for name, with_links in (("pod with 2 links + 1 policy", True), ("pod without links", False)):
                template = pod(with_links)
                measure(pool, links_port, pki.ca, template, 200, options.connections)  # warm-up
                measure(pool, floor_port, pki.ca, template, 200, options.connections)
                # Alternate batches, so that both servers see the same load from the rest of the machine.
                for _ in range(options.reviews // BATCH):
                    for target, port in (("feddns links", links_port), ("floor webhook", floor_port)):
                        results.setdefault((name, target), []).extend(
                            measure(pool, port, pki.ca, template, BATCH, options.connections))
        print(f"{options.reviews} AdmissionReviews each, {options.connections} keep-alive HTTPS connections, "
              f"{options.services} labelled Services, {options.policies} policies; latency in ms")
        print(f"{'pod':32} {'server':14} {'p50':>7} {'p99':>7} {'max':>7} {'p50/floor':>10} {'p99/floor':>10}")
        for (name, target), values in results.items():
            floor = results[(name, "floor webhook")]
            p50, p99 = statistics.median(values), percentile(values, 0.99)
            print(f"{name:32} {target:14} {p50 * 1e3:7.2f} {p99 * 1e3:7.2f} {max(values) * 1e3:7.2f} "
                  f"{p50 / statistics.median(floor):10.2f} {p99 / percentile(floor, 0.99):10.2f}")
        print("inside feddns links (its feddns_links_review_seconds, all reviews above):",
              server_side(links_log))
        assert not any("Traceback" in line for line in links_log), "".join(links_log)
    finally:
        for child in children:
            child.terminate()
            child.wait(10)
        fake.close()
        silent.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.pop("KUBERNETES_SERVICE_HOST", None)
    main()
