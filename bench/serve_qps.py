"""Queries per second of `feddns serve` for cached A answers with the 0xFEDD option.

Runs dnsperf (Debian's `dnsperf`) against `feddns serve` on the example federation,
then against bench/fixed_server.py (a bare uvloop server replying with fixed bytes)
with the same query, one after the other on loopback, and prints both figures and
their ratio. Both servers run one process; dnsperf takes the other core.

Usage: python bench/serve_qps.py [--seconds 10] [--clients 4]
"""

import argparse
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dns.edns
import dns.message
import dns.query

ROOT = Path(__file__).resolve().parent.parent
QNAME = "myservice.myns.myfederation.svc.federation."
OPTION = "65245:666f6f"  # cluster "foo"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_answering(port: int) -> bytes:
    query = dns.message.make_query(QNAME, "A", use_edns=0, options=[dns.edns.GenericOption(65245, b"foo")])
    deadline = time.monotonic() + 15
    while True:
        try:
            return dns.query.udp(query, "127.0.0.1", port=port, timeout=0.5).to_wire()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def dnsperf(port: int, seconds: int, clients: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as data:
        data.write(f"{QNAME} A\n")
    out = subprocess.run(
        ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", data.name, "-l", str(seconds),
         "-c", str(clients), "-T", "1", "-q", "500", "-E", OPTION],
        capture_output=True, text=True, check=True,
    ).stdout
    lost = re.search(r"Queries lost:\s+(\d+)", out)
    qps = re.search(r"Queries per second:\s+([\d.]+)", out)
    if not qps:
        raise RuntimeError(out)
    print(f"    dnsperf: {qps.group(1)} qps, lost {lost.group(1) if lost else '?'}", file=sys.stderr)
    return float(qps.group(1))


def run(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    if not shutil.which("dnsperf"):
        sys.exit("dnsperf is missing: apt-get install dnsperf")

    port = free_port()
    server = run([sys.executable, "-m", "feddns", "serve", "--listen", f"127.0.0.1:{port}"])
    try:
        reply = wait_answering(port)
        feddns_qps = dnsperf(port, args.seconds, args.clients)
    finally:
        server.terminate()
        server.wait()

    port = free_port()
    fixed = run([sys.executable, str(ROOT / "bench" / "fixed_server.py"), str(port), reply.hex()])
    try:
        wait_answering(port)
        fixed_qps = dnsperf(port, args.seconds, args.clients)
    finally:
        fixed.terminate()
        fixed.wait()

    print(f"feddns serve, cached A with 0xFEDD option: {feddns_qps:,.0f} queries/s")
    print(f"bare uvloop fixed-bytes server:             {fixed_qps:,.0f} queries/s")
    print(f"ratio: {feddns_qps / fixed_qps:.2f}")


if __name__ == "__main__":
    main()
