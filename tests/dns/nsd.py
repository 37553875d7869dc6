"""A real NSD for tests: the authoritative server whose answers the protocol corners are compared with.

``NsdServer`` runs Debian's ``nsd`` (package ``nsd``) in the foreground on 127.0.0.1 at a port from
``free_port()``, as bench/serve_qps.py runs it for its figures: one server process, rate limiting off,
no zone transfers allowed to anyone (no ``provide-xfr``), and NSD's default EDNS buffer (1,232 bytes).
Its config and zone file go into a throw-away directory. ``start()`` returns once NSD answers the
zone's SOA over UDP.
"""

import shutil
import socket
import struct
import tempfile
from pathlib import Path
from typing import Self

from harness.ports import free_port, wait_until
from harness.process import ChildProcess


def nsd_conf(*, port: int, directory: Path, zone: str, zonefile: str, verbosity: int = 1,
             logfile: bool = False) -> str:
    """nsd.conf of one server process on 127.0.0.1:``port`` serving ``zone`` from ``directory/zonefile``:
    rate limiting off, no zone transfers allowed, NSD's default EDNS buffer; ``logfile``: NSD logs to
    ``directory/nsd.log`` instead of its standard error. Also bench/serve_qps.py's NSD."""
    log = f'\n    logfile: "{directory}/nsd.log"' if logfile else ""
    return f"""\
server:
    ip-address: 127.0.0.1@{port}
    server-count: 1
    username: ""
    chroot: ""
    zonesdir: "{directory}"
    database: ""
    zonelistfile: "{directory}/zone.list"
    xfrdfile: "{directory}/xfrd.state"
    xfrdir: "{directory}"
    pidfile: "{directory}/nsd.pid"{log}
    verbosity: {verbosity}
    hide-version: yes
    rrl-ratelimit: 0
    rrl-whitelist-ratelimit: 0
remote-control:
    control-enable: no
zone:
    name: "{zone}"
    zonefile: "{zonefile}"
"""


_ZONE = """\
$ORIGIN {zone}
$TTL 30
@       SOA ns.dns hostmaster 1 7200 1800 86400 30
@       NS  ns.dns
ns.dns  A   127.0.0.1
{records}
"""


def soa_query(zone: str) -> bytes:
    """A plain query for ``zone``'s SOA in wire form (no EDNS), built by hand: what the readiness check sends."""
    name = b"".join(bytes((len(label),)) + label.encode() for label in zone.split(".") if label) + b"\0"
    return struct.pack("!HHHHHH", 0x5EED, 0, 1, 0, 0, 0) + name + struct.pack("!HH", 6, 1)


class NsdServer:
    """``nsd`` serving ``zone`` with ``records`` (zone-file text relative to the zone, added after its
    SOA, its NS ``ns.dns`` and that name's A record) on 127.0.0.1:``port``, UDP and TCP."""

    def __init__(self, records: str, zone: str = "federation.") -> None:
        self.zone = zone
        self.dir = Path(tempfile.mkdtemp(prefix="feddns-nsd-"))
        self.port = free_port()
        (self.dir / "zone").write_text(_ZONE.format(zone=zone, records=records))
        conf = self.dir / "nsd.conf"
        conf.write_text(nsd_conf(port=self.port, directory=self.dir, zone=zone, zonefile="zone"))
        binary = shutil.which("nsd") or "/usr/sbin/nsd"
        self.child = ChildProcess([binary, "-d", "-c", str(conf)], ready=r"nsd started", name="nsd")

    def start(self) -> None:
        """Start NSD and wait until it answers the zone's SOA."""
        self.child.start(timeout=20)
        try:
            wait_until(self._answers, timeout=10, what=f"nsd on 127.0.0.1:{self.port}")
        except BaseException:
            self.stop()
            raise

    def _answers(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(0.2)
            sock.sendto(soa_query(self.zone), ("127.0.0.1", self.port))
            try:
                return sock.recv(65535)[:2] == b"\x5e\xed"
            except TimeoutError:
                return False

    def stop(self) -> None:
        """Stop NSD and remove its directory."""
        self.child.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
