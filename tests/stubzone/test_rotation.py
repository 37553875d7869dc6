"""Certificate rotation without a restart (docs/stubzone.md, "Rotating certificates"): the endpoint reads
``--cert``, ``--key`` and ``--client-ca`` again when they change, laid out as a Kubernetes Secret volume
(the kubelet swaps a ``..data`` symlink); new connections get the new set, connections already open keep
working, and a set that does not load is refused once and the old one kept."""

import http.client
import itertools
import os
import re
import shutil
import socket
import ssl
import threading
import time
from collections import Counter
from pathlib import Path

from cryptography import x509

from harness.ports import wait_until
from harness.stubzone import ALLOWED, Pki, StubzoneProcess, certs, skydns_args

KEYS = ("tls.crt", "tls.key", "ca.crt")


class SecretVolume:
    """A directory as the kubelet writes a Secret volume: ``KEY -> ..data/KEY``, ``..data -> ..<timestamp>``.

    ``update`` writes a new timestamped directory, points ``..data`` at it with
    one rename, then removes the old one (kubelet's AtomicWriter).
    """

    _serial = itertools.count()

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        for key in KEYS:
            (root / key).symlink_to(f"..data/{key}")

    def path(self, key: str) -> str:
        return str(self.root / key)

    def update(self, files: dict[str, Path | None]) -> None:
        """``files``: the source of each key; ``None`` leaves that key out (its symlink dangles)."""
        stamp = self.root / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{next(self._serial):09d}"
        stamp.mkdir()
        for key, source in files.items():
            if source is not None:
                shutil.copyfile(source, stamp / key)
        data = self.root / "..data"
        old = data.resolve() if data.exists() else None
        (self.root / "..data_tmp").symlink_to(stamp.name)
        os.replace(self.root / "..data_tmp", data)
        if old is not None:
            shutil.rmtree(old)


def files_of(directory: Path, key: Path | None = None) -> dict[str, Path | None]:
    """The Secret's keys from a ``feddns certs`` directory (``key``: another key file instead)."""
    return {"tls.crt": directory / "server.crt", "tls.key": key or directory / "server.key",
            "ca.crt": directory / "ca.crt"}


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def second_pki(root: Path) -> Path:
    """Another CA, with a server certificate for 127.0.0.1 and an allowed client of its own."""
    certs("init", "--dir", str(root), "--cn", "feddns stub-zone CA two")
    certs("issue-server", "--dir", str(root), "--ip", "127.0.0.1", "--dns", "localhost")
    certs("issue-client", "--dir", str(root), "--cn", ALLOWED)
    return root


def client(trusted: list[Path], cert_dir: Path) -> ssl.SSLContext:
    """A client context trusting ``trusted`` CAs, presenting the client certificate of ``cert_dir``."""
    context = ssl.create_default_context(cadata="".join(path.read_text() for path in trusted))
    context.load_cert_chain(cert_dir / "client.crt", cert_dir / "client.key")
    return context


def attempt(port: int, context: ssl.SSLContext) -> tuple[int | None, str]:
    """A new connection and ``GET /healthz``: (server certificate serial or None, "200" / "refused" / error)."""
    try:
        sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                   server_hostname="127.0.0.1")
    except ssl.SSLCertVerificationError:
        return None, "server not trusted"
    with sock:
        serial = x509.load_der_x509_certificate(sock.getpeercert(binary_form=True) or b"").serial_number
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head = sock.recv(12)
        except (ssl.SSLError, ConnectionError):
            return serial, "refused"  # TLS 1.3: the server's verdict on the client comes after the client's
        if not head:
            return serial, "refused"
        return serial, head.decode(errors="replace")[9:12]


def start_server(pki: Pki, volume: SecretVolume, etcd_url: str, prefix: str) -> StubzoneProcess:
    return StubzoneProcess(pki, *skydns_args(etcd_url, prefix), "--cert", volume.path("tls.crt"),
                           "--key", volume.path("tls.key"), "--client-ca", volume.path("ca.crt"),
                           "--tls-reload-interval", "0.2")


