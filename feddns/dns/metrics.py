"""Prometheus metrics of Federated-DNS, read at scrape time.

The query path only increments plain integers (the hit count of a cache
entry, ``Stats``); this collector sums them when ``/metrics`` is scraped, so
counting costs the query path no lock and no call into ``prometheus_client``.
Every label takes a bounded set of values: qtype is one of the types the
server knows or ``other``, rcode one of the rcodes it sends, source_cluster one
of the first :data:`MATRIX_CLUSTERS` clusters the records name (by name), or
``other`` past them, or ``unknown``.
"""

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from feddns.dns.cache import FirstTier, Reply
from feddns.dns.responder import Responder

MATRIX_CLUSTERS = 100
"""The source clusters the locality matrix names at most (the first by name of those the
records know); answers asked from the others are counted as ``source_cluster="other"``."""

TIERS = ("own", "zone", "region", "other", "none")
"""The ``tier`` label's values, each exported (0 until counted) for every source cluster named."""


class ServeCollector(Collector):
    """``feddns_dns_*`` and ``feddns_records_*`` metrics (names in docs/operations.md).

    ``restarts`` and ``skipped`` are callables returning the store's counts of
    watch restarts and invalid records skipped.
    """

    def __init__(self, responder: Responder, restarts: Callable[[], int], skipped: Callable[[], int],
                 tcp: Callable[[], tuple[int, int]] = lambda: (0, 0)) -> None:
        self.responder = responder
        self.restarts = restarts
        self.skipped = skipped
        self.tcp = tcp

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        responder = self.responder
        totals: Counter[tuple[str, str, str]] = Counter(dict(responder.stats.answered))  # dict(): one C call, atomic
        firsts: Counter[FirstTier] = Counter(dict(responder.stats.first_tiers))
        cache = responder.cache.store
        entries = list(cache.entries())
        replies = 0
        for entry in entries:
            totals[entry.labels] += entry.hits
            replies += isinstance(entry, Reply)
            if entry.first is not None:
                firsts[entry.first] += entry.hits
        for template in responder.counted_templates():
            if template.hits:
                totals[template.labels] += template.hits
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
        yield self._matrix(firsts)
        yield CounterMetricFamily("feddns_dns_answers_none_ready",
                                  "Answers to a service's name given while none of its shards was ready: every "
                                  "shard answered as if it were (fail open; --none-ready)",
                                  value=sum(hits for (_, _, fail_open), hits in firsts.items() if fail_open))
        yield CounterMetricFamily("feddns_dns_dropped", "Packets dropped (shorter than a header, or responses)",
                                  value=responder.stats.dropped)
        yield CounterMetricFamily("feddns_dns_replies_unsent",
                                  "UDP replies the kernel would not take (send buffer full, or the address refused)",
                                  value=responder.stats.unsent)
        kinds = GaugeMetricFamily("feddns_dns_cache_entries", "Entries in the cache, by kind", labels=["kind"])
        kinds.add_metric(["reply"], replies)
        kinds.add_metric(["answer"], len(entries) - replies)
        yield kinds
        yield GaugeMetricFamily("feddns_dns_cache_bytes", "Bytes held by the cache (as it counts them)",
                                value=cache.used)
        yield GaugeMetricFamily("feddns_dns_cache_limit_bytes", "The cache's bound in bytes (--cache-size)",
                                value=cache.limit)
        yield CounterMetricFamily("feddns_dns_cache_evictions", "Cache entries evicted for room",
                                  value=cache.evictions)
        open_connections, refused = self.tcp()
        yield GaugeMetricFamily("feddns_dns_tcp_connections", "Open DNS-over-TCP connections",
                                value=open_connections)
        yield CounterMetricFamily("feddns_dns_tcp_refused",
                                  "TCP connections closed at once: over --max-tcp-connections", value=refused)
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

    def _matrix(self, firsts: Counter[FirstTier]) -> CounterMetricFamily:
        """``feddns_dns_answers_first_tier_total{source_cluster, tier}`` from the hits by
        ``(asking cluster, tier)``: a cluster the records no longer name is ``unknown``, one
        past the first :data:`MATRIX_CLUSTERS` by name ``other``."""
        known = {name.decode() for fed in self.responder.index.federations.values() for name in fed.known}
        named = set(sorted(known)[:MATRIX_CLUSTERS])
        counts: Counter[tuple[str, str]] = Counter()
        for (cluster, rank, _), hits in firsts.items():
            label = cluster if cluster in named else "other" if cluster in known else "unknown"
            counts[(label, rank)] += hits
        family = CounterMetricFamily("feddns_dns_answers_first_tier",
                                     "Answers to a service's name by asking cluster and the tier of their first "
                                     "records (own, zone, region, other; none: no record)",
                                     labels=["source_cluster", "tier"])
        for cluster in sorted({*named, *(label for label, _ in counts)}):
            for rank in TIERS:
                family.add_metric([cluster, rank], counts[(cluster, rank)])
        return family
