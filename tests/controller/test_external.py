"""The external-DNS publisher against a real BIND 9, checked with dig (docs/external-dns.md).

Each test starts its own ``named`` with a dynamic zone ``example.com.`` and a
TSIG key, drives ``ExternalPublisher`` with the desired mapping (what the controller
computes from the healthy LoadBalancer shards), and reads the zone back with
``dig`` as an external client would.
"""

import asyncio
import base64
import contextlib
import dataclasses
import ipaddress
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from controller.external import UNREADY_MARK, ExternalConfig, ExternalPublisher, marker, parse_external_config
from controller.settings import ExternalSettings
from harness.ports import async_wait_until
from tests.controller.publishing import FAST, run, sample, settled
from tests.controller.publishing import publishing as publishing_to
from tests.support.bind import BindServer

FEDERATION = "myfed"
WEB = ("myns", "web")
WEB_NAME = "web.myns.myfed.svc.example.com."
API_NAME = "api.myns.myfed.svc.example.com."
ip = ipaddress.ip_address

# Names in the zone that feddns did not create: one no service wants, one a service
# wants (a conflict), one another federation owns, and one outside the federation.
FOREIGN_RECORDS = """\
other.myns.myfed.svc  A   192.0.2.99
taken.myns.myfed.svc  A   192.0.2.98
web.myns.otherfed.svc A   192.0.2.97
web.myns.otherfed.svc TXT "heritage=feddns,feddns/federation=otherfed,feddns/service=myns/web"
www                   A   192.0.2.96
"""
FOREIGN = {
    "other.myns.myfed.svc.example.com.": ["192.0.2.99"],
    "taken.myns.myfed.svc.example.com.": ["192.0.2.98"],
    "web.myns.otherfed.svc.example.com.": ["192.0.2.97"],
    "www.example.com.": ["192.0.2.96"],
}


@pytest.fixture
def bind() -> Iterator[BindServer]:
    server = BindServer(records=FOREIGN_RECORDS, updates_below="myfed.svc.example.com.")
    server.start()
    yield server
    server.destroy()


def config_for(bind: BindServer, **tsig: str) -> ExternalConfig:
    raw = {"provider": "rfc2136", "server": f"127.0.0.1:{bind.port}", "zone": "example.com",
           "tsig": {"name": bind.key_name, "secretFile": bind.key_path, **tsig}}
    return parse_external_config(raw)


@contextlib.asynccontextmanager
async def publishing(config: ExternalConfig) -> AsyncIterator[tuple[ExternalPublisher, CollectorRegistry]]:
    """A publisher to BIND with a registry of its own (fast retries), closed on the way out."""
    async with publishing_to(config, FEDERATION) as running:
        yield running


async def wait_published(bind: BindServer, qname: str, addresses: list[str], qtype: str = "A") -> None:
    await async_wait_until(lambda: bind.dig(qname, qtype).rdata == sorted(addresses),
                           timeout=15.0, what=f"{qname} {qtype} = {addresses}")


def foreign_untouched(bind: BindServer) -> None:
    for qname, addresses in FOREIGN.items():
        assert bind.dig(qname).answers == tuple((300, address) for address in addresses), qname
    assert bind.dig("web.myns.otherfed.svc.example.com.", "TXT").rdata == [
        '"heritage=feddns,feddns/federation=otherfed,feddns/service=myns/web"']


def test_add_publishes_a_aaaa_and_the_ownership_txt(bind: BindServer) -> None:
    async def scenario() -> None:
        async with publishing(config_for(bind)) as (publisher, registry):
            await publisher.resync({WEB: [ip("198.51.100.2"), ip("198.51.100.1"), ip("2001:db8::1")]})
            await wait_published(bind, WEB_NAME, ["198.51.100.1", "198.51.100.2"])
            assert sorted(bind.dig(WEB_NAME).answers) == [(60, "198.51.100.1"), (60, "198.51.100.2")]
            assert bind.dig(WEB_NAME, "AAAA").answers == ((60, "2001:db8::1"),)
            assert bind.dig(WEB_NAME, "TXT").rdata == [f'"{marker(FEDERATION, "myns", "web")}"']
            # counted once BIND's answer arrives, a moment after dig sees the change: wait for the pass to end
            await async_wait_until(lambda: settled(registry), timeout=15.0, what="nothing pending")
            assert sample(registry, "updates_total") == 1
            assert sample(registry, "owned_names") == 1
            assert sample(registry, "zone_reads_total") == 1
            foreign_untouched(bind)
    run(scenario)


