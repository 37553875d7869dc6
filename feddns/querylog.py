"""The query log of ``feddns serve --query-log``: one line per answered query, as CoreDNS's ``log`` plugin.

A line says who asked (address, UDP or TCP), the query's ID, qtype and qname, the source
cluster the EDNS0 cluster option named (docs/reference.md section 3; ``-`` without one), the
rcode, the reply's size in bytes and the time from the query's arrival to its reply in
seconds, with CoreDNS's ``s`` suffix::

    10.0.3.7 udp 4660 "A IN web.prod.fed.svc.federation." cluster=foo NOERROR 61 0.000042s

In JSON (``--log-format json``) the same values are fields of the line: ``client``,
``proto``, ``id``, ``qtype``, ``qname``, ``cluster`` (``null`` without one), ``rcode``,
``reply_bytes`` and ``duration_seconds``.

It is bounded: at most ``rate`` lines a second (``--query-log-rate``); the queries past it
are not logged but counted, the count logged once a second while it is not zero, and added
up in ``feddns_query_log_dropped_total``. A flood of queries then writes at most ``rate``
lines a second and one more.

The answer path calls :meth:`QueryLog.record` only when the log is on (``feddns serve`` holds
``None`` otherwise): a query costs it a clock reading, a comparison and, under the rate, the
parse of the query with dnspython. The query is parsed here, not in the answer path: only the
queries that are logged pay for it.
"""

import logging
import time
from collections.abc import Callable, Iterator

import dns.message
import dns.rcode
import dns.rdatatype
from prometheus_client.metrics_core import CounterMetricFamily
from prometheus_client.registry import Collector

from feddns import names

log = logging.getLogger("feddns.querylog")

DEFAULT_RATE = 1000
"""Lines a second at most, by default (``--query-log-rate``)."""

WINDOW_SECONDS = 1.0
"""The period over which ``rate`` lines are let through, and dropped lines are reported."""

_HEADER_BYTES = 12
_RCODE_MASK = 0x000F


class QueryLog:
    """Logs answered queries at most ``rate`` a second (``rate`` at least 1); ``option_code`` is the
    EDNS0 option that carries the asking cluster's name (``--cluster-option-code``). ``clock`` gives
    seconds (``time.monotonic``; the answer path's ``started`` must come from the same clock)."""

    def __init__(self, rate: int, option_code: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate < 1:
            raise ValueError(f"a query log rate of {rate} lines a second is not at least 1")
        self.rate = rate
        self.option_code = option_code
        self.clock = clock
        self.dropped_total = 0
        """Queries answered but not logged, since the start (``feddns_query_log_dropped_total``)."""
        self._window_end = 0.0
        self._lines = 0
        self._dropped = 0

    def record(self, query: bytes, reply: bytes, client: str, tcp: bool, started: float) -> None:
        """Log the answer ``reply`` (bytes as sent) to ``query`` (bytes as received) from ``client``
        (its address), over TCP when ``tcp``, received at ``started`` seconds of :attr:`clock`;
        or count it as dropped when this second's ``rate`` lines are written. Never raises for
        what the packets hold."""
        now = self.clock()
        if now >= self._window_end:
            self.roll(now)
        if self._lines >= self.rate:
            self._dropped += 1
            self.dropped_total += 1
            return
        self._lines += 1
        fields = describe(query, reply, self.option_code)
        fields.update(client=client, proto="tcp" if tcp else "udp", duration_seconds=round(now - started, 6))
        log.info("%s %s %s \"%s IN %s\" cluster=%s %s %d %.6fs", client, fields["proto"], fields["id"],
                 fields["qtype"], fields["qname"], fields["cluster"] or "-", fields["rcode"],
                 fields["reply_bytes"], fields["duration_seconds"], extra=fields)

    def roll(self, now: float) -> None:
        """Start a new second at ``now`` when the last one is over, logging the queries it dropped, if any.
        The answer path rolls on a query; ``feddns serve`` also calls this every second, so that the last
        drops of a flood are told when the queries stop."""
        if now < self._window_end:
            return
        if self._dropped:
            log.warning("query log: %d queries not logged in the last second (--query-log-rate %d)",
                        self._dropped, self.rate, extra={"dropped": self._dropped})
        self._window_end = now + WINDOW_SECONDS
        self._lines = 0
        self._dropped = 0


class DroppedCollector(Collector):
    """``feddns_query_log_dropped_total`` for a Prometheus registry: :attr:`QueryLog.dropped_total` of
    ``query_log``, 0 without one (``feddns serve`` exports it with or without ``--query-log``)."""

    def __init__(self, query_log: QueryLog | None) -> None:
        self.query_log = query_log

    def collect(self) -> Iterator[CounterMetricFamily]:
        dropped = self.query_log.dropped_total if self.query_log is not None else 0
        yield CounterMetricFamily("feddns_query_log_dropped", "Answered queries the query log did not write, "
                                  "over --query-log-rate lines a second.", value=dropped)


def describe(query: bytes, reply: bytes, option_code: int) -> dict[str, object]:
    """The fields of a line: ``id``, ``qname`` and ``qtype`` (``-`` when the query cannot be parsed: it was
    answered FORMERR), ``cluster`` (the option's name when it is a DNS label, else ``None``), ``rcode``
    (its mnemonic) and ``reply_bytes``."""
    rcode = reply[3] & _RCODE_MASK if len(reply) >= _HEADER_BYTES else None
    fields: dict[str, object] = {"id": int.from_bytes(query[:2], "big") if len(query) >= 2 else "-",  # noqa: PLR2004
                                 "qname": "-", "qtype": "-", "cluster": None, "rcode": "-", "reply_bytes": len(reply)}
    try:
        message = dns.message.from_wire(query, ignore_trailing=True)
    except Exception:  # noqa: BLE001 - whatever the packet holds, the answer path goes on
        message = None
    if message is not None:
        if message.question:
            question = message.question[0]
            fields.update(qname=question.name.to_text(), qtype=dns.rdatatype.to_text(question.rdtype))
        fields["cluster"] = next((_cluster(option.to_wire()) for option in message.options
                                  if option.otype == option_code), None)
        if rcode == 0 and message.edns > 0:
            rcode = _extended_rcode(reply)
    if rcode is not None:
        fields["rcode"] = dns.rcode.to_text(dns.rcode.Rcode(rcode))
    return fields


def _cluster(data: bytes) -> str | None:
    """The cluster name an option carries, when it is one (an unknown name is no source cluster; anything
    else is not written to the log as is)."""
    text = data.decode("ascii", "replace")
    return text if names.is_label(text.lower()) else None


def _extended_rcode(reply: bytes) -> int:
    """The rcode with the OPT's upper 8 bits, for a reply to a query of EDNS version over 0: BADVERS
    (RFC 6891 6.1.3) has 0 in the header. Read by dnspython, only then."""
    try:
        return int(dns.message.from_wire(reply, ignore_trailing=True).rcode())
    except Exception:  # noqa: BLE001 - as for the query
        return reply[3] & _RCODE_MASK
