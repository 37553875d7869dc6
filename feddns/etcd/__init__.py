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

# -- the names of the module this package replaced, until their last importers are updated ----------
# Files that were being edited when the package was made (feddns/serve.py, stubzone/cli.py,
# controller/sync.py, controller/config.py) still import these; nothing new may use them.

import importlib
from typing import Any

_MOVED = {
    "Access": ("credentials", "Access"), "TLSFiles": ("credentials", "TLSFiles"),
    "PASSWORD_ENV": ("credentials", "PASSWORD_ENV"), "Endpoints": ("endpoints", "EtcdEndpoints"),
    "unless_stale": ("endpoints", "unless_changed"), "describe": ("failures", "describe"),
    "failure_kind": ("failures", "failure_kind"), "cancelled_by_client": ("failures", "cancelled_by_client"),
    "close_quietly": ("client", "close_quietly"), "prefix_range_end": ("client", "prefix_range_end"),
    "add_arguments": ("flags", "add_arguments"), "access_from": ("flags", "access_from"),
    "EtcdURL": ("urls", "EtcdURL"), "parse_etcd_url": ("urls", "parse_etcd_url"),
}


def __getattr__(name: str) -> Any:
    if name == "EtcdError":
        return importlib.import_module("feddns.errors").EtcdError
    if name not in _MOVED:
        raise AttributeError(f"module 'feddns.etcd' has no attribute {name!r}")
    module, attribute = _MOVED[name]
    return getattr(importlib.import_module(f"feddns.etcd.{module}"), attribute)
