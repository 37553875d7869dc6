"""Runs the real ``feddns serve`` command for tests and queries it with dnspython."""

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

import dns.edns
import dns.message
import dns.query
import dns.rdatatype

from harness.process import ChildProcess, children

CLUSTER_OPTION = 65245
_LISTEN = re.compile(r"listening on udp\+tcp (\S+):(\d+)")
_METRICS = re.compile(r"metrics on (http://\S+)/metrics")


class ServeProcess:
    """``python -m feddns serve --listen 127.0.0.1:0 ...`` as a child process, serving
    ``etcd_url``, the ``records`` file or (``example``) the built-in example.

    ``start()`` waits until the server has said where it listens (and, with ``--metrics``,
    where its metrics are); ``port`` is its UDP and TCP port; ``stop()`` ends it.
    ``log`` holds what it wrote so far; ``child`` is its :class:`ChildProcess`.

    ``workers`` is ``--workers``: 1 (one process, as most tests want it on two shared cores)
    unless a test asks for more (or ``extra_args`` says ``--workers``); ``None`` leaves the
    flag out (the CPUs it may use).
    """

    def __init__(self, *, etcd_url: str | None = None, prefix: str = "", records: str | None = None,
                 example: bool = False, extra_args: Sequence[str] = (), workers: int | None = 1,
                 start_timeout: float = 15.0) -> None:
        chosen = ["--workers", str(workers)] if workers is not None else []  # before extra_args, which may say again
        args = [sys.executable, "-m", "feddns", "serve", "--listen", "127.0.0.1:0", *chosen, *extra_args]
        if etcd_url:
            args += ["--etcd", etcd_url, "--etcd-prefix", prefix]
        if records:
            args += ["--records", records]
        if example:
            args += ["--example"]
        self.args = args
        self.child = ChildProcess(args, ready=_LISTEN, name="feddns serve")
        self.port = 0
        self.metrics_url: str | None = None
        self.start_timeout = start_timeout
        """Seconds ``with`` waits for "listening": with ``--workers N`` and etcd, said once the
        workers forked from one read of the records answer."""

    def start(self, timeout: float = 15.0) -> None:
        listening = self.child.start(timeout)
        assert listening is not None
        self.port = int(listening.group(2))
        if "--metrics" in self.args:
            self.metrics_url = self.child.wait_for(_METRICS, timeout=timeout).group(1)

    @property
    def proc(self) -> "subprocess.Popen[str] | None":
        return self.child.proc

    @property
    def log(self) -> str:
        return self.child.log

    def stop(self) -> None:
        self.child.stop()

    def __enter__(self) -> "ServeProcess":
        self.start(self.start_timeout)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def query(self, qname: str, qtype: str = "A", cluster: str | None = None, tcp: bool = False,
              timeout: float = 2.0, **make_query_args: object) -> dns.message.Message:
        """Ask the server; ``cluster`` adds EDNS0 option 65245 with that name (docs/reference.md section 3)."""
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
        return self.child.rss()

    def worker_pids(self) -> list[int]:
        """The process ids of its workers (``--workers`` over 1), from ``/proc``."""
        assert self.proc is not None
        return sorted(children(self.proc.pid))

    def metrics(self) -> dict[str, float]:
        """The samples of ``/metrics`` (needs ``--metrics``), by name with labels."""
        import urllib.request

        assert self.metrics_url is not None, "start with --metrics 127.0.0.1:0"
        with urllib.request.urlopen(self.metrics_url + "/metrics", timeout=5) as reply:
            text = reply.read().decode()
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


def edns_options(cluster: str | None = None, ecs: str | None = None) -> list[dns.edns.Option]:
    """EDNS0 options of a query: option 65245 naming ``cluster`` (docs/reference.md section 3)
    and an ECS option (RFC 7871) for the subnet ``ecs`` (``"10.240.1.0/24"``), each when given."""
    options: list[dns.edns.Option] = []
    if cluster is not None:
        options.append(dns.edns.GenericOption(CLUSTER_OPTION, cluster.encode()))
    if ecs is not None:
        address, prefix = ecs.split("/")
        options.append(dns.edns.ECSOption(address, int(prefix)))
    return options


_records_dir: str | None = None
"""The directory of the files ``write_records`` wrote in this process, removed when it exits."""


def write_records(text: str) -> str:
    """Write a YAML records file (docs/reference.md section 6) to a new path and return it.

    The files go into one temporary directory of this process, removed (``atexit``) when it exits.
    """
    global _records_dir  # noqa: PLW0603 - made on first use, once per process
    if _records_dir is None:
        _records_dir = tempfile.mkdtemp(prefix="feddns-records-")
        atexit.register(shutil.rmtree, _records_dir, ignore_errors=True)
    handle, path = tempfile.mkstemp(suffix=".yaml", dir=_records_dir)
    with os.fdopen(handle, "w") as out:
        out.write(text)
    return path
