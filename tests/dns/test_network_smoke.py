"""The smoke table: a handful of the in-process cases (tests/dns/test_policies.py and
test_mcs.py) asked of the real ``feddns serve`` over UDP and over TCP on loopback, so that
the transports (the UDP reply cache they inline, TCP framing) give the replies the
responder gives. Each kind of answer is here once: tiers, a fixed failover order, a
weighted draw, SRV with its additional section, a headless endpoint in upper case, the
MCS zone, NODATA, NXDOMAIN and REFUSED."""

import pytest

from harness.serve import ServeProcess
from tests.dns import test_mcs, test_policies
from tests.dns.tables import Case, check_over_network, ids


def pick(cases: list[Case], *names: str) -> list[Case]:
    """The cases of ``cases`` with these ids, in this order."""
    by_id = {case.id: case for case in cases}
    return [by_id[name] for name in names]


SMOKE = pick(test_policies.CASES, "locality from a", "locality external", "failover SRV: priority by place",
             "weighted from a", "one endpoint by hostname, in upper case", "headless shard, isolated",
             "no such endpoint name") + pick(test_mcs.CASES, "service, failover", "outside both zones")


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
@pytest.mark.parametrize("case", SMOKE, ids=ids(SMOKE))
def test_the_real_server_answers_as_the_responder(policy_server: ServeProcess, case: Case, tcp: bool) -> None:
    check_over_network(policy_server, case, tcp)
