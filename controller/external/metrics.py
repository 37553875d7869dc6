"""The external DNS publisher's Prometheus metrics (docs/reference.md lists them)."""

from prometheus_client import CollectorRegistry, Counter, Gauge

FAILURE_REASONS = "timeout, unreachable, refused, notauth, badsig, badkey, prerequisite, axfr-refused..."
"""The ``reason`` label values of ``feddns_external_failures``, as its help text names them."""


class PublisherMetrics:
    """The publisher's counters and gauges, registered on the registry given."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, documentation: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, documentation, labels, registry=registry)

        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(name, documentation, registry=registry)

        self.updates = counter("feddns_external_updates", "Changes (one per service) the DNS provider accepted.")
        self.failures = counter(
            "feddns_external_failures", f"Requests to the DNS provider that failed, by reason ({FAILURE_REASONS}).",
            ("reason",))
        self.retries = counter("feddns_external_retries", "Passes retried after a backoff because a request failed.")
        self.zone_reads = counter(
            "feddns_external_zone_reads", "Zone reads (AXFR) at resync that found the owned names.")
        self.owned = gauge("feddns_external_owned_names", "Names in the zone carrying this federation's ownership TXT.")
        self.pending = gauge(
            "feddns_external_pending_names", "Owned or wanted names whose RRsets differ from the desired state.")
        # The metric keeps the published word "stale" (the mark it counts is feddns/stale=true).
        self.unready = gauge(
            "feddns_external_stale_names", "Owned names kept with their last addresses, marked stale: no shard ready.")
        self.conflicts = gauge(
            "feddns_external_conflicting_names", "Wanted names that exist without our ownership TXT (left alone).")
