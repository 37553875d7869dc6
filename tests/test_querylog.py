"""The query log of ``feddns serve --query-log`` (feddns.querylog): what a line holds, in text and
JSON, and the bound on lines a second with the count of those dropped."""

import json
import logging
import re
import time
from collections.abc import Iterator

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.rcode
import pytest
from prometheus_client import CollectorRegistry

from feddns.logs import JsonFormatter, TextFormatter
from feddns.querylog import DroppedCollector, QueryLog
from harness.ports import wait_until
from harness.serve import ServeProcess

CLUSTER_OPTION = 65245
QNAME = "web.prod.fed.svc.federation."


class Clock:
    """Seconds that move only when a test moves them."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lines() -> Iterator[list[logging.LogRecord]]:
    """The records the query log writes."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("feddns.querylog")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    yield records
    logger.removeHandler(handler)
    logger.level = level


def query(qname: str = QNAME, qtype: str = "A", cluster: str | None = None, edns: int = -1) -> dns.message.Message:
    options = [dns.edns.GenericOption(CLUSTER_OPTION, cluster.encode())] if cluster is not None else []
    if options and edns < 0:
        edns = 0
    return dns.message.make_query(qname, qtype, use_edns=edns, options=options)


def reply_to(asked: dns.message.Message, rcode: dns.rcode.Rcode = dns.rcode.NOERROR) -> bytes:
    answer = dns.message.make_response(asked)
    answer.set_rcode(rcode)
    return answer.to_wire()


def test_a_line_says_who_asked_what_for_which_cluster_and_what_came_back(lines):
    clock = Clock()
    log = QueryLog(10, CLUSTER_OPTION, clock)
    asked = query(cluster="foo")
    reply = reply_to(asked, dns.rcode.NXDOMAIN)
    clock.now += 0.000042
    log.record(asked.to_wire(), reply, "10.0.3.7", False, clock.now - 0.000042)
    (record,) = lines
    text = TextFormatter().format(record)
    assert text.endswith(f' INFO feddns.querylog: 10.0.3.7 udp {asked.id} "A IN {QNAME}" cluster=foo NXDOMAIN '
                         f"{len(reply)} 0.000042s"), text
    fields = json.loads(JsonFormatter().format(record))
    assert {key: fields[key] for key in ("client", "proto", "id", "qtype", "qname", "cluster", "rcode",
                                         "reply_bytes", "duration_seconds")} == {
        "client": "10.0.3.7", "proto": "udp", "id": asked.id, "qtype": "A", "qname": QNAME, "cluster": "foo",
        "rcode": "NXDOMAIN", "reply_bytes": len(reply), "duration_seconds": 0.000042}


@pytest.mark.parametrize("cluster,expected,shown", [
    (None, None, "cluster=-"),  # no option: no source cluster
    ("Foo", "Foo", "cluster=Foo"),
    ('foo" 1.2.3.4', None, "cluster=-"),  # not a cluster name: not written as it came
])
def test_the_cluster_is_the_option_s_name_or_none(lines, cluster, expected, shown):
    asked = query(cluster=cluster)
    QueryLog(10, CLUSTER_OPTION).record(asked.to_wire(), reply_to(asked), "::1", True, 0.0)
    (record,) = lines
    assert record.cluster == expected  # type: ignore[attr-defined]
    assert shown in record.getMessage() and " tcp " in record.getMessage()


def test_another_option_code_is_read_when_configured(lines):
    options = [dns.edns.GenericOption(65000, b"bar")]
    asked = dns.message.make_query(QNAME, "AAAA", use_edns=0, options=options)
    QueryLog(10, 65000).record(asked.to_wire(), reply_to(asked), "127.0.0.1", False, 0.0)
    assert lines[0].cluster == "bar" and lines[0].qtype == "AAAA"  # type: ignore[attr-defined]


def test_badvers_is_read_from_the_opt_record(lines):
    asked = query(edns=1)
    answer = dns.message.make_response(asked)
    answer.use_edns(0)
    answer.set_rcode(dns.rcode.BADVERS)
    QueryLog(10, CLUSTER_OPTION).record(asked.to_wire(), answer.to_wire(), "127.0.0.1", False, 0.0)
    assert lines[0].rcode == "BADVERS"  # type: ignore[attr-defined]


def test_a_query_that_does_not_parse_is_logged_with_dashes(lines):
    garbage = b"\x12\x34" + b"\x00" * 4 + b"\xff" * 20
    formerr = b"\x12\x34\x80\x01" + b"\x00" * 8
    QueryLog(10, CLUSTER_OPTION).record(garbage, formerr, "127.0.0.1", False, 0.0)
    (record,) = lines
    assert (record.id, record.qname, record.qtype, record.rcode) == (0x1234, "-", "-", "FORMERR")  # type: ignore[attr-defined]
    json.loads(JsonFormatter().format(record))


def test_a_qname_with_quotes_and_newlines_stays_on_one_line(lines):
    asked = dns.message.make_query(dns.name.Name([b'a"b\nc', b"federation", b""]), "A")
    QueryLog(10, CLUSTER_OPTION).record(asked.to_wire(), reply_to(asked), "127.0.0.1", False, 0.0)
    text = TextFormatter().format(lines[0])
    assert "\n" not in text and '"A IN a\\"b\\010c.federation."' in text, text


