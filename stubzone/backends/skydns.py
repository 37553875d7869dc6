"""``--backend skydns``: SkyDNS stub keys in its etcd (docs/stubzone.md), v2 or v3 API.

This module only makes the backend from the flags; the stub-domain keys and
values are :mod:`stubzone.backends.skydns_layout`'s, the v2 store (plain HTTP,
aiohttp) :mod:`stubzone.backends.skydns_etcd2`'s and the v3 store (gRPC, aetcd)
:mod:`stubzone.backends.skydns_etcd3`'s. Each store is imported only when
chosen, so ``--skydns-etcd-api v3`` loads no aiohttp client and v2 no gRPC.
"""

import argparse

import feddns.etcd.endpoints
import feddns.etcd.flags
from feddns.errors import ConfigError
from stubzone.backends import Backend
from stubzone.backends.skydns_layout import SkyDNSLayout
from stubzone.model import StubDomains

DEFAULT_ETCD = "http://127.0.0.1:2379"
"""The etcd client URL used without ``--etcd``."""


def make(args: argparse.Namespace, domains: StubDomains) -> Backend:
    """The backend of ``--backend skydns``: v2 unless ``--skydns-etcd-api v3``."""
    prefix = args.etcd_prefix or "/skydns"
    if not prefix.startswith("/"):
        raise ConfigError(f"--etcd-prefix {prefix!r} must start with '/'")
    endpoints = feddns.etcd.endpoints.EtcdEndpoints(args.etcd or [DEFAULT_ETCD], args.backend_timeout,
                                                    feddns.etcd.flags.access_from(args))
    layout = SkyDNSLayout(domains, prefix)
    if args.skydns_etcd_api == "v3":
        from stubzone.backends import skydns_etcd3  # noqa: PLC0415 - aetcd and gRPC only for this choice

        return skydns_etcd3.SkyDNSEtcd3(endpoints, layout)
    from stubzone.backends import skydns_etcd2  # noqa: PLC0415 - aiohttp's client only for this choice

    return skydns_etcd2.SkyDNSEtcd2(endpoints, layout)
