"""The differential test (tests/support/differential.py) in CI: a few examples of random
changes in a real etcd, after each step every question answered alike by a server that followed the
changes, a worker of ``--workers 2`` and a server started cold. The long run is
``python bench/differential.py --minutes 30``; ``FEDDNS_DIFFERENTIAL_EXAMPLES`` sets the
number of examples here (default 3, of at most 8 steps)."""

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from harness.etcd import EtcdServer
from tests.support.differential import Differential, World

EXAMPLES = int(os.environ.get("FEDDNS_DIFFERENTIAL_EXAMPLES", "3"))


@pytest.fixture
def world(etcd: EtcdServer, etcd_prefix: str) -> Iterator[World]:
    made = World(etcd, etcd_prefix)
    try:
        yield made
    finally:
        made.close()
        etcd.delete(etcd_prefix + "/", prefix=True)


def test_every_server_answers_as_one_started_now(world: World) -> None:
    Differential.world = world
    run_state_machine_as_test(Differential, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=8, deadline=None, database=None,
        phases=(Phase.explicit, Phase.generate),  # no shrinking: each example starts servers (seconds)
        suppress_health_check=list(HealthCheck)))
    assert world.compared
