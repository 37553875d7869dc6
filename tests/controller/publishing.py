"""Driving the external publisher in the tests of its providers (RFC 2136 against BIND,
DNSEndpoint against the fake API server): a publisher with fast retries, and waiting on
what a user would check."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from prometheus_client import CollectorRegistry

from controller.external.config import ExternalConfig
from controller.external.provider import Provider
from controller.external.publisher import ExternalPublisher
from controller.settings import ExternalSettings

FAST = ExternalSettings(timeout=2.0, first=0.05, maximum=0.4)
"""Short timeouts and backoff, so that retry tests take a second."""


@contextlib.asynccontextmanager
async def publishing(config: ExternalConfig, federation: str, provider: Provider | None = None,
                     may_write: Callable[[], bool] = lambda: True,
                     ) -> AsyncIterator[tuple[ExternalPublisher, CollectorRegistry]]:
    """A publisher with a registry of its own (fast retries), closed on the way out;
    ``may_write`` stands for the leader's lease check."""
    registry = CollectorRegistry()
    publisher = ExternalPublisher(config, federation, registry, timing=FAST, provider=provider, may_write=may_write)
    try:
        yield publisher, registry
    finally:
        await publisher.close()


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A ``feddns_external_<name>`` sample (0 when absent)."""
    return registry.get_sample_value(f"feddns_external_{name}", labels) or 0.0


def settled(registry: CollectorRegistry) -> bool:
    return sample(registry, "pending_names") == 0
