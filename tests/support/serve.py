"""Runs the real ``feddns serve`` command for tests and queries it with dnspython."""

import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence

import dns.edns
import dns.message
import dns.query
import dns.rdatatype

from tests.support.ports import wait_until
from tests.support.process import stop_process

CLUSTER_OPTION = 65245
_LISTEN = re.compile(r"listening on udp\+tcp (\S+):(\d+)")
_METRICS = re.compile(r"metrics on (http://\S+)/metrics")


class ServeProcess:
    """``python -m feddns serve --listen 127.0.0.1:0 ...`` as a subprocess.

    ``start()`` waits until the server has said where it listens and answers
    a query; ``port`` is its UDP and TCP port; ``stop()`` ends it.
    ``log`` holds what it wrote to stderr so far.
    """

    def __init__(self, *, etcd_url: str | None = None, prefix: str = "", records: str | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        args = [sys.executable, "-m", "feddns", "serve", "--listen", "127.0.0.1:0", *extra_args]
        if etcd_url:
            args += ["--etcd", etcd_url, "--etcd-prefix", prefix]
        if records:
            args += ["--records", records]
        self.args = args
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.metrics_url: str | None = None
        self.log = ""
        self._lines: list[str] = []

    def start(self, timeout: float = 15.0) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
        threading.Thread(target=self._read, daemon=True).start()
        wait_until(self._listening, timeout=timeout, what="feddns serve to listen")

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self._lines.append(line)
            self.log += line

    def _listening(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None and not self.port:
            raise RuntimeError(f"feddns serve exited with {self.proc.returncode}:\n{self.log}")
        for line in list(self._lines):
            if m := _LISTEN.search(line):
                self.port = int(m.group(2))
            if m := _METRICS.search(line):
                self.metrics_url = m.group(1)
        wants_metrics = "--metrics" in self.args
        return bool(self.port) and (self.metrics_url is not None or not wants_metrics)

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> "ServeProcess":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def query(self, qname: str, qtype: str = "A", cluster: str | None = None, tcp: bool = False,
              timeout: float = 2.0, **make_query_args: object) -> dns.message.Message:
        """Ask the server; ``cluster`` adds EDNS0 option 65245 with that name (CONTRACTS 3)."""
        options = list(make_query_args.pop("options", []))  # type: ignore[arg-type]
        if cluster is not None:
            options.append(dns.edns.GenericOption(CLUSTER_OPTION, cluster.encode()))
        use_edns = make_query_args.pop("use_edns", 0 if options else False)
        if use_edns is not False:
            make_query_args["options"] = options
        message = dns.message.make_query(qname, qtype, use_edns=use_edns, **make_query_args)
        ask = dns.query.tcp if tcp else dns.query.udp
        return ask(message, "127.0.0.1", port=self.port, timeout=timeout)

    def rss(self) -> int:
        """Resident memory of the server process in bytes (VmRSS)."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS line")

    def metrics(self) -> dict[str, float]:
        """The samples of ``/metrics`` (needs ``--metrics``), by name with labels."""
        import urllib.request

        assert self.metrics_url is not None, "start with --metrics 127.0.0.1:0"
        text = urllib.request.urlopen(self.metrics_url + "/metrics", timeout=5).read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def addresses(self, qname: str, qtype: str = "A", cluster: str | None = None, tcp: bool = False) -> list[str]:
        """The addresses in the answer, in order ([] for NODATA and NXDOMAIN)."""
        reply = self.query(qname, qtype, cluster, tcp)
        rdtype = dns.rdatatype.from_text(qtype)
        return [rd.address for rrset in reply.answer if rrset.rdtype == rdtype for rd in rrset]


def write_records(text: str) -> str:
    """Write a YAML records file (CONTRACTS 6) to a temporary path and return it."""
    handle, path = tempfile.mkstemp(suffix=".yaml", prefix="feddns-records-")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    return path
