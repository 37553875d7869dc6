"""`feddns status` against a raw `etcdctl get --prefix` of the same keys, side by side.

Starts Debian's etcd on loopback and fills it as bench/serve_load.py does (--services
services x --clusters clusters shard records, default 100,000 x 10 = 1,000,000, plus one
cluster record per cluster), then times, alternately and --runs times each, `etcdctl get
--prefix /bench/` (its output thrown away) and `feddns status --etcd` (text out), and prints
the best time of each and their ratio (the target: at most 2x).

Filling etcd takes a few minutes; with --data DIR the filled etcd data directory is kept
there and reused by the next run with the same sizes.

Usage: python bench/status_speed.py [--services 100000] [--clusters 10] [--runs 3] [--data DIR]
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from serve_load import FEDERATION, done_with, filled_etcd


def timed(command: list[str], ok: tuple[int, ...], env: dict[str, str] | None = None) -> float:
    """Seconds of wall time ``command`` takes, its output thrown away; it must exit with one of ``ok``."""
    started = time.monotonic()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    took = time.monotonic() - started
    if done.returncode not in ok:
        raise RuntimeError(f"{command[0]} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3, help="times each command is run (the best counts)")
    parser.add_argument("--data", help="keep the filled etcd data directory here and reuse it")
    args = parser.parse_args()
    etcd = filled_etcd(args.services, args.clusters, args.data)
    try:
        # etcdctl gives up after 5 s by default (exit 1): a million keys take longer
        etcdctl = ["etcdctl", f"--endpoints={etcd.url}", "--command-timeout=600s", "get", "--prefix", f"/{FEDERATION}/"]
        status = [sys.executable, "-m", "feddns.cli", "status", "--etcd", etcd.url, "--timeout", "600"]
        env = dict(os.environ, ETCDCTL_API="3")
        raw, ours = [], []
        for _ in range(args.runs):
            raw.append(timed(etcdctl, (0,), env))
            ours.append(timed(status, (0, 1)))  # 1: degraded, a finding like any other
    finally:
        done_with(etcd, args.data)
    records = args.services * args.clusters
    print(f"{records:,} shard records: etcdctl get --prefix {min(raw):.2f} s, feddns status {min(ours):.2f} s, "
          f"ratio {min(ours) / min(raw):.2f} (best of {args.runs})")


if __name__ == "__main__":
    main()
