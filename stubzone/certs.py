"""``feddns certs``: create a CA and issue server and client certificates (docs/reference.md section 6).

::

    feddns certs init         --dir pki                       # pki/ca.crt, pki/ca.key
    feddns certs issue-server --dir pki --dns stubzone.example --ip 203.0.113.10
    feddns certs issue-client --dir pki --cn feddns-controller

Every file is PEM; keys are written with mode 0600 (:mod:`stubzone.pki`).
Existing files are never replaced without ``--force``. Bad flags, an unusable
CA or an existing file exit with status 2 and one line.
"""

import argparse
import datetime
from pathlib import Path

from cryptography import x509

from feddns import numbers
from feddns.errors import ConfigError
from stubzone import pki

DEFAULT_CA_CN = "feddns stub-zone CA"
MAX_DAYS = 36500.0
"""The longest validity ``--days`` takes: a hundred years (X.509 times end in 9999, Python's dates too)."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``init``, ``issue-server`` and ``issue-client`` subcommands."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION", parser_class=type(parser))
    init = actions.add_parser("init", help="create a CA", description="Create a self-signed CA (ca.crt, ca.key).")
    _add_common(init, name="ca", days=3650)
    init.add_argument("--cn", default=DEFAULT_CA_CN, help=f"the CA's common name (default {DEFAULT_CA_CN!r})")
    server = actions.add_parser(
        "issue-server", help="issue a server certificate (serverAuth)",
        description="Issue a certificate for `feddns stubzone --cert/--key`, for the names and IPs clients dial.",
    )
    _add_common(server, name="server", days=365)
    _add_leaf(server, cn_required=False)
    client = actions.add_parser(
        "issue-client", help="issue a client certificate (clientAuth)",
        description="Issue a client certificate; its CN or a SAN goes into `feddns stubzone --allow`.",
    )
    _add_common(client, name="client", days=365)
    _add_leaf(client, cn_required=True)


def _add_common(parser: argparse.ArgumentParser, name: str, days: int) -> None:
    parser.add_argument("--dir", type=Path, default=Path("."), help="directory of the files (default: current)")
    parser.add_argument("--name", default=name, help=f"write NAME.crt and NAME.key (default {name})")
    parser.add_argument("--days", **numbers.in_range(MAX_DAYS, "days"), default=days,
                        help=f"validity in days (default {days})")
    parser.add_argument(
        "--not-before", type=_timestamp, metavar="TIME",
        help="start of validity, ISO 8601 (default: now minus 5 minutes); with --days, makes expired certificates",
    )
    parser.add_argument("--key-type", choices=pki.KEY_TYPES, default=pki.KEY_TYPES[0], help="default ecdsa-p256")
    parser.add_argument("--force", action="store_true", help="replace existing files")


def _add_leaf(parser: argparse.ArgumentParser, cn_required: bool) -> None:
    parser.add_argument("--ca-cert", type=Path, help="CA certificate (default DIR/ca.crt)")
    parser.add_argument("--ca-key", type=Path, help="CA private key (default DIR/ca.key)")
    parser.add_argument(
        "--cn", required=cn_required,
        help="common name" + (" (the client identity)" if cn_required else " (default: the first --dns or --ip)"),
    )
    parser.add_argument("--dns", action="append", default=[], help="DNS name SAN (repeatable)")
    parser.add_argument("--ip", action="append", default=[], help="IP address SAN (repeatable)")
    parser.add_argument("--uri", action="append", default=[], help="URI SAN, e.g. a SPIFFE ID (repeatable)")


def _timestamp(text: str) -> datetime.datetime:
    """ISO 8601 date or time; a time without a zone is UTC."""
    try:
        value = datetime.datetime.fromisoformat(text)  # Python 3.11 reads a trailing Z too
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from exc
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)


def run(args: argparse.Namespace) -> int:
    """Create the files asked for; print what was written. Raises :class:`ConfigError`."""
    validity = pki.Validity.days_from(args.days, args.not_before)
    key = pki.new_key(args.key_type)
    if args.action == "init":
        authority = pki.make_ca(args.cn, key, validity)
        certificate = authority.certificate
    else:
        certificate = _issue_leaf(args, key, validity)
    cert_path, key_path = args.dir / f"{args.name}.crt", args.dir / f"{args.name}.key"
    pki.save(certificate, key, cert_path, key_path, args.force)
    capped = " (capped at the CA's expiry)" if certificate.not_valid_after_utc < validity.not_after else ""
    print(
        f"wrote {cert_path} and {key_path} (key mode 0600): {certificate.subject.rfc4514_string()}, "
        f"valid {certificate.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ} to "
        f"{certificate.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}{capped}"
    )
    return 0


def _issue_leaf(args: argparse.Namespace, key: pki.PrivateKey, validity: pki.Validity) -> x509.Certificate:
    sans = pki.parse_sans(args.dns, args.ip, args.uri)
    usage: pki.Usage = "server" if args.action == "issue-server" else "client"
    if usage == "server" and not sans:
        raise ConfigError("issue-server needs at least one --dns or --ip (the names clients dial)")
    common_name = args.cn or str(sans[0].value)
    authority = pki.load_authority(args.ca_cert or args.dir / "ca.crt", args.ca_key or args.dir / "ca.key")
    return pki.issue(authority, usage, common_name, sans, key, validity)
