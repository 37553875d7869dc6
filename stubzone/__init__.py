"""The stub-zone endpoint of a cluster's DNS pod (design doc "Initial Setup").

The federation control plane POSTs Federated-DNS's addresses to this HTTPS
server; it programs the cluster's SkyDNS to forward the federation's stub
domain there (CONTRACTS 5). Modules:

* :mod:`stubzone.pki` and :mod:`stubzone.certs`: ``feddns certs``, a small CA;
* :mod:`stubzone.tls`: the server TLS context, refused handshakes logged;
* :mod:`stubzone.auth`: client identities and the ``--allow`` list;
* :mod:`stubzone.skydns`: the SkyDNS stub keys in the cluster's etcd;
* :mod:`stubzone.app`: the aiohttp routes and their error rules;
* :mod:`stubzone.cli`: ``feddns stubzone``.

This package imports from :mod:`feddns`, never from ``controller``.
"""
