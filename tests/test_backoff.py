"""feddns.backoff: the one exponential backoff (equal jitter, doubling, reset on success)."""

import asyncio
import threading
import time

import pytest

from feddns import backoff
from feddns.backoff import Backoff


def test_waits_double_within_their_upper_half_up_to_most():
    retry = Backoff(0.1, 0.5)
    nominal = [0.1, 0.2, 0.4, 0.5, 0.5]
    for delay in nominal:
        assert retry.delay == delay
        assert delay / 2 <= retry.next() <= delay


def test_reset_starts_again_from_first():
    retry = Backoff(1.0, 60.0)
    for _ in range(5):
        retry.next()
    retry.reset()
    assert retry.delay == 1.0
    assert 0.5 <= retry.next() <= 1.0


def test_jitter_is_repeatable_with_a_seed():
    backoff.rng.seed(7)
    first = [Backoff(1, 8).next() for _ in range(3)]
    backoff.rng.seed(7)
    assert [Backoff(1, 8).next() for _ in range(3)] == first


@pytest.mark.parametrize(("first", "most"), [(0, 1), (-1, 1), (2, 1), (1, float("inf")), (float("nan"), 1)])
def test_bad_bounds_are_refused(first, most):
    with pytest.raises(ValueError, match="0 < first <= most"):
        Backoff(first, most)


def test_sleep_on_the_event_loop():
    retry = Backoff(0.02, 0.02)
    started = time.monotonic()
    slept = asyncio.run(retry.sleep())
    assert 0.01 <= slept <= 0.02
    assert time.monotonic() - started >= 0.01


def test_wait_in_a_thread_ends_when_stopped():
    retry = Backoff(30.0, 30.0)
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    started = time.monotonic()
    assert retry.wait(stop) is True
    assert time.monotonic() - started < 5
