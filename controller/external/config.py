"""The ``external`` section of the controller config (docs/reference.md section 7).

:func:`parse_external_config` checks the mapping and returns it typed as
:class:`ExternalConfig`; :func:`read_secret_file` reads the TSIG secret (RFC 8945)
the ``rfc2136`` provider signs with.

The section's shape is pydantic models read through :mod:`feddns.configfile`, as the
rest of the controller config is (``controller.config``): unknown keys are refused
(a key no provider takes first, then a key of the other provider), and every error is
``external.<key>: <what is wrong>``, to which the controller config's loader adds the
file, the line and the column. Which keys are allowed depends on ``provider``, so the
section is checked twice: once against every key of any provider
(:class:`_AnyProviderFile`), then against the keys of its own provider.
"""

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import dns.exception
import dns.name
from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic.alias_generators import to_camel

from feddns import configfile
from feddns.errors import ConfigError
from feddns.hostport import parse_hostport
from feddns.names import check_length, is_label, normalize_zone

PROVIDERS = ("rfc2136", "dnsendpoint")
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


def parse_external_config(raw: object) -> ExternalConfig:
    """Check the ``external`` mapping of the controller config and return it typed.

    ``provider`` and ``zone`` are required; ``ttl`` defaults to 60 s. rfc2136:
    ``server`` is required; ``tsig`` is optional (no signing), and when given
    needs ``name`` and ``secretFile`` (``algorithm`` defaults to hmac-sha256). The
    secret file holds the base64 secret, alone or as ``tsig-keygen`` writes it.
    dnsendpoint: ``cluster`` (a cluster name; the caller checks it is configured)
    and ``namespace`` are required. Raises :class:`ConfigError` naming the key
    (``external.tsig.secretFile: ...``), a :class:`feddns.configfile.FieldError`
    with its ``loc`` for a shape or value error; unknown keys, and keys of the
    other provider, are errors.
    """
    provider = configfile.validate(_AnyProviderFile, raw, _wording(""), at=_AT).provider
    if provider == "dnsendpoint":
        endpoint = configfile.validate(_DnsEndpointFile, raw, _wording(provider), at=_AT)
        return ExternalConfig(provider, "", 0, endpoint.zone, endpoint.ttl,
                              cluster=endpoint.cluster, namespace=endpoint.namespace)
    section = configfile.validate(_Rfc2136File, raw, _wording(provider), at=_AT)
    (server, port), tsig = section.server, section.tsig
    if tsig is None:
        return ExternalConfig(provider, server, port, section.zone, section.ttl)
    return ExternalConfig(provider, server, port, section.zone, section.ttl,
                          tsig.name, tsig.algorithm, read_secret_file(tsig.secret_file))


_AT = ("external",)
"""Where the section is in the controller config: the first part of every key path."""


def _wording(provider: str) -> configfile.Wording:
    """The section's words for its shape errors; an unknown key of the section itself names
    ``provider`` when the key is one the other provider takes."""
    def unknown_key(parent: configfile.Loc, key: str, known: Sequence[str]) -> str:
        context = f" with provider {provider}" if provider and tuple(parent) == _AT else ""
        return f"{configfile.keypath([*parent, key])}: unknown key{context} (expected {', '.join(known)})"

    return configfile.Wording(unknown_key=unknown_key)


# The values, checked in the words of docs/reference.md section 7; configfile puts the key path first.

def _provider(value: object) -> str:
    if value is None:
        raise ConfigError("is required")
    if not isinstance(value, str) or value not in PROVIDERS:
        raise ConfigError(f"{configfile.shown(value)} is not supported (expected one of {', '.join(PROVIDERS)})")
    return value


def _label(value: object) -> str:
    """A cluster or namespace name: a lowercase DNS label (RFC 1123), at most 63 characters (RFC 1035)."""
    try:
        if isinstance(value, str):
            check_length(value, "name")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if not isinstance(value, str) or not is_label(value):
        raise ConfigError(f"{configfile.shown(value)} is not a lowercase DNS label")
    return value


def _server(value: object) -> tuple[str, int]:
    """``HOST`` or ``HOST:PORT`` (``[v6]:PORT``) to ``(host, port)``, port 53 when not given."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"must be HOST or HOST:PORT, not {configfile.shown(value)}")
    host, port = parse_hostport(value.strip(), DNS_PORT, lowest=1)
    try:
        check_length(host, "host", name=True)  # a name or an address, either no longer than a name
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return host, port


def _zone(value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"must be a domain name, not {configfile.shown(value)}")
    try:
        return normalize_zone(value)
    except ValueError as exc:
        raise ConfigError(f"{configfile.shown(value)}: {exc}") from exc


def _ttl(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TTL:
        raise ConfigError(f"must be seconds from 0 to {MAX_TTL}, not {configfile.shown(value)}")
    return value


def _string(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"must be a non-empty string, not {configfile.shown(value)}")
    return value


def _tsig_name(value: object) -> str:
    """The TSIG key name in the form RFC 8945 section 4.2 compares it: absolute, lowercase."""
    try:
        return dns.name.from_text(check_length(_string(value), "name", name=True)).to_text().lower()
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    except dns.exception.DNSException as exc:
        raise ConfigError(f"{configfile.shown(value)} is not a domain name: {exc}") from exc


def _algorithm(value: object) -> str:
    if not isinstance(value, str) or value not in TSIG_ALGORITHMS:
        raise ConfigError(f"{configfile.shown(value)} is not one of {', '.join(TSIG_ALGORITHMS)}")
    return value


_Zone = Annotated[str, BeforeValidator(_zone)]
_Ttl = Annotated[int, BeforeValidator(_ttl)]
_Label = Annotated[str, BeforeValidator(_label)]


class _Shape(BaseModel):
    """A mapping of the section: camelCase keys (``secretFile``), no others."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)


class _AnyProviderFile(_Shape):
    """Every key some provider takes, in the order messages list them: a key no provider
    takes, then a missing or unknown ``provider``, are refused before anything else."""

    provider: Annotated[str, BeforeValidator(_provider)]
    server: Any = None
    zone: Any = None
    ttl: Any = None
    tsig: Any = None
    cluster: Any = None
    namespace: Any = None


class _TsigFile(_Shape):
    name: Annotated[str, BeforeValidator(_tsig_name)]
    algorithm: Annotated[str, BeforeValidator(_algorithm)] = "hmac-sha256"
    secret_file: Annotated[str, BeforeValidator(_string)]


class _Rfc2136File(_Shape):
    provider: str
    server: Annotated[tuple[str, int], BeforeValidator(_server)]
    zone: _Zone
    ttl: _Ttl = DEFAULT_TTL
    tsig: _TsigFile | None = None


class _DnsEndpointFile(_Shape):
    provider: str
    cluster: _Label
    namespace: _Label
    zone: _Zone
    ttl: _Ttl = DEFAULT_TTL


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
