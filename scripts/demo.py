"""The whole chain of tests/chain on one machine, for a person to try (``make demo``).

``demo.py [--once]`` starts a private etcd, two member clusters foo and bar (each a real
kube-apiserver and a real CoreDNS as its cluster DNS, programmed by its own ``feddns
stubzone --backend coredns``), ``feddns controller``, ``feddns serve`` and one unbound per
cluster (a second cluster DNS), prints every endpoint and the ``dig`` lines that show each
cluster getting its own shard first, then keeps everything running until Ctrl-C
(``--once``: stop after printing). The endpoints are also written to a state file, removed
on exit.

``demo.py fail foo``, in another shell while the demo runs, takes foo's shard of
``myns/myservice`` to 0 ready endpoints (through foo's API server with kubectl, as a rollout
gone wrong would), and prints the answers before and after: they move to bar.
``demo.py recover foo`` makes its endpoints ready again.
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import peers
from harness.chain import CLUSTERS, QNAME, Chain, myservice_slice
from harness.etcd import EtcdServer

STATE = Path(os.environ.get("FEDDNS_DEMO_STATE") or Path(tempfile.gettempdir()) / f"feddns-demo-{os.getuid()}.json")
"""Where a running demo writes its endpoints, for ``demo.py fail``."""


def dig_lines(state: dict[str, Any]) -> list[tuple[str, str]]:
    """(what it shows, dig command) pairs for each cluster's CoreDNS and unbound, and serve."""
    lines = []
    for name, cluster in state["clusters"].items():
        lines.append((f"a pod in {name} asks its cluster DNS (CoreDNS)",
                      f"dig @127.0.0.1 -p {cluster['coredns']} {QNAME} +short"))
        lines.append((f"... or {name}'s second cluster DNS (unbound)",
                      f"dig @127.0.0.1 -p {cluster['unbound']} {QNAME} +short"))
    serve = state["serve"]
    lines.append(("an external client asks Federated-DNS directly", f"dig @127.0.0.1 -p {serve} {QNAME} +short"))
    return lines


def run_digs(lines: list[tuple[str, str]]) -> None:
    for what, line in lines:
        print(f"\n# {what}\n{line}")
        if shutil.which("dig"):
            print(subprocess.run(line.split(), capture_output=True, text=True, check=False).stdout.rstrip())


def endpoints(chain: Chain) -> dict[str, Any]:
    """Every endpoint of the running chain (what the state file holds)."""
    return {
        "etcd": chain.etcd.url,
        "clusters": {name: {"api": kube.url, "kubeconfig": kube.kubeconfig, "coredns": chain.coredns[name].port,
                            "stubzone": chain.stubzones[name].port, "unbound": chain.resolvers[name].port}
                     for name, kube in chain.kubes.items()},
        "kubectl": peers.binary("kubectl"),
        "serve": chain.serve.port,
        "controllerLog": str(chain.controller.log_path),
    }


def print_endpoints(state: dict[str, Any]) -> None:
    rows = [("etcd (Federated-DNS's records)", f"{state['etcd']}   "
             f"(etcdctl --endpoints {state['etcd']} get --prefix /myfederation/)")]
    for name, cluster in state["clusters"].items():
        shard = CLUSTERS[name]
        rows.append((f"cluster {name}'s kube-apiserver", f"{cluster['api']}   (zone {shard['zone']}, myns/myservice "
                     f"clusterIP {shard['clusterIP']}, externalIP {shard['externalIP']})"))
        rows.append(("  kubectl", f"{state['kubectl']} --kubeconfig {cluster['kubeconfig']} get svc -A"))
        rows.append((f"cluster {name}'s DNS (CoreDNS)", f"udp+tcp 127.0.0.1:{cluster['coredns']}"))
        rows.append((f"cluster {name}'s feddns stubzone", f"https://127.0.0.1:{cluster['stubzone']}"))
        rows.append((f"cluster {name}'s second DNS (unbound)", f"udp+tcp 127.0.0.1:{cluster['unbound']}"))
    rows.append(("feddns serve (Federated-DNS)", f"udp+tcp 127.0.0.1:{state['serve']}"))
    rows.append(("feddns controller's log", state["controllerLog"]))
    width = max(len(what) for what, _ in rows)
    print("endpoints (all on loopback):")
    for what, where in rows:
        print(f"  {what:<{width}}  {where}")


