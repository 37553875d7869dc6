"""--backend unbound against a real unbound, and the push model end to end:

    control plane --POST, client certificate, real TLS--> feddns stubzone --unbound-control reload-->
    unbound (same process) --forward, EDNS0 0xFEDD = foo--> feddns serve --> foo's shard first --> dig
"""

import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import dns.exception
import dns.message
import dns.rcode
import pytest

from harness.ports import wait_until
from harness.serve import ServeProcess, write_records
from harness.stubzone import StubzoneProcess
from harness.unbound import UnboundResolver

QNAME = "myservice.myns.myfederation.svc.federation."
RECORDS = """
/myfederation/_clusters/foo: {zone: us-central1-a, region: us-central1}
/myfederation/_clusters/bar: {zone: us-central1-b, region: us-central1}
/myfederation/myns/myservice/foo: {clusterIP: 10.0.3.64, externalIP: 104.32.64.128}
/myfederation/myns/myservice/bar: {clusterIP: 10.0.4.20, externalIP: 104.32.64.130}
"""


POLL = 0.05
"""Seconds the refuser's thread waits for a query before it looks whether it should end."""


class Refuser:
    """A DNS server on 127.0.0.1 that answers REFUSED to everything and keeps the names asked.

    It is where the test unbound sends every name it has no forward zone for.
    """

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sock.settimeout(POLL)  # a blocked recvfrom does not wake when another thread closes the socket
        self.asked: list[str] = []
        self._closing = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="refuser", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._closing.is_set():
            try:
                wire, peer = self.sock.recvfrom(4096)
                query = dns.message.from_wire(wire)
            except TimeoutError:
                continue
            except OSError:
                return
            except dns.exception.DNSException:  # a test server ignores what does not parse
                continue
            self.asked.append(query.question[0].name.to_text().lower())
            reply = dns.message.make_response(query)
            reply.set_rcode(dns.rcode.REFUSED)
            self.sock.sendto(reply.to_wire(), peer)

    def close(self) -> None:
        self._closing.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def refuser() -> Iterator[Refuser]:
    server = Refuser()
    yield server
    server.close()


@pytest.fixture
def resolver(refuser: Refuser) -> Iterator[UnboundResolver]:
    unbound = UnboundResolver("foo", programmable=True, default_port=refuser.port).start()
    yield unbound
    unbound.stop()


def dig(resolver: UnboundResolver, qname: str = QNAME) -> tuple[str, list[str]]:
    """``(status, addresses)`` of ``dig`` through the cluster's unbound, as a pod would ask."""
    result = subprocess.run(["dig", "+tries=1", "+time=5", "@127.0.0.1", "-p", str(resolver.port), qname, "A"],
                            capture_output=True, text=True, timeout=30, check=False)
    status = re.search(r"status: (\w+)", result.stdout)
    assert status, result.stdout + result.stderr
    answers = re.findall(r"^\S+\s+\d+\s+IN\s+A\s+(\S+)$", result.stdout, re.MULTILINE)
    return status.group(1), answers


def stubzone_for(pki, resolver: UnboundResolver) -> StubzoneProcess:
    return StubzoneProcess(pki, "--backend", "unbound", "--cluster", "foo", "--unbound-config", str(resolver.conf),
                           "--allow-loopback-nameservers")  # Federated-DNS is on 127.0.0.1


def test_push_model_end_to_end(pki, resolver: UnboundResolver, refuser: Refuser):
    records = write_records(RECORDS)
    with ServeProcess(records=records, extra_args=["--order", "stable"]) as serve, \
            stubzone_for(pki, resolver) as server:
        pid = resolver.proc.pid
        assert dig(resolver)[0] == "SERVFAIL"  # not programmed: unbound asks the refuser
        assert QNAME in refuser.asked

        # 1. the control plane's POST, with its client certificate over real TLS
        answer = server.request("POST", "/federations/myfederation", {"nameservers": [f"127.0.0.1:{serve.port}"]})
        assert answer.status == 200, answer
        # 2. the running unbound took it without a restart
        assert resolver.proc.poll() is None and resolver.proc.pid == pid
        assert resolver.forwards()["myfederation.svc.federation."] == ["127.0.0.1"]
        assert "Restart of unbound" in resolver.log  # unbound's word for an in-process reload
        # 3. dig through unbound: cluster foo's own shard first, then bar's external address
        assert dig(resolver) == ("NOERROR", ["10.0.3.64", "104.32.64.130"])

        # 4. DELETE stops the forwarding: the refuser is asked again, Federated-DNS no more
        asked = len(refuser.asked)
        assert server.request("DELETE", "/federations/myfederation").status == 200
        assert "myfederation.svc.federation." not in resolver.forwards()
        assert dig(resolver) == ("SERVFAIL", [])
        assert QNAME in refuser.asked[asked:]
        assert resolver.proc.pid == pid


