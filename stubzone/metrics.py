"""Prometheus metrics of ``feddns stubzone``, on a registry of its own (docs/stubzone.md, "Logs and metrics").

Those of its connections are the listener's (:class:`feddns.https.ListenerMetrics`, namespace :data:`NAMESPACE`).
Served at ``--metrics HOST:PORT`` ``/metrics`` by :class:`feddns.observe.ObserveServer`.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge

NAMESPACE = "feddns_stubzone"


class StubzoneMetrics:
    """Every metric of the stub-zone endpoint."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, namespace=NAMESPACE, registry=registry)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, labels, namespace=NAMESPACE, registry=registry)

        self.requests = counter(
            "requests", "Stub-zone API requests answered, by method, route and HTTP status",
            ("method", "route", "status"),
        )
        self.tls_reloads = counter(
            "tls_reloads",
            "changes of --cert, --key or --client-ca seen on disk: ok = now in use, error = refused, old set kept",
            ("result",),
        )
        self.certificate_expiry = gauge(
            "tls_certificate_expiry_timestamp_seconds", "Unix time at which the server certificate in use expires"
        )
        self.path_ok = gauge(
            "path_ok", "1 when the last probe of _whoami.F.svc.ZONE named this cluster "
            "(by option 0xFEDD for a tagging backend), else 0; by federation (stubzone.probe)", ("federation",),
        )
        self.path_cluster = gauge(
            "path_cluster_info", "1 for the cluster and rule (by: option, ecs, source, none) that Federated-DNS "
            "named in the last probe of the federation's _whoami name", ("federation", "cluster", "by"),
        )
        self.path_target_found = gauge(
            "path_target_found", "1 when the last round of the path check had an address to ask (--probe-server, "
            "or the Service --probe-service names, found), 0 when none: nothing is probed then; flag: the one "
            "given, probe-server or probe-service (stubzone.probetarget)", ("flag",),
        )
        self.mirror_synced = gauge(
            "mirror_synced_timestamp_seconds", "Unix time at which --mirror-dir was last made equal to the "
            "endpoint's blocks in its ConfigMap (after a list or a watch event; stubzone.mirror)",
        )
        self.mirror_changes = counter(
            "mirror_changes", "Files of --mirror-dir changed: written (a block, atomically), removed (no longer "
            "in the ConfigMap), refused (a block that does not parse; the file it had stays)", ("change",),
        )
