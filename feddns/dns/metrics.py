"""Prometheus metrics of Federated-DNS, read at scrape time.

The query path only increments plain integers (``Entry.hits``, ``Stats``);
this collector sums them when ``/metrics`` is scraped, so counting costs the
query path no lock and no call into ``prometheus_client``.
"""

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from feddns.dns.responder import Responder


class ServeCollector(Collector):
    """``feddns_dns_*`` and ``feddns_records_*`` metrics (names in docs/operations.md).

    ``restarts`` and ``skipped`` are callables returning the store's counts of
    watch restarts and invalid records skipped.
    """

    def __init__(self, responder: Responder, restarts: Callable[[], int], skipped: Callable[[], int]) -> None:
        self.responder = responder
        self.restarts = restarts
        self.skipped = skipped

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        responder = self.responder
        totals: Counter[tuple[str, str, str]] = Counter(responder.stats.answered)
        entries = 0
        for entry in responder.entries():
            totals[entry.labels] += entry.hits
            entries += 1
        queries = CounterMetricFamily("feddns_dns_queries", "DNS queries answered, by qtype and rcode",
                                      labels=["qtype", "rcode"])
        sources = CounterMetricFamily("feddns_dns_answers", "Answers by whether the source cluster was found",
                                      labels=["source"])
        by_type: Counter[tuple[str, str]] = Counter()
        by_source: Counter[str] = Counter({"cluster": 0, "none": 0})
        for (qtype, rcode, source), count in totals.items():
            by_type[(qtype, rcode)] += count
            by_source[source] += count
        for labels, count in sorted(by_type.items()):
            queries.add_metric(list(labels), count)
        for source, count in sorted(by_source.items()):
            sources.add_metric([source], count)
        yield queries
        yield sources
        yield CounterMetricFamily("feddns_dns_dropped", "Packets dropped (shorter than a header, or responses)",
                                  value=responder.stats.dropped)
        yield GaugeMetricFamily("feddns_dns_cached_replies", "Replies in the reply cache", value=entries)
        yield GaugeMetricFamily("feddns_records_loaded", "Valid records in the index", value=len(responder.index))
        yield GaugeMetricFamily("feddns_records_invalid", "Keys whose key or value does not parse",
                                value=len(responder.index.invalid))
        yield CounterMetricFamily("feddns_records_skipped", "Invalid records skipped", value=self.skipped())
        yield CounterMetricFamily("feddns_etcd_watch_restarts",
                                  "Broken etcd watches, failed loads and failed reloads", value=self.restarts())
        yield GaugeMetricFamily("feddns_ready", "1 once the first load of records is done",
                                value=int(responder.ready))
        yield GaugeMetricFamily("feddns_records_revision", "etcd revision of the newest record applied",
                                value=responder.index.revision)
