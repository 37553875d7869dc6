"""The whole chain of tests/chain on one machine, for a person to try (``make demo``).

Starts a private etcd, two fake member clusters foo and bar, ``feddns controller``,
``feddns serve`` and one unbound per cluster (as its cluster DNS), prints and runs
the ``dig`` lines that show each cluster getting its own shard first, then keeps
everything running until Ctrl-C (``--once``: stop after printing).
"""

import argparse
import shutil
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chain.chain import CLUSTERS, QNAME, Chain  # noqa: E402
from tests.support.etcd import EtcdServer  # noqa: E402


def dig_lines(chain: Chain) -> list[tuple[str, str]]:
    """(what it shows, dig command) pairs for the running chain."""
    lines = [(f"a pod in {name} asks its cluster DNS", f"dig @127.0.0.1 -p {r.port} {QNAME} +short")
             for name, r in chain.resolvers.items()]
    lines.append(("an external client asks Federated-DNS directly",
                  f"dig @127.0.0.1 -p {chain.serve.port} {QNAME} +short"))
    lines.append(("the SRV records, as cluster foo",
                  f"dig @127.0.0.1 -p {chain.resolvers['foo'].port} _http._tcp.{QNAME} SRV +short"))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="print the dig lines and their answers, then stop")
    parser.add_argument("--ttl", type=int, default=5, help="answer TTL and resolver cache limit, seconds")
    args = parser.parse_args()
    etcd = EtcdServer()
    etcd.start()
    chain = Chain(etcd, ttl=args.ttl)
    try:
        print("starting etcd, fake clusters foo and bar, feddns controller, feddns serve, unbound x2 ...")
        chain.start()
        for name, shard in CLUSTERS.items():
            print(f"  cluster {name}: zone {shard['zone']}, myns/myservice clusterIP {shard['clusterIP']}, "
                  f"externalIP {shard['externalIP']}")
        for what, line in dig_lines(chain):
            print(f"\n# {what}\n{line}")
            if shutil.which("dig"):
                print(subprocess.run(line.split(), capture_output=True, text=True).stdout.rstrip())
        if not args.once:
            print(f"\nTry the lines above in another shell. Controller log: {chain.controller.log_path}\n"
                  "Stop with Ctrl-C.")
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
    finally:
        chain.stop()
        etcd.destroy()
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