def dropped_total(log: QueryLog) -> float | None:
    registry = CollectorRegistry()
    registry.register(DroppedCollector(log))
    return registry.get_sample_value("feddns_query_log_dropped_total")


def test_at_most_rate_lines_a_second_and_the_rest_counted_and_told_once_a_second(lines):
    clock = Clock()
    log = QueryLog(3, CLUSTER_OPTION, clock)
    asked = query()
    wire, reply = asked.to_wire(), reply_to(asked)
    for _ in range(10):
        log.record(wire, reply, "127.0.0.1", False, clock.now)
    assert len(lines) == 3 and dropped_total(log) == 7
    log.roll(clock.now + 0.5)  # the second is not over: nothing told yet
    assert len(lines) == 3
    clock.now += 1.0
    log.roll(clock.now)  # serve's once-a-second call, with no query coming
    told = lines[3]
    assert told.levelno == logging.WARNING and told.dropped == 7  # type: ignore[attr-defined]
    assert told.getMessage() == "query log: 7 queries not logged in the last second (--query-log-rate 3)"
    log.roll(clock.now + 1.0)  # nothing dropped since: nothing told
    clock.now += 2.0
    for _ in range(5):
        log.record(wire, reply, "127.0.0.1", False, clock.now)
    assert len(lines) == 7 and dropped_total(log) == 9  # 3 more lines, 2 more dropped
    clock.now += 1.0
    log.record(wire, reply, "127.0.0.1", False, clock.now)  # a query in the next second tells them too
    assert lines[7].dropped == 2 and lines[8].levelno == logging.INFO  # type: ignore[attr-defined]


def test_a_rate_below_one_is_refused():
    with pytest.raises(ValueError, match="not at least 1"):
        QueryLog(0, CLUSTER_OPTION)


def test_the_counter_is_exported_without_a_query_log_too():
    registry = CollectorRegistry()
    registry.register(DroppedCollector(None))
    assert registry.get_sample_value("feddns_query_log_dropped_total") == 0


EXAMPLE_QNAME = "myservice.myns.myfederation.svc.federation."
"""A service of the built-in example federation (``feddns serve --example``)."""


@pytest.mark.parametrize("workers", [1, 2])
def test_a_real_server_logs_every_reply_over_udp_and_tcp_kept_or_not(workers):
    """The lines come from the answer path as deployed: a first UDP query (answered by the
    responder), the same again (a kept reply, the cache's own handler), one in another letter
    case, one over TCP, each a line with the cluster of its EDNS0 option and its rcode."""
    with ServeProcess(example=True, workers=workers, extra_args=["--query-log"]) as serve:
        asked = [
            serve.query(EXAMPLE_QNAME, cluster="foo"),
            serve.query(EXAMPLE_QNAME, cluster="foo"),
            serve.query(EXAMPLE_QNAME, cluster="foo"),
            serve.query(EXAMPLE_QNAME.upper(), cluster="foo"),
            serve.query("nosuch.myns.myfederation.svc.federation.", "AAAA", cluster="bar", tcp=True),
        ]
        wait_until(lambda: len(_query_lines(serve.log)) >= len(asked), what="a line per query")
    lines = _query_lines(serve.log)
    in_order = sorted if workers > 1 else list  # two processes' lines reach stderr in either order
    assert in_order(line.split(" ", 1)[1] for line in lines) == in_order([
        f'udp {asked[0].id} "A IN {EXAMPLE_QNAME}" cluster=foo NOERROR',
        f'udp {asked[1].id} "A IN {EXAMPLE_QNAME}" cluster=foo NOERROR',
        f'udp {asked[2].id} "A IN {EXAMPLE_QNAME}" cluster=foo NOERROR',
        f'udp {asked[3].id} "A IN {EXAMPLE_QNAME.upper()}" cluster=foo NOERROR',
        f'tcp {asked[4].id} "AAAA IN nosuch.myns.myfederation.svc.federation." cluster=bar NXDOMAIN',
    ])


def test_a_flood_writes_at_most_the_rate_and_counts_the_rest():
    with ServeProcess(example=True, extra_args=["--query-log", "--query-log-rate", "5", "--metrics",
                                                "127.0.0.1:0"]) as serve:
        started = time.monotonic()
        for _ in range(200):
            serve.query(EXAMPLE_QNAME, cluster="foo")
        seconds = time.monotonic() - started
        wait_until(lambda: serve.metrics().get("feddns_query_log_dropped_total", 0) > 0, what="drops counted")
        written = len(_query_lines(serve.log))
        assert written <= 5 * (int(seconds) + 2), (written, seconds)
        assert written + serve.metrics()["feddns_query_log_dropped_total"] == 200
        wait_until(lambda: "queries not logged in the last second (--query-log-rate 5)" in serve.log,
                   what="the drops told")


def _query_lines(log: str) -> list[str]:
    """The query log's lines, from the client's address on, without the time, level and logger."""
    found = (re.search(r"feddns\.querylog(?: \(worker \d+\))?: (127\.0\.0\.1 .*)", line) for line in log.splitlines())
    return [match.group(1).rsplit(" ", 2)[0] for match in found if match]
