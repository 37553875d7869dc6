"""Runs Debian's ``unbound`` as a member cluster's DNS, for the whole-chain test and the demo.

Each resolver stands in for one cluster's DNS pod: a stub zone sends the
federation's domain to ``feddns serve``, and ``edns-client-string`` tags those
queries with the cluster's name in EDNS0 option 65245 (docs/reference.md section 3, rule 1), as
CoreDNS's ``rewrite edns0 local set 0xfedd C`` does in deploy/. Upstream order is
kept (``rrset-roundrobin: no``) so that what Federated-DNS ordered reaches the pod.

A ``programmable`` resolver has no stub zone of its own: it is what
``feddns stubzone --backend unbound`` programs. It has remote control on a
unix socket in its directory (``control()`` runs ``unbound-control``), ends its
unbound.conf with ``include-toplevel: "<dir>/feddns/*.conf"``, and sends every
other name to ``default_port`` on 127.0.0.1 (nothing ever leaves loopback).
``restart()`` stops and starts it with its directory kept.
"""

import shutil
import subprocess
import tempfile
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rdatatype

from harness.ports import free_port, wait_until
from harness.process import ChildProcess

UNBOUND = shutil.which("unbound") or "/usr/sbin/unbound"
CHECKCONF = shutil.which("unbound-checkconf") or "/usr/sbin/unbound-checkconf"
CONTROL = shutil.which("unbound-control") or "/usr/sbin/unbound-control"
CLUSTER_OPTION = 65245


def config_text(*, port: int, directory: str, cluster: str, stub_zone: str, stub_port: int,
                cache_max_ttl: int) -> str:
    """unbound.conf for one cluster's resolver on ``127.0.0.1@port`` (ports as ints; TTL in seconds)."""
    return _server_clause(port, directory, cache_max_ttl) + f"""\
    edns-client-string: 127.0.0.0/8 {cluster}
    edns-client-string-opcode: {CLUSTER_OPTION}
stub-zone:
    name: "{stub_zone}"
    stub-addr: 127.0.0.1@{stub_port}
"""


def programmable_config_text(*, port: int, directory: str, default_port: int, cache_max_ttl: int) -> str:
    """unbound.conf of a resolver ``feddns stubzone --backend unbound`` programs (see the module doc)."""
    return _server_clause(port, directory, cache_max_ttl) + f"""\
remote-control:
    control-enable: yes
    control-interface: "{directory}/unbound.ctl"
    control-use-cert: no
forward-zone:
    name: "."
    forward-addr: 127.0.0.1@{default_port}
include-toplevel: "{directory}/feddns/*.conf"
"""


def _server_clause(port: int, directory: str, cache_max_ttl: int) -> str:
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
"""


class UnboundResolver:
    """``unbound -d -c CONF`` in a temporary directory, answering on ``127.0.0.1:port``.

    ``start()`` checks the config with ``unbound-checkconf`` (RuntimeError with its
    output when refused) and waits until unbound answers; ``log`` holds what it wrote.
    """

    def __init__(self, cluster: str, *, stub_zone: str = "", stub_port: int = 0, cache_max_ttl: int = 1,
                 programmable: bool = False, default_port: int | None = None) -> None:
        self.cluster = cluster
        self.directory = tempfile.mkdtemp(prefix=f"unbound-{cluster}-")
        self.port = free_port()
        self.conf = Path(self.directory) / "unbound.conf"
        if programmable:
            (Path(self.directory) / "feddns").mkdir()  # unbound refuses an include glob in a missing directory
            text = programmable_config_text(port=self.port, directory=self.directory,
                                            default_port=default_port or free_port(), cache_max_ttl=cache_max_ttl)
        else:
            text = config_text(port=self.port, directory=self.directory, cluster=cluster,
                               stub_zone=stub_zone, stub_port=stub_port, cache_max_ttl=cache_max_ttl)
        self.conf.write_text(text)
        self.child = ChildProcess([UNBOUND, "-d", "-c", str(self.conf)], name=f"unbound for {cluster}")

    def start(self, timeout: float = 15.0) -> "UnboundResolver":
        check = subprocess.run([CHECKCONF, str(self.conf)], capture_output=True, text=True, check=False)
        if check.returncode != 0:
            raise RuntimeError(f"unbound-checkconf refused {self.conf}:\n{check.stdout}{check.stderr}")
        self.child.start()
        try:
            wait_until(self._answers, timeout=timeout, what=f"unbound for {self.cluster} on port {self.port}")
        except BaseException:
            self.child.stop()
            raise
        return self

    @property
    def log(self) -> str:
        return self.child.log

    @property
    def proc(self) -> "subprocess.Popen[str] | None":
        return self.child.proc

    def _answers(self) -> bool:
        if not self.child.running:
            raise RuntimeError(f"unbound for {self.cluster} exited:\n{self.log}")
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

    def control(self, *command: str) -> str:
        """``unbound-control -c CONF COMMAND``'s output; RuntimeError when it fails."""
        result = subprocess.run([CONTROL, "-c", str(self.conf), *command], capture_output=True, text=True, timeout=20,
                                check=False)
        if result.returncode != 0:
            raise RuntimeError(f"unbound-control {' '.join(command)}: {result.stdout}{result.stderr}")
        return result.stdout

    def forwards(self) -> dict[str, list[str]]:
        """``{zone: [address, ...]}`` from ``unbound-control list_forwards`` (what unbound uses now)."""
        zones = {}
        for line in self.control("list_forwards").splitlines():
            words = line.split()
            if "forward" in words:
                zones[words[0]] = [w for w in words[words.index("forward") + 1:] if not w.startswith("+")]
        return zones

    def restart(self) -> None:
        """Stop unbound and start it again on the same port and directory."""
        self.child.stop()
        self.start()

    def halt(self) -> None:
        """Stop unbound, keeping its directory (``start()`` brings it back)."""
        self.child.stop()

    def stop(self) -> None:
        self.child.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
