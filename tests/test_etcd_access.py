"""How every component reaches etcd (docs/reference.md section 6): URLs, TLS files, users,
against a real etcd with ``--client-cert-auth`` and a real etcd with authentication on."""

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from feddns.errors import ConfigError, EtcdCompacted, EtcdError, FeddnsError
from feddns.etcd.credentials import Access, TLSFiles
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.etcd.failures import describe, failure_kind
from feddns.etcd.urls import EtcdURL, parse_etcd_url
from harness.etcd import EtcdServer
from harness.etcdpki import EtcdPki


@pytest.mark.parametrize("text,expected", [
    ("http://127.0.0.1:2379", EtcdURL("http", "127.0.0.1", 2379)),
    ("http://etcd", EtcdURL("http", "etcd", 2379)),
    ("https://etcd.example:2379/", EtcdURL("https", "etcd.example", 2379)),
    ("https://[fd00::1]:2379", EtcdURL("https", "fd00::1", 2379)),
    ("127.0.0.1:3379", EtcdURL("http", "127.0.0.1", 3379)),
])
def test_etcd_urls(text: str, expected: EtcdURL) -> None:
    assert parse_etcd_url(text) == expected


@pytest.mark.parametrize("text,message", [
    ("ftp://etcd:2379", "must be http:// or https://"),
    ("http://etcd:2379/v3", "must not have a path"),
    ("http://etcd:99999", "out of range"),
])
def test_bad_etcd_urls(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_etcd_url(text)


@pytest.mark.parametrize("text", ["http://feddns:s3cret@etcd:2379", "https://:s3cret@etcd", "feddns:s3cret@etcd:2379",
                                  "http://feddns@etcd:2379"])
def test_credentials_in_a_url_are_refused_without_repeating_them(text: str) -> None:
    with pytest.raises(ConfigError, match="has credentials in it: refused") as error:
        parse_etcd_url(text)
    assert "s3cret" not in str(error.value)
    assert "--etcd-user" in str(error.value)


def test_endpoints_refuse_mixed_schemes_and_tls_files_for_http(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mix http:// and https://"):
        EtcdEndpoints(["http://a:2379", "https://b:2379"])
    with pytest.raises(ConfigError, match="need https:// endpoints"):
        EtcdEndpoints(["http://a:2379"], access=Access(TLSFiles(cacert=tmp_path / "ca.crt")))


def test_tls_files_are_read_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--etcd-cacert .*missing.crt: cannot read"):
        EtcdEndpoints(["https://a:2379"], access=Access(TLSFiles(cacert=tmp_path / "missing.crt")))
    with pytest.raises(ConfigError, match="--etcd-cert and --etcd-key go together"):
        EtcdEndpoints(["https://a:2379"], access=Access(TLSFiles(cert=tmp_path / "c.crt")))
    (tmp_path / "junk.crt").write_text("not PEM\n")
    with pytest.raises(ConfigError, match="do not load"):
        EtcdEndpoints(["https://a:2379"], access=Access(TLSFiles(cacert=tmp_path / "junk.crt")))


def test_password_from_a_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "password"
    secret.write_text("pa ss\n")
    assert Access(user="feddns", password_file=secret).password() == "pa ss"
    monkeypatch.setenv("FEDDNS_ETCD_PASSWORD", "from-env")
    assert Access(user="feddns").password() == "from-env"
    monkeypatch.delenv("FEDDNS_ETCD_PASSWORD")
    with pytest.raises(ConfigError, match=r"needs a password: \$FEDDNS_ETCD_PASSWORD is empty or unset"):
        Access(user="feddns").check()
    with pytest.raises(ConfigError, match="cannot read"):
        Access(user="feddns", password_file=tmp_path / "nope").check()
    with pytest.raises(ConfigError, match="never from argv"):
        Access(user="feddns:pw").check()
    with pytest.raises(ConfigError, match="without an etcd user"):
        Access(password_file=secret).check()


def test_failure_kinds_follow_etcds_messages() -> None:
    assert failure_kind(Exception("etcdserver: authentication failed, invalid user ID or password")) == "auth"
    assert failure_kind(Exception("etcdserver: user name is empty")) == "no-user"
    assert failure_kind(Exception("etcdserver: permission denied")) == "permission"
    assert failure_kind(Exception("etcdserver: invalid auth token")) == "token"
    assert failure_kind(Exception("etcdserver: no leader")) == "no-leader"
    assert failure_kind(Exception("failed to connect to all addresses; last error: UNAVAILABLE: "
                                  "ipv4:127.0.0.1:1: Connection refused")) == "unreachable"


# -- against real etcd servers --------------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> EtcdPki:
    return EtcdPki(tmp_path_factory.mktemp("etcdpki"))


@pytest.fixture(scope="module")
def tls_etcd(pki: EtcdPki) -> Iterator[EtcdServer]:
    server = EtcdServer(pki=pki)
    server.start()
    yield server
    server.destroy()


@pytest.fixture(scope="module")
def auth_etcd() -> Iterator[EtcdServer]:
    server = EtcdServer()
    server.start()
    server.enable_auth({"feddns": ("feddns-password", ["/allowed/"])})
    yield server
    server.destroy()


def read_once(endpoints: EtcdEndpoints, key: bytes) -> str:
    """``ok <value>`` or ``<failure kind>: <description>`` of one read."""
    async def read() -> str:
        client = endpoints.client()
        try:
            found = await client.get(key)
            return f"ok {found.value.decode() if found else None}"
        except EtcdError as exc:  # every etcd failure is what the test looks at
            return f"{failure_kind(exc)}: {describe(exc)}"
        finally:
            await client.close()
    return asyncio.run(read())


def test_client_certificate_auth(pki: EtcdPki, tls_etcd: EtcdServer, tmp_path: Path) -> None:
    tls_etcd.put("/tls/key", "v")
    cert, key = pki.client_cert
    access = Access(TLSFiles(pki.server_ca, cert, key))
    assert read_once(EtcdEndpoints([tls_etcd.url], access=access), b"/tls/key") == "ok v"
    answer = read_once(EtcdEndpoints([tls_etcd.url], timeout=3, access=Access(TLSFiles(pki.server_ca))), b"/tls/key")
    assert answer.startswith("tls: TLS handshake failed"), answer
    wrong_ca = read_once(EtcdEndpoints([tls_etcd.url], timeout=3, access=Access(TLSFiles(cert, cert, key))),
                         b"/tls/key")
    assert wrong_ca.startswith("tls: TLS handshake failed"), wrong_ca


def test_user_and_password(auth_etcd: EtcdServer, tmp_path: Path) -> None:
    auth_etcd.put("/allowed/key", "v")
    auth_etcd.put("/other/key", "w")
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("feddns-password\n")
    bad.write_text("wrong\n")
    feddns = Access(user="feddns", password_file=good)
    assert read_once(EtcdEndpoints([auth_etcd.url], access=feddns), b"/allowed/key") == "ok v"
    assert read_once(EtcdEndpoints([auth_etcd.url], access=Access(user="feddns", password_file=good)),
                b"/other/key").startswith("permission: permission denied")
    assert read_once(EtcdEndpoints([auth_etcd.url], access=Access(user="feddns", password_file=bad)),
                b"/allowed/key").startswith("auth: authentication failed (wrong user or password)")
    assert read_once(EtcdEndpoints([auth_etcd.url]), b"/allowed/key").startswith(
        "no-user: etcd requires authentication and no user was given")


def test_a_failed_call_raises_etcd_error_from_the_library_error() -> None:
    """EtcdError is feddns's own (a FeddnsError); aetcd's or gRPC's error is its cause."""
    with socket.socket() as probe:  # a port the OS just gave out, closed again: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def read() -> EtcdError:
        client = EtcdEndpoints([f"http://127.0.0.1:{port}"], timeout=3).client()
        try:
            with pytest.raises(EtcdError) as error:
                await client.get(b"/key")
        finally:
            await client.close()
        return error.value

    error = asyncio.run(read())
    assert isinstance(error, FeddnsError)
    assert type(error.__cause__).__module__.split(".")[0] in ("aetcd", "grpc"), repr(error.__cause__)
    assert failure_kind(error) == "unreachable"


def test_a_watch_from_a_compacted_revision_raises_etcd_compacted(private_etcd: EtcdServer) -> None:
    first = private_etcd.put("/compacted/key", "a")
    private_etcd.put("/compacted/key", "b")
    private_etcd.compact(private_etcd.revision())

    async def watch() -> EtcdCompacted:
        client = EtcdEndpoints([private_etcd.url]).client()
        try:
            with pytest.raises(EtcdCompacted) as error:
                async for _ in await client.watch(b"/compacted/", b"/compacted0", start_revision=first):
                    pass
        finally:
            await client.close()
        return error.value

    error = asyncio.run(watch())
    assert error.revision == private_etcd.revision()
    assert isinstance(error.__cause__, Exception)