def demo(args: argparse.Namespace) -> int:
    etcd = EtcdServer()
    chain = Chain(etcd, ttl=args.ttl)
    try:
        print("starting etcd, clusters foo and bar (kube-apiserver, CoreDNS, feddns stubzone, unbound each), "
              "feddns controller, feddns serve ...", flush=True)
        etcd.start()
        chain.start()
        state = endpoints(chain)
        STATE.write_text(json.dumps(state))
        print_endpoints(state)
        run_digs(dig_lines(state))
        if not args.once:
            print("\nTry the lines above in another shell; `bash scripts/demo.sh fail foo` takes foo's shard to "
                  "0 ready and shows the answers move to bar (`recover foo` undoes it).\nStop with Ctrl-C.",
                  flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    finally:
        print("stopping the demo and removing its files ...", flush=True)
        STATE.unlink(missing_ok=True)
        chain.stop()
        etcd.destroy()
    return 0


def set_ready(state: dict[str, Any], cluster: str, ready: bool) -> None:
    """Mark every endpoint of myns/myservice's EndpointSlice in ``cluster`` (not) ready, with kubectl."""
    slice_ = myservice_slice(ready=2) if ready else myservice_slice(ready=0, not_ready=2)
    command = [state["kubectl"], "--kubeconfig", state["clusters"][cluster]["kubeconfig"], "apply",
               "--server-side", "--force-conflicts", "--field-manager", "feddns-tests", "-f", "-"]
    print("$ " + " ".join([*command[:1], "...", *command[3:]]) + "   # myns/myservice's EndpointSlice", flush=True)
    subprocess.run(command, input=json.dumps(slice_), text=True, check=True)


def change(args: argparse.Namespace) -> int:
    """``fail CLUSTER`` / ``recover CLUSTER`` against the running demo."""
    try:
        state = json.loads(STATE.read_text())
    except FileNotFoundError:
        print(f"no demo is running (no {STATE}); start one with `make demo`", file=sys.stderr)
        return 2
    if args.cluster not in state["clusters"]:
        print(f"no cluster {args.cluster!r} in the demo (clusters: {', '.join(state['clusters'])})", file=sys.stderr)
        return 2
    lines = dig_lines(state)
    ready = args.command == "recover"
    print(f"before ({args.cluster}'s shard {'0 ready' if ready else 'ready'}):")
    run_digs(lines)
    set_ready(state, args.cluster, ready=ready)
    verb = "its endpoints ready again" if ready else "0 ready endpoints"
    print(f"\n{args.cluster}'s myns/myservice now has {verb}; waiting for every answer to show it "
          f"(the resolvers cache answers for up to the TTL) ...", flush=True)
    shard = {CLUSTERS[args.cluster]["clusterIP"], CLUSTERS[args.cluster]["externalIP"]}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(bool(shard & answer) == ready for answer in answers(lines)):
        time.sleep(0.2)
    print("after:")
    run_digs(lines)
    return 0


def answers(lines: list[tuple[str, str]]) -> list[set[str]]:
    """The addresses each dig line answers now."""
    return [set(subprocess.run(line.split(), capture_output=True, text=True, check=False).stdout.split())
            for _, line in lines]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    for name, text in (("fail", "take a cluster's shard to 0 ready endpoints"),
                       ("recover", "make a cluster's endpoints ready again")):
        command = sub.add_parser(name, help=text, description=text)
        command.add_argument("cluster", help="foo or bar")
    parser.add_argument("--once", action="store_true", help="print the endpoints, dig lines and answers, then stop")
    parser.add_argument("--ttl", type=int, default=5, help="answer TTL and resolver cache limit, seconds")
    args = parser.parse_args()
    if args.command in ("fail", "recover"):
        return change(args)
    return demo(args)


if __name__ == "__main__":
    # Both stop the demo cleanly; SIGINT too when the shell started it with SIGINT ignored (`&`).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
