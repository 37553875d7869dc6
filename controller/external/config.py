"""The ``external`` section of the controller config (docs/reference.md section 7).

:func:`parse_external_config` checks the mapping and returns it typed as
:class:`ExternalConfig`; :func:`read_secret_file` reads the TSIG secret (RFC 8945)
the ``rfc2136`` provider signs with.
"""

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dns.exception
import dns.name

from feddns.configmapping import check_mapping
from feddns.errors import ConfigError
from feddns.hostport import parse_hostport
from feddns.names import is_label, normalize_zone

PROVIDERS = ("rfc2136", "dnsendpoint")
PROVIDER_KEYS = {
    "rfc2136": ("provider", "server", "zone", "ttl", "tsig"),
    "dnsendpoint": ("provider", "cluster", "namespace", "zone", "ttl"),
}
"""The keys of the ``external`` section each provider takes."""
PROVIDER_REQUIRED = {"rfc2136": ("server", "zone"), "dnsendpoint": ("cluster", "namespace", "zone")}
# RFC 8945 section 6: HMAC-SHA256 is mandatory to implement; MD5 is deprecated and left out.
TSIG_ALGORITHMS = ("hmac-sha1", "hmac-sha224", "hmac-sha256", "hmac-sha384", "hmac-sha512")
MAX_TTL = 2**31 - 1  # RFC 2181 section 8
DNS_PORT = 53
"""The port of ``external.server`` when it names none."""
DEFAULT_TTL = 60
"""``external.ttl`` when not given (seconds)."""


@dataclass(frozen=True)
class ExternalConfig:
    """The ``external`` section of the controller config (docs/reference.md section 7)."""

    provider: str
    """Provider kind: ``"rfc2136"`` or ``"dnsendpoint"``."""
    server: str
    """rfc2136: the provider's primary server, an IP address or a hostname (``""`` for dnsendpoint)."""
    port: int
    """rfc2136: its DNS port (TCP), 53 unless ``server`` names another (0 for dnsendpoint)."""
    zone: str
    """The registered domain, normalised (``"example.com."``); also the update zone."""
    ttl: int = DEFAULT_TTL
    """TTL in seconds of the published A, AAAA and ownership TXT records."""
    tsig_name: str | None = None
    """TSIG key name (``"feddns."``); ``None`` sends unsigned requests."""
    tsig_algorithm: str = "hmac-sha256"
    """TSIG algorithm (RFC 8945 section 6 names)."""
    tsig_secret: bytes | None = field(default=None, repr=False)
    """The decoded TSIG secret read from ``tsig.secretFile``; kept out of repr and logs."""
    cluster: str | None = None
    """dnsendpoint: the member cluster (``clusters[].name``) whose API server keeps the objects."""
    namespace: str | None = None
    """dnsendpoint: the namespace of the DNSEndpoint objects in that cluster."""


def parse_external_config(raw: Mapping[str, Any]) -> ExternalConfig:
    """Check the ``external`` mapping of the controller config and return it typed.

    ``provider`` and ``zone`` are required; ``ttl`` defaults to 60 s. rfc2136:
    ``server`` is required; ``tsig`` is optional (no signing), and when given
    needs ``name`` and ``secretFile`` (``algorithm`` defaults to hmac-sha256). The
    secret file holds the base64 secret, alone or as ``tsig-keygen`` writes it.
    dnsendpoint: ``cluster`` (a cluster name; the caller checks it is configured)
    and ``namespace`` are required. Raises :class:`ConfigError` naming the key
    (``external.tsig.secretFile: ...``); unknown keys, and keys of the other
    provider, are errors.
    """
    every_key = tuple(dict.fromkeys(k for keys in PROVIDER_KEYS.values() for k in keys))
    section = _mapping(raw, "external", every_key)
    provider = section.get("provider")
    if provider is None:
        raise ConfigError("external.provider: required")
    if provider not in PROVIDERS:
        raise ConfigError(f"external.provider: {provider!r} is not supported (expected one of {', '.join(PROVIDERS)})")
    section = _mapping(section, "external", PROVIDER_KEYS[provider], f" with provider {provider}")
    for key in PROVIDER_REQUIRED[provider]:
        if key not in section:
            raise ConfigError(f"external.{key}: required")
    if provider == "dnsendpoint":
        return ExternalConfig(provider, "", 0, _zone(section["zone"]), _ttl(section.get("ttl", DEFAULT_TTL)),
                              cluster=_label(section["cluster"], "cluster"),
                              namespace=_label(section["namespace"], "namespace"))
    server, port = _server(section["server"])
    tsig = _tsig(section["tsig"]) if section.get("tsig") is not None else (None, "hmac-sha256", None)
    return ExternalConfig(provider, server, port, _zone(section["zone"]), _ttl(section.get("ttl", DEFAULT_TTL)), *tsig)

