"""Weights are honoured (docs/reference.md section 2): over 10,000 answers each shard
comes first in its share of them, within 5%.

In-process the random source is seeded (``feddns.dns.weights.rng``), so the figures are
the same on every run. Against the real server it is not; there the tolerance is the
larger of 5% and five standard deviations of the binomial count (a false failure once in
about 3.5 million runs).
"""

import math
import socket
from collections import Counter

import dns.message
import pytest

from feddns.dns import weights
from tests.dns.tables import in_process, query

WT = "wt.prod.pol.svc.federation."  # weights a 3, b 1, c 0, d (none: 1)
SHARES = {"3.3.0.1": 0.6, "3.3.0.2": 0.2, "3.3.0.4": 0.2}
ANSWERS = 10_000


@pytest.mark.parametrize("weights_given", [[3, 1, 1], [1, 2, 5], [1, 1], [7, 3, 2, 1, 1], [100, 1]])
def test_the_table_gives_each_prefix_its_share_within_one_slot(weights_given):
    table = weights.order_table(weights_given)
    assert sum(count for _, count in table) == weights.SLOTS
    total = sum(weights_given)
    for first, weight in enumerate(weights_given):
        slots = sum(count for order, count in table if order[0] == first)
        assert abs(slots - weights.SLOTS * weight / total) < 1
        rest = [w for i, w in enumerate(weights_given) if i != first]
        for second, weight2 in enumerate(weights_given):
            if second == first:
                continue
            pair = sum(count for order, count in table if order[:2] == (first, second))
            assert abs(pair - slots * weight2 / sum(rest)) < 1 + len(rest)  # one slot per level of rounding


def first_shares(replies: list[dns.message.Message]) -> dict[str, float]:
    firsts = Counter(reply.answer[0][0].address for reply in replies)
    return {address: count / len(replies) for address, count in firsts.items()}


@pytest.mark.parametrize("tcp", [False, True], ids=["reply cache (udp)", "answer cache (tcp)"])
def test_weights_honoured_within_5_percent_in_process(policy_responder, tcp):
    weights.rng.seed(0xFEDD)
    ask = in_process(policy_responder, tcp)
    shares = first_shares([ask(WT, "A", None) for _ in range(ANSWERS)])
    assert shares.keys() == SHARES.keys()
    for address, expected in SHARES.items():
        assert abs(shares[address] - expected) <= 0.05 * expected, shares


def test_second_place_follows_the_weights_of_the_rest(policy_responder):
    weights.rng.seed(0xFEDD)
    ask = in_process(policy_responder, False)
    orders = [[rd.address for rd in ask(WT, "A", None).answer[0]] for _ in range(ANSWERS)]
    after_a = Counter(order[1] for order in orders if order[0] == "3.3.0.1")
    total = sum(after_a.values())
    for address in ("3.3.0.2", "3.3.0.4"):  # weights 1 and 1: half each
        assert abs(after_a[address] / total - 0.5) <= 0.05 * 0.5, after_a


def test_weights_honoured_by_the_real_server_over_udp(policy_server):
    """10,000 answers from the running server (the reply cache's random pick)."""
    wire = query(WT, "A", None).to_wire()
    replies = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.connect(("127.0.0.1", policy_server.port))
        for n in range(ANSWERS):
            sock.send(n.to_bytes(2, "big") + wire[2:])
            replies.append(dns.message.from_wire(sock.recv(4096)))
    shares = first_shares(replies)
    for address, expected in SHARES.items():
        bound = max(0.05 * expected, 5 * math.sqrt(expected * (1 - expected) / ANSWERS))
        assert abs(shares[address] - expected) <= bound, (shares, bound)
