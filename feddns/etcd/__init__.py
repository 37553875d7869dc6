"""Reaching etcd from every component, with ``aetcd``, the maintained asyncio fork of ``etcd3``.

``etcd3`` (named in the design card) no longer imports with current protobuf and
has had no release since 2020; ``aetcd`` keeps its API (docs/choices.md).

Security, the same in every component (docs/reference.md section 6, "Reaching
etcd"), with etcdctl's names: ``https://`` endpoints, the CA that signed etcd's
server certificate and a client certificate and key; a user whose password comes
from a file or the environment, never from argv or a URL.

One job per module, each importing only those above it in this list:

* :mod:`feddns.etcd.failures`: what an etcd failure means (authentication, TLS,
  no leader, unreachable) and one line saying so;
* :mod:`feddns.etcd.credentials`: the TLS files and the user's password, read
  when a client is made;
* :mod:`feddns.etcd.urls`: one ``--etcd`` URL parsed (:class:`~feddns.etcd.urls.EtcdURL`);
* :mod:`feddns.etcd.flags`: the ``--etcd-*`` flags of ``feddns serve`` and ``feddns stubzone``;
* :mod:`feddns.etcd.client`: aetcd's client with TLS, a leader required and
  feddns's errors (:class:`~feddns.etcd.client.EtcdClient`); imports aetcd and gRPC;
* :mod:`feddns.etcd.endpoints`: the URLs of one cluster tried in turn, a client
  for the current one, and reconnecting when the credential files change.

aetcd and gRPC (about 70 ms to import) are imported with :mod:`feddns.etcd.client`
only: ``feddns stubzone --backend skydns`` speaks etcd's v2 HTTP API with the
flags, files and endpoints of this package and never needs them.
"""