def _mapping(raw: object, where: str, allowed: Sequence[str], context: str = "") -> Mapping[str, Any]:
    return check_mapping(
        raw, allowed,
        not_a_mapping=lambda value: f"{where}: expected a mapping, got {type(value).__name__}",
        unknown_key=lambda key: f"{where}.{key}: unknown key{context} (expected {', '.join(allowed)})",
    )


def _label(value: object, key: str) -> str:
    """A cluster or namespace name: a lowercase DNS label (RFC 1123)."""
    if not isinstance(value, str) or not is_label(value):
        raise ConfigError(f"external.{key}: {value!r} is not a lowercase DNS label")
    return value


def _server(value: object) -> tuple[str, int]:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"external.server: expected HOST or HOST:PORT, got {value!r}")
    try:
        host, port = parse_hostport(value.strip(), DNS_PORT)
    except ConfigError as exc:
        raise ConfigError(f"external.server: {exc}") from exc
    if port == 0:
        raise ConfigError(f"external.server: {value!r}: port must be from 1 to 65535")
    return host, port


def _zone(value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"external.zone: expected a domain name, got {value!r}")
    try:
        return normalize_zone(value)
    except ValueError as exc:
        raise ConfigError(f"external.zone: {value!r}: {exc}") from exc


def _ttl(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TTL:
        raise ConfigError(f"external.ttl: expected seconds from 0 to {MAX_TTL}, got {value!r}")
    return value


def _tsig(raw: object) -> tuple[str, str, bytes]:
    section = _mapping(raw, "external.tsig", ("name", "algorithm", "secretFile"))
    for key in ("name", "secretFile"):
        if not isinstance(section.get(key), str) or not section[key]:
            raise ConfigError(f"external.tsig.{key}: required (a string)")
    try:
        name = dns.name.from_text(section["name"]).to_text().lower()
    except dns.exception.DNSException as exc:
        raise ConfigError(f"external.tsig.name: {section['name']!r} is not a domain name: {exc}") from exc
    algorithm = section.get("algorithm", "hmac-sha256")
    if algorithm not in TSIG_ALGORITHMS:
        raise ConfigError(f"external.tsig.algorithm: {algorithm!r} is not one of {', '.join(TSIG_ALGORITHMS)}")
    return name, algorithm, read_secret_file(section["secretFile"])


_KEY_CLAUSE_SECRET = re.compile(r'\bsecret\s+"([^"]*)"')


def read_secret_file(path: str) -> bytes:
    """The decoded TSIG secret in ``path``.

    The file holds the base64 secret alone, or a BIND ``key`` clause as
    ``tsig-keygen`` writes it (``secret "...";``), so one file can serve both
    named and feddns. Raises :class:`ConfigError` (never quoting the secret).
    """
    where = f"external.tsig.secretFile: {path}"
    try:
        with open(path, encoding="utf-8") as secret_file:
            text = secret_file.read()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", "") or "not UTF-8"
        raise ConfigError(f"{where}: not readable ({exc.__class__.__name__}: {why})") from None
    clause = _KEY_CLAUSE_SECRET.search(text)
    encoded = "".join((clause.group(1) if clause else text).split())
    try:
        secret = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise ConfigError(f"{where}: the secret is not base64") from None
    if not secret:
        raise ConfigError(f"{where}: the secret is empty")
    return secret
