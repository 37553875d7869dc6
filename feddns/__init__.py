"""feddns: federated DNS service discovery for Kubernetes cluster federations.

The ``feddns`` package holds what the three deployables share (the record model,
the etcd key layout, errors, command-line plumbing, the metrics endpoint) and the
Federated-DNS server itself (``feddns.dns``, ``feddns.store``, ``feddns.server``).
``controller`` and ``stubzone`` import from here, never from each other, and this
package never imports ``kubernetes`` or ``aiohttp`` (docs/architecture.md).
"""

__version__ = "0.1.0"
