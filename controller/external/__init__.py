"""Publishing federated services' load-balancer IPs to a DNS provider (external clients).

Design doc "External Clients": for a federated Service of type LoadBalancer the
controller also programs the federation's registered domain, so that
``<svc>.<ns>.<federation>.svc.<zone>`` answers the externalIPs of every healthy
shard. The package, from the config to the wire:

- ``config``: :class:`ExternalConfig` and :func:`parse_external_config`, the
  ``external`` section of docs/reference.md section 7.
- ``provider``: the seam to a DNS provider, :class:`Provider` (read the names in
  the zone, look one up, apply one conditional change), and its errors.
  ``rfc2136`` implements it with RFC 2136 updates signed with TSIG (RFC 8945);
  ``dnsendpoint`` with ExternalDNS's ``DNSEndpoint`` objects in one member
  cluster, which ExternalDNS publishes to any of its providers.
- ``publisher``: :class:`ExternalPublisher`, the reconciliation; ``metrics``: its
  Prometheus metrics. The caller hands it the full desired
  state; a task of its own sends one change per service whose RRsets differ
  from what it last saw on the server, and retries failures with exponential
  backoff, so a down provider never blocks the caller.

Ownership, as ExternalDNS does it: every name the publisher creates carries a TXT
record ``heritage=feddns,feddns/federation=F,feddns/service=ns/svc`` (the
"marker"). A name is touched only when its TXT RRset holds that exact marker, and
the provider makes each change conditional on what the publisher believes is
there (the name absent, or its TXT RRset unchanged), so a record someone else
created, even a moment ago, is never overwritten. At resync the publisher
reads the zone back and deletes the owned names nobody wants any more.

What is published (docs/external-dns.md): the ``status.loadBalancer.ingress``
IPs of the ready shards. When no shard is ready, the caller names the service
``unready`` with the load-balancer IPs it still has, and the name keeps them,
marked with a second TXT string :data:`UNREADY_MARK` (a label on a DNSEndpoint):
a public resolver then gets addresses, never an NXDOMAIN it would cache while
Federated-DNS answers NODATA. A name goes only when its service is gone.
"""

from controller.external.config import ExternalConfig, parse_external_config
from controller.external.provider import UNREADY_MARK, marker
from controller.external.publisher import ExternalPublisher

__all__ = [
    "UNREADY_MARK",
    "ExternalConfig",
    "ExternalPublisher",
    "marker",
    "parse_external_config",
]