def test_a_change_is_one_update_and_no_change_sends_nothing(bind: BindServer) -> None:
    async def scenario() -> None:
        async with publishing(config_for(bind)) as (publisher, registry):
            await publisher.resync({WEB: [ip("198.51.100.1"), ip("2001:db8::1")]})
            await wait_published(bind, WEB_NAME, ["198.51.100.1"])
            serial = bind.serial()
            # A change of both families goes out as one message: one serial step in BIND.
            await publisher.publish({WEB: [ip("198.51.100.7"), ip("198.51.100.8"), ip("2001:db8::7")]})
            await wait_published(bind, WEB_NAME, ["198.51.100.7", "198.51.100.8"])
            assert bind.dig(WEB_NAME, "AAAA").rdata == ["2001:db8::7"]
            assert bind.serial() == serial + 1
            await async_wait_until(lambda: settled(registry), timeout=15.0, what="nothing pending")
            assert sample(registry, "updates_total") == 2
            # The same state again (in another order) sends nothing; the next real change
            # proves the publisher has run since.
            await publisher.publish({WEB: [ip("2001:db8::7"), ip("198.51.100.8"), ip("198.51.100.7")]})
            await publisher.publish({WEB: [ip("198.51.100.8"), ip("2001:db8::7"), ip("198.51.100.7")],
                                     ("myns", "api"): [ip("198.51.100.9")]})
            await wait_published(bind, API_NAME, ["198.51.100.9"])
            assert bind.serial() == serial + 2
            await async_wait_until(lambda: settled(registry), timeout=15.0, what="nothing pending")
            assert sample(registry, "updates_total") == 3
            assert bind.dig(WEB_NAME).rdata == ["198.51.100.7", "198.51.100.8"]
    run(scenario)


def test_no_ready_shard_keeps_the_addresses_marked_unready_and_a_gone_service_is_deleted(bind: BindServer) -> None:
    """A service with no ready shard keeps its name and addresses with the unready mark, so a
    public resolver never gets (and caches) an NXDOMAIN while Federated-DNS answers NODATA;
    a service gone from every cluster is deleted."""
    async def scenario() -> None:
        api = ("myns", "api")
        async with publishing(config_for(bind)) as (publisher, registry):
            await publisher.resync({WEB: [ip("198.51.100.1")], api: [ip("198.51.100.2"), ip("2001:db8::2")]})
            await wait_published(bind, API_NAME, ["198.51.100.2"])
            await wait_published(bind, WEB_NAME, ["198.51.100.1"])
            # web: no ready endpoint in any shard; api: the Service is gone.
            await publisher.publish({WEB: [ip("198.51.100.1")]}, unready={WEB})
            await async_wait_until(lambda: bind.dig(API_NAME, "AAAA").status == "NXDOMAIN",
                                   timeout=15.0, what=f"{API_NAME} deleted")
            await async_wait_until(lambda: len(bind.dig(WEB_NAME, "TXT").rdata) == 2,
                                   timeout=15.0, what=f"{WEB_NAME} marked unready")
            assert bind.dig(WEB_NAME).rdata == ["198.51.100.1"]
            assert sorted(bind.dig(WEB_NAME, "TXT").rdata) == sorted(
                [f'"{marker(FEDERATION, "myns", "web")}"', f'"{UNREADY_MARK}"'])
            assert bind.dig(API_NAME, "TXT").status == "NXDOMAIN"
            await async_wait_until(lambda: settled(registry),
                                   timeout=15.0, what="nothing pending")  # the gauges are set as the pass ends
            assert sample(registry, "owned_names") == 1
            assert sample(registry, "stale_names") == 1
            foreign_untouched(bind)
            # Ready again (elsewhere): the new addresses, and the unready mark goes.
            await publisher.publish({WEB: [ip("198.51.100.3")]})
            await wait_published(bind, WEB_NAME, ["198.51.100.3"])
            assert bind.dig(WEB_NAME, "TXT").rdata == [f'"{marker(FEDERATION, "myns", "web")}"']
            await async_wait_until(lambda: sample(registry, "stale_names") == 0, timeout=15.0, what="no unready name")
            # Gone from every cluster: deleted, TXT included.
            await publisher.publish({})
            await async_wait_until(lambda: bind.dig(WEB_NAME).status == "NXDOMAIN",
                                   timeout=15.0, what=f"{WEB_NAME} deleted")
            assert bind.dig(WEB_NAME, "TXT").status == "NXDOMAIN"
            foreign_untouched(bind)
    run(scenario)


