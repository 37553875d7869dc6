"""The e2e tier: a real node (harness/node.py) running the feddns image and both charts, as
docs/operations.md installs them. One node for the whole tier (its start takes about a minute);
the tests run in file order, each on what the ones before installed.

The images are made by scripts/images.sh before pytest starts (harness/images.py reuses them here);
a machine without them makes them now, which takes minutes.
"""

from collections.abc import Iterator

import pytest

from harness import images
from harness.node import Node
from tests.e2e.figures import FIGURES


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    """The node, started once for the tier's module; torn down after it, and nothing of it may be left."""
    made = [*images.pinned_images(), images.feddns_image()]
    started = Node().start(made)
    FIGURES["node ready"] = f"{started.timings['total']:.1f} s (" + ", ".join(
        f"{part} {seconds:.1f}" for part, seconds in started.timings.items() if part != "total") + ")"
    FIGURES["node RSS"] = ", ".join(f"{part} {size / 2**20:.0f} MiB" for part, size in started.rss().items())
    FIGURES["feddns image"] = f"{images.image_size(made[-1]) / 2**20:.0f} MiB ({made[-1].ref})"
    yield started
    started.stop()
    left = started.leftovers()
    assert not left, f"the node left behind: {left}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The tier's figures, one line each (docs/operations.md and docs/performance.md quote them)."""
    if FIGURES:
        terminalreporter.section("e2e figures")
        for name, value in FIGURES.items():
            terminalreporter.write_line(f"{name}: {value}")
