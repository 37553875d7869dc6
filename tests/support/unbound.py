"""Runs Debian's ``unbound`` as a member cluster's DNS, for the whole-chain test and the demo.

Each resolver stands in for one cluster's DNS pod: a stub zone sends the
federation's domain to ``feddns serve``, and ``edns-client-string`` tags those
queries with the cluster's name in EDNS0 option 65245 (CONTRACTS 3, rule 1), as
CoreDNS's ``rewrite edns0 local set 0xfedd C`` does in deploy/. Upstream order is
kept (``rrset-roundrobin: no``) so that what Federated-DNS ordered reaches the pod.
"""

import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rdatatype

from tests.support.process import stop_process
from tests.support.ports import free_port, wait_until

UNBOUND = shutil.which("unbound") or "/usr/sbin/unbound"
CHECKCONF = shutil.which("unbound-checkconf") or "/usr/sbin/unbound-checkconf"
CLUSTER_OPTION = 65245


def config_text(*, port: int, directory: str, cluster: str, stub_zone: str, stub_port: int,
                cache_max_ttl: int) -> str:
    """unbound.conf for one cluster's resolver on ``127.0.0.1@port`` (ports as ints; TTL in seconds)."""
    return f"""server:
    interface: 127.0.0.1@{port}
    do-ip6: no
    access-control: 127.0.0.0/8 allow
    do-not-query-localhost: no
    username: ""
    chroot: ""
    directory: "{directory}"
    pidfile: "{directory}/unbound.pid"
    use-syslog: no
    logfile: ""
    verbosity: 1
    module-config: "iterator"
    qname-minimisation: no
    rrset-roundrobin: no
    cache-min-ttl: 0
    cache-max-ttl: {cache_max_ttl}
    cache-max-negative-ttl: {cache_max_ttl}
    edns-client-string: 127.0.0.0/8 {cluster}
    edns-client-string-opcode: {CLUSTER_OPTION}
stub-zone:
    name: "{stub_zone}"
    stub-addr: 127.0.0.1@{stub_port}
"""


class UnboundResolver:
    """``unbound -d -c CONF`` in a temporary directory, answering on ``127.0.0.1:port``.

    ``start()`` checks the config with ``unbound-checkconf`` (RuntimeError with its
    output when refused) and waits until unbound answers; ``log`` holds its stderr.
    """

    def __init__(self, cluster: str, *, stub_zone: str, stub_port: int, cache_max_ttl: int = 1) -> None:
        self.cluster = cluster
        self.directory = tempfile.mkdtemp(prefix=f"unbound-{cluster}-")
        self.port = free_port()
        self.conf = Path(self.directory) / "unbound.conf"
        self.conf.write_text(config_text(port=self.port, directory=self.directory, cluster=cluster,
                                         stub_zone=stub_zone, stub_port=stub_port, cache_max_ttl=cache_max_ttl))
        self.proc: "subprocess.Popen[str] | None" = None
        self.log = ""

    def start(self, timeout: float = 15.0) -> "UnboundResolver":
        check = subprocess.run([CHECKCONF, str(self.conf)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"unbound-checkconf refused {self.conf}:\n{check.stdout}{check.stderr}")
        self.proc = subprocess.Popen([UNBOUND, "-d", "-c", str(self.conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        wait_until(self._answers, timeout=timeout, what=f"unbound for {self.cluster} on port {self.port}")
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log += line

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"unbound for {self.cluster} exited with {self.proc.returncode}:\n{self.log}")
        try:
            # A name outside the stub zone with no upstream: any reply means unbound is up.
            self.query("localhost.", "A", timeout=0.3)
        except (dns.exception.Timeout, OSError):
            return False
        return True

    def query(self, qname: str, qtype: str = "A", timeout: float = 3.0) -> dns.message.Message:
        """Ask as a pod would: RD=1, no cluster option of its own."""
        return dns.query.udp(dns.message.make_query(qname, qtype), "127.0.0.1", port=self.port, timeout=timeout)

    def addresses(self, qname: str, qtype: str = "A") -> list[str]:
        """The addresses of the answer, in order ([] for NODATA and NXDOMAIN)."""
        rdtype = dns.rdatatype.from_text(qtype)
        reply = self.query(qname, qtype)
        return [rd.address for rrset in reply.answer if rrset.rdtype == rdtype for rd in rrset]

    def stop(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.directory, ignore_errors=True)
