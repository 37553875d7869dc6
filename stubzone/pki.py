"""A small certificate authority for the stub-zone endpoint, built on ``cryptography``.

One CA signs the server certificate of each cluster's stub-zone endpoint and
the client certificates of the federation control plane (design doc "Initial
Setup": "This HTTP server needs TLS client-side authentication"). Profiles
follow RFC 5280: the CA has ``basicConstraints CA:TRUE, pathlen:0`` and
``keyCertSign``; leaves have ``CA:FALSE`` and an extended key usage of
``serverAuth`` or ``clientAuth`` (OpenSSL refuses a client certificate
without ``clientAuth``), subject alternative names, and key identifiers.
Files are PEM; private keys are unencrypted PKCS#8 written with mode 0600.
"""

import datetime
import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from feddns.errors import ConfigError

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
Usage = Literal["server", "client"]

KEY_TYPES = ("ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096")
"""Values of ``--key-type``; the first is the default."""

CLOCK_SKEW = datetime.timedelta(minutes=5)
"""How far before "now" a new certificate becomes valid, for peers whose clocks lag."""


@dataclass(frozen=True, slots=True)
class Validity:
    """``not_before`` and ``not_after`` of a certificate (aware UTC datetimes)."""

    not_before: datetime.datetime
    not_after: datetime.datetime

    @classmethod
    def days_from(cls, days: float, not_before: datetime.datetime | None = None) -> "Validity":
        """``days`` (> 0) from ``not_before`` (default: now minus :data:`CLOCK_SKEW`)."""
        if days <= 0:
            raise ConfigError(f"--days must be more than 0 (got {days})")
        start = not_before or datetime.datetime.now(datetime.UTC) - CLOCK_SKEW
        start = start.replace(microsecond=0)  # X.509 times have whole seconds (RFC 5280 4.1.2.5)
        return cls(start, start + datetime.timedelta(seconds=round(days * 86400)))

    def capped(self, limit: datetime.datetime) -> "Validity":
        """This validity ending at ``limit`` at the latest (a leaf cannot outlive its CA).

        Raises :class:`ConfigError` when nothing is left (the CA expired before ``not_before``).
        """
        if limit <= self.not_before:
            raise ConfigError(f"the CA expires ({limit:%Y-%m-%d}) before the certificate would start")
        return Validity(self.not_before, min(self.not_after, limit))


@dataclass(frozen=True, slots=True)
class Authority:
    """A CA that can sign: its certificate and private key."""

    certificate: x509.Certificate
    key: PrivateKey


def new_key(key_type: str = KEY_TYPES[0]) -> PrivateKey:
    """A new private key of ``key_type`` (one of :data:`KEY_TYPES`)."""
    if key_type == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "ecdsa-p384":
        return ec.generate_private_key(ec.SECP384R1())
    if key_type.startswith("rsa-") and key_type in KEY_TYPES:
        return rsa.generate_private_key(public_exponent=65537, key_size=int(key_type[4:]))
    raise ConfigError(f"key type {key_type!r} is not one of {', '.join(KEY_TYPES)}")


P384_BITS = 384
"""Key size of the P-384 curve: from it on, certificates are signed with SHA-384 (RFC 5480 section 4)."""


def _hash_for(key: PrivateKey) -> hashes.SHA256 | hashes.SHA384:
    """SHA-384 for P-384 keys (RFC 5480 section 4), SHA-256 otherwise (the hashes ``sign`` accepts)."""
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.key_size >= P384_BITS:
        return hashes.SHA384()
    return hashes.SHA256()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: x509.Name, issuer: x509.Name, key: PrivateKey, validity: Validity) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity.not_before)
        .not_valid_after(validity.not_after)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def make_ca(common_name: str, key: PrivateKey, validity: Validity) -> Authority:
    """A self-signed CA certificate for ``key`` (RFC 5280 section 4.2.1.9, pathlen 0)."""
    name = _name(common_name)
    certificate = (
        _builder(name, name, key, validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, _hash_for(key))
    )
    return Authority(certificate, key)


def parse_sans(dns_names: list[str], ips: list[str], uris: list[str]) -> list[x509.GeneralName]:
    """Subject alternative names from ``--dns``, ``--ip`` and ``--uri`` values.

    Raises :class:`ConfigError` for an IP that does not parse or an empty name.
    """
    names: list[x509.GeneralName] = []
    for dns_name in dns_names:
        if not dns_name.strip(". "):
            raise ConfigError(f"--dns {dns_name!r} is empty")
        names.append(x509.DNSName(dns_name.rstrip(".").lower()))
    for ip in ips:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError as exc:
            raise ConfigError(f"--ip {ip!r} is not an IP address") from exc
    names.extend(x509.UniformResourceIdentifier(uri) for uri in uris)
    return names


def issue(
    authority: Authority, usage: Usage, common_name: str, sans: list[x509.GeneralName],
    key: PrivateKey, validity: Validity,
) -> x509.Certificate:
    """A leaf certificate for ``key`` signed by ``authority``.

    ``usage`` sets the extended key usage (``serverAuth`` or ``clientAuth``).
    Validity is capped at the CA's own expiry (:meth:`Validity.capped`): no
    verifier accepts a leaf after its CA expired.
    """
    ca_cert = authority.certificate
    validity = validity.capped(ca_cert.not_valid_after_utc)
    eku = ExtendedKeyUsageOID.SERVER_AUTH if usage == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        _builder(_name(common_name), ca_cert.subject, key, validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_leaf_key_usage(key), critical=True)
        .add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(authority.key, _hash_for(authority.key))


def _leaf_key_usage(key: PrivateKey) -> x509.KeyUsage:
    """digitalSignature; RSA keys also keyEncipherment (RSA key transport, TLS 1.2)."""
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False,
        key_encipherment=isinstance(key, rsa.RSAPrivateKey), data_encipherment=False,
        key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
    )


def load_authority(cert_path: Path, key_path: Path) -> Authority:
    """Read a CA written by :func:`save`; raises :class:`ConfigError` when unusable.

    Unusable: a file missing or unreadable, not PEM, a key that does not belong
    to the certificate, or a certificate that is not a CA.
    """
    try:
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"cannot load the CA from {cert_path} and {key_path}: {exc}") from exc
    if not isinstance(key, PrivateKey) or key.public_key() != certificate.public_key():
        raise ConfigError(f"{key_path} is not the private key of {cert_path}")
    try:
        is_ca = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise ConfigError(f"{cert_path} is not a CA certificate (basicConstraints CA:TRUE)")
    return Authority(certificate, key)


def save(certificate: x509.Certificate, key: PrivateKey, cert_path: Path, key_path: Path, force: bool) -> None:
    """Write the certificate (mode 0644) and the key (mode 0600) as PEM.

    Each file is written to a temporary file beside it and renamed, so a reader
    never sees half a key and the key is never readable by others. Raises
    :class:`ConfigError` when a file exists and ``force`` is false.
    """
    if not force:
        for path in (cert_path, key_path):
            if path.exists():
                raise ConfigError(f"{path} exists; use --force to replace it")
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write_atomic(key_path, key_pem, 0o600)
    _write_atomic(cert_path, certificate.public_bytes(serialization.Encoding.PEM), 0o644)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc}") from exc
    try:
        os.fchmod(fd, mode)  # mkstemp creates 0600; the certificate is public
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temp_name, path)
    except OSError as exc:
        os.unlink(temp_name)
        raise ConfigError(f"cannot write {path}: {exc}") from exc
