"""The number flags of every command, checked in one place (docs/reference.md section 6).

A flag that takes seconds, days or any other amount with a fraction is declared with :func:`seconds`
(or :func:`in_range`): argparse converts the text with ``float``, which also takes ``nan``, ``inf``
and ``1e10``, and the flag's action then refuses what is not a finite number more than 0 and at most
its bound, with one line naming the flag, the value and the range, and exit status 2 (the command's
parser's ``error``). So no command sees ``nan`` (which compares false with everything and makes
``int()`` raise) or an amount that overflows a deadline further on (gRPC's, asyncio's).
"""

import argparse
import functools
import math
from collections.abc import Sequence
from typing import Any

MAX_SECONDS = 3600.0
"""The bound of a flag of seconds unless it says another: an hour (no timeout or interval of ours is longer)."""


class InRange(argparse.Action):
    """Stores a ``float`` more than 0 and at most ``most`` (``unit`` names what it counts); else the parser's error."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, most: float, unit: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.most, self.unit = most, unit

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if not (math.isfinite(values) and 0 < values <= self.most):
            parser.error(f"{option_string} {values:g} is not a number of {self.unit} more than 0 and at most "
                         f"{self.most:g}")
        setattr(namespace, self.dest, values)


def in_range(most: float, unit: str) -> dict[str, Any]:
    """The ``add_argument`` keywords of a number flag of ``unit`` more than 0 and at most ``most``."""
    return {"type": float, "action": functools.partial(InRange, most=most, unit=unit)}


def seconds(most: float = MAX_SECONDS) -> dict[str, Any]:
    """The ``add_argument`` keywords of a flag of seconds (a timeout, an interval): more than 0, at most ``most``."""
    return in_range(most, "seconds")
