"""The one exponential backoff of every retry loop: waits doubling from ``first`` to ``most`` seconds.

Every component retries something that failed (an etcd call, a list of the
Kubernetes API, a stub-zone endpoint, a DNS provider, a ConfigMap write), and
every retry waits the same way, so that logs and settings mean one thing:

* the nominal delay starts at ``first`` seconds and doubles after each failure,
  up to ``most`` seconds;
* each wait is drawn uniformly from the upper half of the nominal delay,
  ``[delay / 2, delay]`` ("equal jitter", AWS Architecture Blog, "Exponential
  Backoff And Jitter"): replicas that failed together do not retry together,
  and a wait is never longer than the delay a log line announces;
* a success calls :meth:`Backoff.reset`, and the next failure waits about
  ``first`` again.

A loop on the event loop awaits :meth:`Backoff.sleep`; a loop in a thread (the
reflector, a ConfigMap write in a worker thread) waits :meth:`Backoff.wait`
on its stop event or calls :meth:`Backoff.next` for the seconds to wait.
One :class:`Backoff` belongs to one loop (or one retried thing, such as one
member's stub zone): it holds that loop's current delay and is not shared.
"""

import asyncio
import math
import random
import threading
from dataclasses import dataclass, field

rng = random.Random()
"""The random source of the jitter (``rng.seed(n)`` makes a test repeatable)."""


@dataclass(slots=True)
class Backoff:
    """Exponential backoff with equal jitter; every value is in seconds.

    ``first`` is the nominal delay after the first failure, ``most`` the longest;
    :attr:`delay` is the nominal delay of the next wait. Raises ``ValueError`` when
    ``first`` is not positive or ``most`` is less than ``first`` or not finite.
    """

    first: float
    most: float
    delay: float = field(init=False)
    """Nominal seconds of the next wait: the real wait is drawn from ``[delay / 2, delay]``."""

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.most < math.inf:  # an endless most: the delay grows past a float
            raise ValueError(f"backoff needs 0 < first <= most (seconds), got first={self.first} most={self.most}")
        self.delay = self.first

    def next(self) -> float:
        """Seconds to wait now, drawn from ``[delay / 2, delay]``; the delay then doubles (up to ``most``)."""
        wait = rng.uniform(self.delay / 2, self.delay)
        self.delay = min(self.delay * 2, self.most)
        return wait

    def reset(self) -> None:
        """After a success: the next failure waits about ``first`` seconds again."""
        self.delay = self.first

    async def sleep(self) -> float:
        """Sleep :meth:`next` seconds on the event loop; returns the seconds slept. Cancellable."""
        wait = self.next()
        await asyncio.sleep(wait)
        return wait

    def wait(self, stop: threading.Event) -> bool:
        """Block the calling thread for :meth:`next` seconds or until ``stop`` is set,
        whichever comes first; returns True when ``stop`` was set (``threading.Event.wait``)."""
        return stop.wait(self.next())
