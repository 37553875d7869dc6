"""The stub-zone endpoint next to a member cluster's DNS (design doc "Initial Setup").

The federation control plane POSTs Federated-DNS's addresses to this HTTPS
server; it programs the cluster's DNS to forward the federation's stub
domain there (docs/reference.md section 5). Modules:

* :mod:`stubzone.pki` and :mod:`stubzone.certs`: ``feddns certs``, a small CA;
* :mod:`stubzone.tls`: the server TLS context, refused handshakes logged;
* :mod:`stubzone.auth`: client identities and the ``--allow`` list;
* :mod:`stubzone.model`: nameservers, stub zones, the stub-domain naming rule;
* :mod:`stubzone.backends`: the ``Backend`` Protocol and one module per
  cluster DNS (coredns, kube-dns, skydns, unbound), imported on demand;
* :mod:`stubzone.app`: the aiohttp routes and their error rules;
* :mod:`stubzone.cli`: ``feddns stubzone``.

This package imports from :mod:`feddns`, never from ``controller``.
"""