def test_the_file_written_and_what_unbound_forwards(pki, resolver: UnboundResolver):
    with stubzone_for(pki, resolver) as server:
        body = {"nameservers": ["192.0.2.1", "192.0.2.2:5353", "[2001:db8::1]:5353"]}
        assert server.request("POST", "/federations/fed", body).status == 200
        text = (Path(resolver.directory) / "feddns" / "fed.conf").read_text()
        assert text == (
            "# Written by feddns stubzone for cluster foo; each POST /federations/fed rewrites it.\n"
            "server:\n"
            "    edns-client-string-opcode: 65245\n"
            "    edns-client-string: 192.0.2.1/32 foo\n"
            "    edns-client-string: 192.0.2.2/32 foo\n"
            "    edns-client-string: 2001:db8::1/128 foo\n"
            "forward-zone:\n"
            '    name: "fed.svc.federation."\n'
            "    forward-addr: 192.0.2.1@53\n"
            "    forward-addr: 192.0.2.2@5353\n"
            "    forward-addr: 2001:db8::1@5353\n"
        )
        assert resolver.forwards()["fed.svc.federation."] == ["192.0.2.1", "192.0.2.2", "2001:db8::1"]
        assert server.request("GET", "/federations/fed").body["nameservers"] == body["nameservers"]
        health = server.request("GET", "/healthz").body
        assert health["backend"] == "unbound" and health["store"].startswith("unbound 1.")


def test_a_forward_zone_from_elsewhere_is_left_alone(pki, resolver: UnboundResolver):
    text = resolver.conf.read_text()
    resolver.conf.write_text(text.replace("include-toplevel:", 'forward-zone:\n    name: "fed.svc.federation."\n'
                                          "    forward-addr: 192.0.2.250@53\ninclude-toplevel:"))
    resolver.control("reload")
    with stubzone_for(pki, resolver) as server:
        assert server.request("GET", "/federations/fed").body["nameservers"] == ["192.0.2.250"]
        for method in ("POST", "DELETE"):
            answer = server.request(method, "/federations/fed", {"nameservers": ["192.0.2.1"]})
            assert answer.status == 409, answer
            assert "from a configuration this endpoint did not write" in answer.body["error"]
    assert not (Path(resolver.directory) / "feddns" / "fed.conf").exists()
    assert resolver.forwards()["fed.svc.federation."] == ["192.0.2.250"]


def test_a_configuration_unbound_checkconf_refuses_is_never_loaded(pki, resolver: UnboundResolver):
    with stubzone_for(pki, resolver) as server:
        assert server.request("POST", "/federations/good", {"nameservers": ["192.0.2.1"]}).status == 200
        with open(resolver.conf, "a") as conf:  # an operator's typo, not loaded yet; a reload would stop unbound
            conf.write('forward-zone:\n    name: "corp.local."\n    forward-addr: 192.0.2.300\n')
        answer = server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.2"]})
        assert answer.status == 503
        assert answer.body["error"].startswith("unbound-checkconf failed: ")
        assert answer.body["mayHaveApplied"] is False
        assert not (Path(resolver.directory) / "feddns" / "fed.conf").exists()
        assert resolver.proc.poll() is None  # a reload with that file would have stopped unbound
        assert set(resolver.forwards()) == {".", "good.svc.federation."}


def test_unbound_control_unreachable_writes_no_file(pki, resolver: UnboundResolver):
    with stubzone_for(pki, resolver) as server:
        resolver.halt()
        answer = server.request("POST", "/federations/fed", {"nameservers": ["192.0.2.2"]})
        assert answer.status == 503 and answer.body["mayHaveApplied"] is False
        assert answer.body["error"].startswith("unbound-control list_forwards failed: ")
        assert list((Path(resolver.directory) / "feddns").glob("*.conf")) == []
        resolver.start()
        wait_until(lambda: server.request("GET", "/healthz").status == 200, timeout=10, what="healthz 200")
