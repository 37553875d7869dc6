"""Prometheus metrics of the controller, on a registry of its own.

Served at ``--metrics HOST:PORT`` ``/metrics`` by :class:`feddns.observe.ObserveServer`.
``prometheus_client`` metrics are thread-safe, so the watch threads update them
directly.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge

NAMESPACE = "feddns_controller"


class Metrics:
    """Every metric of the controller; ``cluster``/``resource`` are label values."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, labels, namespace=NAMESPACE, registry=registry)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, namespace=NAMESPACE, registry=registry)

        self.connected = gauge(
            "cluster_connected", "1 while every list/watch of the cluster is established", ("cluster",)
        )
        self.services = gauge("cluster_services", "federated Services seen in the cluster", ("cluster",))
        self.last_sync = gauge(
            "cluster_last_sync_timestamp_seconds",
            "Unix time of the last complete list of the cluster",
            ("cluster",),
        )
        self.watch_restarts = counter(
            "watch_restarts",
            "watches started again (reason: expired = 410 Gone, closed = server ended it, error)",
            ("cluster", "resource", "reason"),
        )
        self.list_failures = counter(
            "cluster_list_failures", "lists or watches that failed (cluster unreachable)", ("cluster",)
        )
        self.kept_shards = gauge(
            "cluster_kept_shards",
            "shards kept in etcd for a cluster that cannot be listed (last known state)",
            ("cluster",),
        )
        self.skipped = counter(
            "skipped_services",
            "federated Services that cannot be shards (reason: externalname, hostname-only, malformed, ...)",
            ("cluster", "reason"),
        )
        self.bad_annotations = counter(
            "bad_policy_annotations",
            "federated Services whose policy annotations are bad (written with the default policy)",
            ("cluster",),
        )
        self.policy_conflicts = counter(
            "policy_conflicts",
            "federated services whose shards set different policies (written with the default policy)",
        )
        self.trimmed = counter(
            "trimmed_endpoints",
            "headless shards with more ready endpoints than a record keeps (1,000): the rest left out",
            ("cluster",),
        )
        self.skipped_objects = counter(
            "skipped_objects", "API objects skipped for an unexpected shape", ("cluster", "resource")
        )
        self.etcd_writes = counter("etcd_writes", "records put into etcd")
        self.etcd_deletes = counter("etcd_deletes", "records deleted from etcd")
        self.etcd_errors = counter("etcd_errors", "failed etcd calls (retried)")
        self.etcd_repairs = counter("etcd_repairs", "records put back after another writer changed or deleted them")
        self.stale = gauge(
            "cluster_stale",
            "1 while the cluster has been unreachable longer than its staleAfterSeconds (its record says stale)",
            ("cluster",),
        )
        self.leader = gauge("leader", "1 while this replica is the leader (the only writer)")
        self.lease_confirmed = gauge(
            "lease_confirmed_timestamp_seconds",
            "Unix time at which the last keep-alive etcd confirmed was sent (the lease lasts leaseSeconds from then)",
        )
        self.lease_seconds = gauge("lease_seconds", "leaseSeconds of the config: the TTL of the leader lease")
        self.resyncs = counter("resyncs", "full comparisons of etcd with the clusters")
        self.resync_period = gauge("resync_period_seconds", "resyncSeconds of the config: the period of resyncs")
        self.last_resync = gauge(
            "last_resync_timestamp_seconds", "Unix time of the last full comparison done by this replica (0: none)"
        )
        self.stubzone_synced = gauge(
            "stubzone_synced", "1 while the member's stub zone is known to forward to the nameservers", ("cluster",)
        )
        self.stubzone_last_success = gauge(
            "stubzone_last_success_timestamp_seconds",
            "Unix time of the last request to the member's stub-zone endpoint that succeeded (0: none)",
            ("cluster",),
        )
        self.stubzone_requests = counter(
            "stubzone_requests", "requests sent to members' stub-zone endpoints by this replica", ("cluster", "method")
        )
        self.stubzone_errors = counter(
            "stubzone_errors",
            "failed requests to a stub-zone endpoint (kind: http-4xx, http-5xx, unreachable, tls, files, error)",
            ("cluster", "kind"),
        )
        self.nameservers = gauge(
            "nameservers", "Federated-DNS's addresses known (0 while nameservers.fromService has none)"
        )
        self.config_stale = gauge(
            "config_file_stale",
            "1 while the config file on disk is not the one in use (it was refused: see the log)",
        )

