"""Fixtures for the Federated-DNS tests: a served records file covering every tier."""

from collections.abc import Iterator

import pytest

from feddns.dns.responder import Responder
from harness.serve import ServeProcess, write_records
from tests.dns import tables
from tests.dns.policy_records import RECORDS as POLICY_RECORDS

# Clusters of federation `fed`: a and b share zone z1; c shares region r1 only; d is far;
# e has no cluster record and its shard no externalIP.
RECORDS = """
/fed/_clusters/a: {zone: z1, region: r1, cidrs: ["10.240.0.0/16"]}
/fed/_clusters/b: {zone: z1, region: r1}
/fed/_clusters/c: {zone: z2, region: r1}
/fed/_clusters/d: {zone: z3, region: r2}
/fed/prod/web/a: {clusterIP: 10.0.0.1, externalIP: 1.1.1.1, ready: 2, ports: [{name: http, protocol: TCP, port: 80}]}
/fed/prod/web/b: {clusterIP: 10.0.0.2, externalIP: 1.1.1.2, ready: 1, ports: [{name: http, protocol: TCP, port: 8080}]}
/fed/prod/web/c: {clusterIP: 10.0.0.3, externalIP: 1.1.1.3, ports: [{name: http, protocol: TCP, port: 80}]}
/fed/prod/web/d: {clusterIP: 10.0.0.4, externalIP: 1.1.1.4, ready: 0, ports: [{name: http, protocol: TCP, port: 80}]}
/fed/prod/web/e: {clusterIP: 10.0.0.5, ports: [{name: http, protocol: TCP, port: 80}]}
/fed/prod/down/a: {clusterIP: 10.0.1.1, externalIP: 1.1.2.1, ready: 0}
/fed/prod/down/b: {clusterIP: 10.0.1.2, externalIP: 1.1.2.2, ready: 0}
/fed/prod/brief/a: {clusterIP: 10.0.4.1, externalIP: 4.4.4.1, ttl: 5}
/fed/prod/brief/b: {clusterIP: 10.0.4.2, externalIP: 4.4.4.2, ttl: 3}
/fed/prod/brief/c: {clusterIP: 10.0.4.3, externalIP: 4.4.4.3}
/fed/prod/quiet/a: {clusterIP: 10.0.3.1, externalIP: 3.3.3.1, ready: 0, noneReady: nodata}
/fed/prod/dual/a: {clusterIPs: [10.0.2.1, "fd00::1"], externalIPs: [2.2.2.1, "2001:db8::1"]}
/fed/prod/dual/b: {clusterIPs: [10.0.2.2], externalIPs: [2.2.2.2, "2001:db8::2"]}
/fed/prod/dual/d: {clusterIP: 10.0.2.4, externalIP: 2.2.2.4}
"""


def big_records(count: int) -> str:
    """A service `big.prod` with ``count`` shards, to overflow a 512-byte UDP reply."""
    lines = [f"/fed/prod/big/c{i}: {{clusterIP: 10.9.{i // 250}.{i % 250 + 1}, "
             f"externalIP: 9.9.{i // 250}.{i % 250 + 1}}}" for i in range(count)]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="package")
def served() -> Iterator[ServeProcess]:
    """feddns serve on RECORDS with a fixed order (rotation has tests of its own)."""
    path = write_records(RECORDS + big_records(40))
    with ServeProcess(records=path, extra_args=["--order", "stable"]) as server:
        yield server


@pytest.fixture(scope="package")
def answers_responder() -> Responder:
    """The responder in-process on what ``served`` serves, with its fixed order."""
    return tables.make_responder(RECORDS + big_records(40), stable=True)


@pytest.fixture(scope="package")
def policy_server() -> Iterator[ServeProcess]:
    """feddns serve on the policy records (tests/dns/policy_records.py), with rotation (as
    deployed) and the MCS zone clusterset.local. (federation pol is the only one held)."""
    path = write_records(POLICY_RECORDS)
    with ServeProcess(records=path, extra_args=["--mcs-zone", "clusterset.local."]) as server:
        yield server


@pytest.fixture(scope="package")
def policy_responder() -> Responder:
    """The responder in-process on the same records and settings."""
    return tables.make_responder(POLICY_RECORDS, mcs_zone="clusterset.local.")


@pytest.fixture(params=["in-process", "udp", "tcp"])
def ask(request: pytest.FixtureRequest, policy_responder: Responder, policy_server: ServeProcess) -> tables.Ask:
    """A way to ask the policy records: the responder in-process (as over UDP), or the real
    server over UDP or TCP. Both are named as parameters, so that they are set up (once for
    the package) before any test's own fixtures."""
    if request.param == "in-process":
        return tables.in_process(policy_responder, False)
    return tables.over_network(policy_server, request.param == "tcp")