def test_resync_deletes_names_of_an_earlier_run_and_never_touches_others(bind: BindServer) -> None:
    async def scenario() -> None:
        async with publishing(config_for(bind)) as (first, _):
            await first.publish({WEB: [ip("198.51.100.1")], ("myns", "api"): [ip("198.51.100.2")]})
            await wait_published(bind, WEB_NAME, ["198.51.100.1"])
            await wait_published(bind, API_NAME, ["198.51.100.2"])
        # A new run (a restart, or a new leader) wants web as it is, and no api; it also
        # wants "taken", which exists without our marker, and never wants "other".
        async with publishing(config_for(bind)) as (second, registry):
            await second.resync({WEB: [ip("198.51.100.1")], ("myns", "taken"): [ip("198.51.100.5")]})
            await async_wait_until(lambda: bind.dig(API_NAME).status == "NXDOMAIN",
                                   timeout=15.0, what=f"{API_NAME} cleaned up")
            await async_wait_until(lambda: sample(registry, "conflicting_names") == 1,
                                   timeout=15.0, what="the conflict on taken")
            await async_wait_until(lambda: settled(registry), timeout=15.0, what="nothing pending")
            assert bind.dig(WEB_NAME).rdata == ["198.51.100.1"]
            assert sample(registry, "updates_total") == 1  # the deletion of api; web was already right
            assert sample(registry, "owned_names") == 1
            foreign_untouched(bind)
    run(scenario)


def test_a_new_ttl_in_the_config_is_applied_at_resync(bind: BindServer) -> None:
    async def scenario() -> None:
        async with publishing(config_for(bind)) as (first, _):
            await first.publish({WEB: [ip("198.51.100.1")]})
            await wait_published(bind, WEB_NAME, ["198.51.100.1"])
        longer = dataclasses.replace(config_for(bind), ttl=300)
        async with publishing(longer) as (second, registry):
            await second.resync({WEB: [ip("198.51.100.1")]})
            await async_wait_until(lambda: bind.dig(WEB_NAME).answers == ((300, "198.51.100.1"),),
                                   timeout=15.0, what="TTL 300")
            await async_wait_until(lambda: settled(registry), timeout=15.0, what="nothing pending")
            assert sample(registry, "updates_total") == 1
    run(scenario)


def test_publish_without_resync_never_overwrites_a_name_it_did_not_create(bind: BindServer) -> None:
    async def scenario() -> None:
        async with publishing(config_for(bind)) as (publisher, registry):
            await publisher.publish({("myns", "taken"): [ip("198.51.100.5")], WEB: [ip("198.51.100.1")]})
            await wait_published(bind, WEB_NAME, ["198.51.100.1"])
            await async_wait_until(lambda: sample(registry, "conflicting_names") == 1,
                                   timeout=15.0, what="the conflict on taken")
            # Later wanting it no more does not delete it either.
            await publisher.publish({WEB: [ip("198.51.100.1")]})
            await async_wait_until(lambda: sample(registry, "conflicting_names") == 0, timeout=15.0, what="no conflict")
            foreign_untouched(bind)
            assert sample(registry, "updates_total") == 1
    run(scenario)


@pytest.mark.parametrize("wrong, reason", [
    ({"secret": base64.b64encode(b"not the secret, but 32 bytes lon").decode()}, "badsig"),
    ({"name": "stranger."}, "badkey"),
])
def test_a_wrong_tsig_key_is_refused_and_reported(
    bind: BindServer, tmp_path: Any, caplog: pytest.LogCaptureFixture, wrong: dict[str, str], reason: str,
) -> None:
    secret_file = tmp_path / "wrong.secret"
    secret_file.write_text(wrong.get("secret", bind.secret) + "\n")
    config = config_for(bind, secretFile=str(secret_file), **({"name": wrong["name"]} if "name" in wrong else {}))

    async def scenario() -> None:
        async with publishing(config) as (publisher, registry):
            with caplog.at_level(logging.WARNING, logger="controller.external"):
                await publisher.resync({WEB: [ip("198.51.100.1")]})
                await async_wait_until(lambda: sample(registry, "retries_total") >= 2, timeout=15.0, what="two retries")
            assert sample(registry, "failures_total", reason=reason) >= 2
            assert sample(registry, "pending_names") == 1
            assert bind.dig(WEB_NAME).status == "NXDOMAIN"
            foreign_untouched(bind)
    run(scenario)
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert any(f"({reason})" in text and config.tsig_name in text for text in warnings), warnings
    assert len(warnings) == 1, "a failing provider is reported once, not on every retry"
    assert wrong.get("secret", bind.secret) not in caplog.text and bind.secret not in caplog.text
    assert bind.secret not in repr(config)


