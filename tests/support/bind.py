"""A real BIND 9 for tests: an authoritative server with one dynamic zone.

``BindServer`` runs Debian's ``named`` (package ``bind9``) in the foreground on
127.0.0.1 at a port from ``free_port()``, with a throw-away directory holding
its config, the zone file, the update journal and its log. The zone accepts
RFC 2136 updates and AXFR signed with one TSIG key (RFC 8945), and nothing
unsigned. ``stop()``/``start()`` simulate an outage with the zone (and journal)
kept. ``dig()`` checks the zone the way an operator would, with ``dig``.
"""

import base64
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from harness.ports import free_port, wait_until

_NAMED_CONF = """\
options {{
    directory "{dir}";
    pid-file "{dir}/named.pid";
    session-keyfile "{dir}/session.key";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion no;
    notify no;
    dnssec-validation no;
    allow-query {{ any; }};
}};
controls {{ }};
include "{dir}/tsig.key";
zone "{zone}" {{
    type primary;
    file "{dir}/zone.db";
    update-policy {{ grant "{key}" subdomain {updates_below} A AAAA TXT; }};
    allow-transfer {{ {transfer} }};
}};
"""

_ZONE = """\
$ORIGIN {zone}
$TTL 300
@   SOA ns1 hostmaster 1 3600 600 86400 30
@   NS  ns1
ns1 A   127.0.0.1
{records}
"""


@dataclass(frozen=True)
class DigResult:
    """One ``dig`` answer: ``status`` (``NOERROR``, ``NXDOMAIN``...) and the
    answer section as ``(ttl, rdata text)`` pairs in the order BIND sent them."""

    status: str
    answers: tuple[tuple[int, str], ...]

    @property
    def rdata(self) -> list[str]:
        """The answers' rdata text, sorted (``["192.0.2.1", "192.0.2.2"]``)."""
        return sorted(text for _, text in self.answers)


class BindServer:
    """``named`` serving ``zone`` on 127.0.0.1:``port`` with TSIG key ``key_name``.

    ``records`` is zone-file text (relative to the zone) added to the zone at
    the first start: names that someone other than the code under test owns.
    ``key_path`` is the key in ``tsig-keygen`` format, usable as a secretFile.
    The key may update A, AAAA and TXT records at and below ``updates_below``
    (default: the whole zone), the policy docs/external-dns.md recommends.
    ``allow_transfer=False`` refuses AXFR to everyone, as some providers do.
    """

    def __init__(self, zone: str = "example.com.", key_name: str = "feddns.", records: str = "",
                 updates_below: str | None = None, allow_transfer: bool = True) -> None:
        self.zone = zone
        self.key_name = key_name
        self.algorithm = "hmac-sha256"
        self.secret = base64.b64encode(secrets.token_bytes(32)).decode()
        self.dir = tempfile.mkdtemp(prefix="feddns-bind-")
        self.port = free_port()
        self.key_path = os.path.join(self.dir, "tsig.key")
        self.log_path = os.path.join(self.dir, "named.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self._transfer = f'key "{key_name}";' if allow_transfer else "none;"
        self._updates_below = updates_below or zone
        self._write_files(records)

    def _write_files(self, records: str) -> None:
        with open(self.key_path, "w") as key:
            key.write(f'key "{self.key_name}" {{\n\talgorithm {self.algorithm};\n\tsecret "{self.secret}";\n}};\n')
        with open(os.path.join(self.dir, "named.conf"), "w") as conf:
            conf.write(_NAMED_CONF.format(dir=self.dir, port=self.port, zone=self.zone, key=self.key_name,
                                          transfer=self._transfer, updates_below=self._updates_below))
        with open(os.path.join(self.dir, "zone.db"), "w") as zone:
            zone.write(_ZONE.format(zone=self.zone, records=records))

    def start(self) -> None:
        """Start (or restart) named and wait until it answers for the zone."""
        binary = shutil.which("named") or "/usr/sbin/named"
        # -g: foreground, log to stderr; -n 1: one worker thread (small test machine).
        # named keeps its own copy of the log's descriptor, so ours closes at once.
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [binary, "-g", "-n", "1", "-c", os.path.join(self.dir, "named.conf")],
                stdout=log, stderr=log,
            )
        try:
            wait_until(self._answers, timeout=20, interval=0.05, what=f"named on 127.0.0.1:{self.port}")
        except BaseException:
            self.stop()
            raise

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"named exited with {self.proc.returncode}; log:\n{self.log()}")
        return self.dig(self.zone, "SOA").status == "NOERROR"

    def log(self) -> str:
        """named's log so far (its stderr), for failure messages."""
        with open(self.log_path, errors="replace") as log:
            return log.read()

    def stop(self) -> None:
        """Stop named (zone and journal kept); ``start()`` brings it back on the same port."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def dig(self, qname: str, qtype: str = "A") -> DigResult:
        """Ask named with ``dig`` (no recursion, one try, 2 s); status ``NO ANSWER`` when none came."""
        out = subprocess.run(
            ["dig", "@127.0.0.1", "-p", str(self.port), "+norecurse", "+tries=1", "+time=2",
             "+noall", "+comments", "+answer", qname, qtype],
            capture_output=True, text=True, timeout=10, check=False,  # a failed dig is "NO ANSWER"
        )
        status = re.search(r"status: ([A-Z]+)", out.stdout)
        if out.returncode != 0 or status is None:
            return DigResult("NO ANSWER", ())
        answers = tuple(
            (int(fields[1]), fields[4])
            for fields in (line.split(None, 4) for line in out.stdout.splitlines())
            if len(fields) == 5 and not fields[0].startswith(";") and fields[3] == qtype
        )
        return DigResult(status.group(1), answers)

    def serial(self) -> int:
        """The zone's SOA serial (it grows with every update BIND applies)."""
        answers = self.dig(self.zone, "SOA").answers
        return int(answers[0][1].split()[2])