def test_rotating_cert_key_and_client_ca_under_load(pki, tmp_path, etcd, etcd_prefix):
    one, two = pki.dir, second_pki(tmp_path / "two")
    old_serial, new_serial = serial_of(one / "server.crt"), serial_of(two / "server.crt")
    volume = SecretVolume(tmp_path / "tls")
    volume.update(files_of(one))
    clients = {"client of CA one": client([one / "ca.crt", two / "ca.crt"], one),
               "client of CA two": client([one / "ca.crt", two / "ca.crt"], two)}
    with start_server(pki, volume, etcd.url, etcd_prefix) as server:
        outcomes: Counter[tuple[str, int | None, str]] = Counter()
        kept: list[int] = []
        stop = threading.Event()

        def load(name: str) -> None:  # a new handshake each time
            while not stop.is_set():
                serial, outcome = attempt(server.port, clients[name])
                outcomes[(name, serial, outcome)] += 1

        def keep_alive() -> None:  # one connection, opened before the rotation, used throughout
            connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=clients["client of CA one"],
                                                     timeout=10)
            while not stop.is_set():
                connection.request("GET", "/federations")
                response = connection.getresponse()
                response.read()
                kept.append(response.status)
            connection.close()

        threads = [threading.Thread(target=load, args=(name,)) for name in clients for _ in range(2)]
        threads.append(threading.Thread(target=keep_alive))
        for thread in threads:
            thread.start()
        try:
            wait_until(lambda: outcomes[("client of CA one", old_serial, "200")] >= 5, timeout=30, what="load")
            in_flight = clients["client of CA one"].wrap_socket(
                socket.create_connection(("127.0.0.1", server.port), timeout=10), server_hostname="127.0.0.1")
            body = b'{"nameservers": ["192.0.2.77"]}'
            in_flight.sendall(b"POST /federations/rotated HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body[:10]))
            kept_before = len(kept)
            volume.update(files_of(two))
            server.wait_for_log(rf"TLS certificates reloaded: server certificate serial {new_serial:#x} .*"
                                rf"client CA CN=feddns stub-zone CA two")
            wait_until(lambda: outcomes[("client of CA two", new_serial, "200")] >= 5, timeout=30,
                       what="new handshakes with the new set")
            in_flight.sendall(body[10:])  # the request began before the rotation and ends after it
            assert in_flight.recv(12) == b"HTTP/1.1 200"
            in_flight.close()
            wait_until(lambda: len(kept) > kept_before + 5, timeout=30, what="the kept connection still answering")
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
        print("outcomes (client, server serial, answer):", dict(outcomes))
        expected = {("client of CA one", old_serial, "200"), ("client of CA two", old_serial, "refused"),
                    ("client of CA two", new_serial, "200"), ("client of CA one", new_serial, "refused")}
        assert set(outcomes) <= expected, set(outcomes) - expected
        assert set(kept) == {200}, Counter(kept)
        assert etcd.v2_leaves(etcd_prefix)  # the in-flight POST was stored
        only_old_ca = client([one / "ca.crt"], one)
        assert attempt(server.port, only_old_ca) == (None, "server not trusted")  # the new server certificate
        assert attempt(server.port, client([two / "ca.crt"], one)) == (new_serial, "refused")  # the new client CA
        assert attempt(server.port, client([two / "ca.crt"], two)) == (new_serial, "200")


def test_a_set_that_does_not_load_is_refused_once_and_the_old_one_kept(pki, tmp_path, etcd, etcd_prefix):
    one, two = pki.dir, second_pki(tmp_path / "two")
    old_serial, new_serial = serial_of(one / "server.crt"), serial_of(two / "server.crt")
    volume = SecretVolume(tmp_path / "tls")
    volume.update(files_of(one))
    good = client([one / "ca.crt"], one)
    with start_server(pki, volume, etcd.url, etcd_prefix) as server:
        bad_sets = {
            "a key that is not the certificate's": (files_of(two, key=one / "server.key"), "key values mismatch"),
            "a file missing from the new set": ({**files_of(two), "tls.key": None}, "No such file or directory"),
        }
        for what, (files, reason) in bad_sets.items():
            log_start = len(server.lines)
            volume.update(files)
            server.wait_for_log(rf"TLS certificates not reloaded, still using server certificate serial "
                                rf"{old_serial:#x} .*{re.escape(reason)}", start=log_start)
            watched = time.monotonic()
            while time.monotonic() - watched < 1.5:  # 7 looks at the files: the old set serves all along
                assert attempt(server.port, good) == (old_serial, "200"), what
            refusals = [line for line in server.lines[log_start:] if "not reloaded" in line]
            assert len(refusals) == 1, (what, refusals)
        log_start = len(server.lines)
        volume.update(files_of(two))
        server.wait_for_log(rf"TLS certificates reloaded: server certificate serial {new_serial:#x}", start=log_start)
        assert attempt(server.port, client([two / "ca.crt"], two)) == (new_serial, "200")