def test_an_update_the_key_may_not_make_is_refused_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    bind = BindServer(records=FOREIGN_RECORDS, updates_below="otherfed.svc.example.com.")
    bind.start()

    async def scenario() -> None:
        async with publishing(config_for(bind)) as (publisher, registry):
            await publisher.resync({WEB: [ip("198.51.100.1")], ("myns", "api"): [ip("198.51.100.2")]})
            await async_wait_until(lambda: sample(registry, "retries_total") >= 2, timeout=15.0, what="two retries")
            # Each name is tried in every pass: a refusal may be about one name only.
            assert sample(registry, "failures_total", reason="refused") >= 4
            assert sample(registry, "pending_names") == 2
            assert bind.dig(WEB_NAME).status == "NXDOMAIN"
            foreign_untouched(bind)
    try:
        with caplog.at_level(logging.WARNING, logger="controller.external"):
            run(scenario)
    finally:
        bind.destroy()
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "refused by the server: REFUSED" in warnings[0], warnings


def test_bind_stopped_and_restarted_updates_catch_up(bind: BindServer, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with publishing(config_for(bind)) as (publisher, registry):
            await publisher.resync({WEB: [ip("198.51.100.1")]})
            await wait_published(bind, WEB_NAME, ["198.51.100.1"])
            await asyncio.to_thread(bind.stop)
            await publisher.publish({WEB: [ip("198.51.100.2")], ("myns", "api"): [ip("2001:db8::2")]})
            await publisher.resync({WEB: [ip("198.51.100.2")], ("myns", "api"): [ip("2001:db8::2")]})
            await async_wait_until(lambda: sample(registry, "retries_total") >= 3,
                                   timeout=15.0, what="three retries while BIND is down")
            assert sample(registry, "failures_total", reason="unreachable") >= 3
            assert sample(registry, "pending_names") == 2
            await asyncio.to_thread(bind.start)
            await wait_published(bind, WEB_NAME, ["198.51.100.2"])
            await wait_published(bind, API_NAME, ["2001:db8::2"], "AAAA")
            await async_wait_until(lambda: settled(registry), timeout=15.0, what="nothing pending")
            assert sample(registry, "zone_reads_total") == 2
            foreign_untouched(bind)
    with caplog.at_level(logging.INFO, logger="controller.external"):
        run(scenario)
    assert "caught up" in caplog.text


def test_a_provider_that_never_answers_does_not_block_the_caller() -> None:
    # A TCP listener that never accepts: connections open (the kernel's backlog) and
    # no answer ever comes, like a provider behind a black-holing firewall.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        config = parse_external_config({"provider": "rfc2136", "server": f"127.0.0.1:{silent.getsockname()[1]}",
                                        "zone": "example.com"})

        async def scenario() -> None:
            registry = CollectorRegistry()
            timing = ExternalSettings(timeout=1.0, first=0.05, maximum=0.1)
            publisher = ExternalPublisher(config, FEDERATION, registry, timing=timing)
            try:
                started = time.monotonic()
                await publisher.resync({WEB: [ip("198.51.100.1")]})
                await publisher.publish({WEB: [ip("198.51.100.2")]})
                assert time.monotonic() - started < 0.5, "publish and resync must not wait for the provider"
                await async_wait_until(lambda: sample(registry, "failures_total", reason="timeout") >= 2,
                                       timeout=15.0, what="two timeouts")
                assert sample(registry, "pending_names") == 1
            finally:
                await publisher.close()
        run(scenario)


def test_a_refused_zone_transfer_still_publishes(caplog: pytest.LogCaptureFixture) -> None:
    bind = BindServer(records=FOREIGN_RECORDS, allow_transfer=False)
    bind.start()

    async def scenario() -> None:
        async with publishing(config_for(bind)) as (publisher, registry):
            await publisher.resync({WEB: [ip("198.51.100.1")], ("myns", "taken"): [ip("198.51.100.5")]})
            await wait_published(bind, WEB_NAME, ["198.51.100.1"])
            await async_wait_until(lambda: sample(registry, "conflicting_names") == 1,
                                   timeout=15.0, what="the conflict on taken")
            assert sample(registry, "failures_total", reason="axfr-refused") == 1
            assert sample(registry, "zone_reads_total") == 0
            foreign_untouched(bind)
    try:
        with caplog.at_level(logging.WARNING, logger="controller.external"):
            run(scenario)
    finally:
        bind.destroy()
    assert "refused the zone transfer" in caplog.text


def test_close_leaves_no_task_behind(bind: BindServer) -> None:
    async def scenario() -> None:
        publisher = ExternalPublisher(config_for(bind), FEDERATION, CollectorRegistry(), timing=FAST)
        await publisher.publish({WEB: [ip("198.51.100.1")]})
        await publisher.close()
        assert asyncio.all_tasks() == {asyncio.current_task()}
    asyncio.run(scenario())

