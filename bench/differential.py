"""The differential test's long run: random changes in a real etcd for --minutes, after each
step every question answered alike by a server that followed them, a worker of
`--workers 2` and a server started cold (tests/support/differential.py;
tests/dns/test_differential.py runs a few examples of it in CI).

Starts Debian's etcd on loopback, then runs examples of --steps steps each, in batches, until
the time is up (after one batch at least) or two servers differ. Prints what it ran (examples, steps, questions
compared) and, when two servers differ, the question, each server's reply and the records,
and exits 1.

Usage: python bench/differential.py [--minutes 30] [--steps 20] [--questions 60] [--batch 5]
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from harness.etcd import EtcdServer
from tests.support.differential import Differential, World

BATCH = 5
"""Examples a batch: the time is looked at between batches."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--steps", type=int, default=20, help="steps an example, at most")
    parser.add_argument("--questions", type=int, default=60, help="questions asked after each step")
    parser.add_argument("--batch", type=int, default=BATCH, help="examples a batch (the time is looked at between)")
    args = parser.parse_args()
    etcd = EtcdServer(enable_v2=False)
    etcd.start()
    world = None
    started = time.monotonic()
    try:
        world = World(etcd, "/differential")
        Differential.world = world
        Differential.question_count = args.questions
        batches = 0
        while batches == 0 or time.monotonic() - started < args.minutes * 60:  # one batch at least
            try:
                run_state_machine_as_test(Differential, settings=settings(
                    max_examples=args.batch, stateful_step_count=args.steps, deadline=None, database=None,
                    phases=(Phase.generate,), suppress_health_check=list(HealthCheck)))
            except Exception as exc:  # noqa: BLE001 - reported with the figures, then exit 1
                print(f"servers differ after {time.monotonic() - started:.0f} s:\n{exc}", flush=True)
                return 1
            batches += 1
            print(f"{time.monotonic() - started:6.0f} s: {world.examples} examples, {world.steps} steps, "
                  f"{world.compared:,} questions compared (each of 3 servers, UDP and TCP): no difference", flush=True)
        return 0
    finally:
        if world is not None:
            world.close()
        etcd.destroy()


if __name__ == "__main__":
    sys.exit(main())
