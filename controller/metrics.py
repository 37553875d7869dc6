"""Prometheus metrics of the controller, on a registry of its own.

Served at ``--metrics HOST:PORT`` ``/metrics`` by :class:`feddns.observe.ObserveServer`.
``prometheus_client`` metrics are thread-safe, so the watch threads update them
directly.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge

NAMESPACE = "feddns_controller"


class Metrics:
    """Every metric of the controller; ``cluster``/``resource`` are label values.

    Declared as a table, two lines a metric: its name (after ``feddns_controller_``) and
    its label names separated by spaces (as ``collections.namedtuple`` takes field names),
    then its help text."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, labels: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels.split(), namespace=NAMESPACE, registry=registry)

        def counter(name: str, labels: str, doc: str) -> Counter:
            return Counter(name, doc, labels.split(), namespace=NAMESPACE, registry=registry)

        self.connected = gauge("cluster_connected", "cluster",
            "1 while every list/watch of the cluster is established")
        self.services = gauge("cluster_services", "cluster",
            "federated Services seen in the cluster")
        self.last_sync = gauge("cluster_last_sync_timestamp_seconds", "cluster",
            "Unix time of the last complete list of the cluster")
        self.watch_restarts = counter("watch_restarts", "cluster resource reason",
            "watches started again (reason: expired = 410 Gone, closed = server ended it, error)")
        self.list_failures = counter("cluster_list_failures", "cluster",
            "lists or watches that failed (cluster unreachable)")
        self.kept_shards = gauge("cluster_kept_shards", "cluster",
            "shards kept in etcd for a cluster that cannot be listed (last known state)")
        self.skipped = counter("skipped_services", "cluster reason",
            "federated Services that cannot be shards (reason: externalname, hostname-only, malformed, ...)")
        self.bad_annotations = counter("bad_policy_annotations", "cluster",
            "federated Services whose policy annotations are bad (written with the default policy)")
        self.policy_conflicts = counter("policy_conflicts", "",
            "federated services whose shards set different policies (written with the default policy)")
        self.trimmed = counter("trimmed_endpoints", "cluster",
            "headless shards with more ready endpoints than a record keeps (1,000): the rest left out")
        self.skipped_objects = counter("skipped_objects", "cluster resource",
            "API objects skipped for an unexpected shape")
        self.etcd_writes = counter("etcd_writes", "",
            "records put into etcd")
        self.etcd_deletes = counter("etcd_deletes", "",
            "records deleted from etcd")
        self.etcd_errors = counter("etcd_errors", "",
            "failed etcd calls (retried)")
        self.etcd_repairs = counter("etcd_repairs", "",
            "records put back after another writer changed or deleted them")
        self.stale = gauge("cluster_stale", "cluster",
            "1 while the cluster has been unreachable longer than its staleAfterSeconds (its record says stale)")
        self.leader = gauge("leader", "",
            "1 while this replica is the leader (the only writer)")
        self.lease_confirmed = gauge("lease_confirmed_timestamp_seconds", "",
            "Unix time at which the last keep-alive etcd confirmed was sent (the lease lasts leaseSeconds from then)")
        self.lease_seconds = gauge("lease_seconds", "",
            "leaseSeconds of the config: the TTL of the leader lease")
        self.resyncs = counter("resyncs", "",
            "full comparisons of etcd with the clusters")
        self.resync_period = gauge("resync_period_seconds", "",
            "resyncSeconds of the config: the period of resyncs")
        self.last_resync = gauge("last_resync_timestamp_seconds", "",
            "Unix time of the last full comparison done by this replica (0: none)")
        self.stubzone_synced = gauge("stubzone_synced", "cluster",
            "1 while the member's stub zone is known to forward to the nameservers")
        self.stubzone_last_success = gauge("stubzone_last_success_timestamp_seconds", "cluster",
            "Unix time of the last request to the member's stub-zone endpoint that succeeded (0: none)")
        self.stubzone_requests = counter("stubzone_requests", "cluster method",
            "requests sent to members' stub-zone endpoints by this replica")
        self.stubzone_errors = counter("stubzone_errors", "cluster kind",
            "failed requests to a stub-zone endpoint (kind: http-4xx, http-5xx, unreachable, tls, files, error)")
        self.nameservers = gauge("nameservers", "",
            "Federated-DNS's addresses known (0 while nameservers.fromService has none)")
        # The exported name keeps its published word "stale" (docs/operations.md, the alerts in deploy/);
        # in the code "stale" means only a cluster past its staleAfterSeconds.
        self.config_refused = gauge("config_file_stale", "",
            "1 while the config file on disk is not the one in use (it was refused: see the log)")
