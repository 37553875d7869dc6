"""The e2e tier: two real single-node clusters, foo and bar (harness/node.py), on a link between
them, running the feddns image and both charts as docs/operations.md installs them. One setup for
the whole tier (the clusters start side by side, in about a minute); the tests run in file order,
each on what the ones before installed.

The images are made by scripts/images.sh before pytest starts (harness/images.py reuses them here);
a machine without them makes them now, which takes minutes.
"""

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from harness import images
from harness.netns import NetworkNamespace
from harness.node import Link, Node, cluster_ranges
from tests.e2e.figures import FIGURES, print_figures


@dataclass
class Clusters:
    """foo and bar, the link between them, and the external client's namespace on it."""

    foo: Node
    bar: Node
    link: Link
    client: NetworkNamespace


def _start_side_by_side(nodes: list[Node], made: list[images.Image]) -> None:
    """Start ``nodes`` from a thread each; the first error raised, after every node is stopped (a
    node whose start failed has stopped itself)."""
    with ThreadPoolExecutor(len(nodes), thread_name_prefix="start") as pool:
        futures = [pool.submit(node.start, made) for node in nodes]
        errors = [error for error in (future.exception() for future in futures) if error is not None]
    if errors:
        for node in nodes:
            node.stop()
        raise errors[0]


@pytest.fixture(scope="session")
def clusters() -> Iterator[Clusters]:
    """foo (cluster 0's ranges) and bar (cluster 1's) started side by side on a link, each cluster's
    load-balancer range routed through its node; torn down after the tier, and nothing of them may
    be left."""
    made = [*images.pinned_images(), images.feddns_image()]
    link = Link(f"feddns-link-{uuid.uuid4().hex[:6]}")
    foo = Node(cluster="foo", ranges=cluster_ranges(0), link=link)
    bar = Node(cluster="bar", ranges=cluster_ranges(1), link=link)
    try:
        _start_side_by_side([foo, bar], made)
        client = link.client("client")
        for node in (foo, bar):
            link.route(node.ranges.load_balancer_range, node.ranges.node_ip)
    except BaseException:
        link.delete()
        raise
    for node in (foo, bar):
        FIGURES[f"{node.cluster} ready"] = f"{node.timings['total']:.1f} s (" + ", ".join(
            f"{part} {seconds:.1f}" for part, seconds in node.timings.items() if part != "total") + ")"
        FIGURES[f"{node.cluster} RSS"] = ", ".join(f"{part} {size / 2**20:.0f} MiB"
                                                   for part, size in node.rss().items())
    both = sum(sum(node.rss().values()) for node in (foo, bar))
    FIGURES["two clusters' RSS"] = f"{both / 2**20:.0f} MiB (every part's process and the pods' cgroup, both clusters)"
    FIGURES["feddns image"] = f"{images.image_size(made[-1]) / 2**20:.0f} MiB ({made[-1].ref})"
    yield Clusters(foo, bar, link, client)
    for node in (foo, bar):
        node.stop()
    link.delete()
    left = [*foo.leftovers(), *bar.leftovers(), *link.leftovers()]
    assert not left, f"the clusters left behind: {left}"


@pytest.fixture(scope="session")
def node(clusters: Clusters) -> Node:
    """foo: the cluster that hosts the federation (and a member of it)."""
    return clusters.foo


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The tier's figures, one line each (docs/operations.md and docs/performance.md quote them),
    then the failover table in the form of section 9 of the contract (``e2e figure:`` lines)."""
    if FIGURES:
        terminalreporter.section("e2e figures")
        for name, value in FIGURES.items():
            terminalreporter.write_line(f"{name}: {value}")
    for line in print_figures():
        terminalreporter.write_line(line)
