"""The ``--etcd-*`` flags of ``feddns serve`` and ``feddns stubzone``, with etcdctl's names.

:func:`add_arguments` adds them; :func:`access_from` turns the parsed flags into
an :class:`~feddns.etcd.credentials.Access`, which
:class:`~feddns.etcd.endpoints.EtcdEndpoints` checks.
"""

import argparse
from pathlib import Path
from typing import Any

from feddns.etcd.credentials import PASSWORD_ENV, Access, TLSFiles


def add_arguments(group: Any) -> None:
    """Add ``--etcd-cacert``, ``--etcd-cert``, ``--etcd-key``, ``--etcd-user`` and
    ``--etcd-password-file`` (etcdctl's names) to an argparse parser or group."""
    group.add_argument("--etcd-cacert", type=Path, metavar="FILE",
                       help="CA that signed etcd's server certificate, PEM (https:// endpoints; "
                            "default: the system's roots)")
    group.add_argument("--etcd-cert", type=Path, metavar="FILE",
                       help="client certificate for etcd's --client-cert-auth, PEM (with --etcd-key)")
    group.add_argument("--etcd-key", type=Path, metavar="FILE", help="the client certificate's key, PEM")
    group.add_argument("--etcd-user", metavar="NAME",
                       help=f"etcd user name; the password comes from --etcd-password-file or ${PASSWORD_ENV}")
    group.add_argument("--etcd-password-file", type=Path, metavar="FILE",
                       help="file holding the etcd user's password (re-read on reconnect)")


def access_from(args: argparse.Namespace) -> Access:
    """The :class:`Access` the flags of :func:`add_arguments` ask for (checked by ``EtcdEndpoints``)."""
    tls_given = any(getattr(args, name) is not None for name in ("etcd_cacert", "etcd_cert", "etcd_key"))
    tls = TLSFiles(args.etcd_cacert, args.etcd_cert, args.etcd_key) if tls_given else None
    return Access(tls=tls, user=args.etcd_user, password_file=args.etcd_password_file)
