"""RSS of `feddns stubzone` per backend, at rest and at --max-connections, next to a plain aiohttp TLS server.

For each backend this starts the real store (a fake API server for coredns and
kube-dns, etcd 3.4 for skydns v2 and v3, a real unbound) and the real
`feddns stubzone` process (defaults: --max-connections 256), then reads its
RSS (/proc/PID/status VmRSS):

- rest: after 20 POSTs and 20 GETs;
- 256 clients: 256 authenticated keep-alive connections, each after a GET;
- 1,000 idle: 1,000 TCP connections that send nothing (256 admitted);
- 1,000 started: 1,000 connections that each send the first byte of a
  ClientHello (256 admitted, each holding its TLS objects);
- after: once every connection closed and the memory was handed back.

Beside it, in the same run, the server a user would write instead: aiohttp's
own `web.TCPSite` with the same SSL context, under the same 1,000 idle
connections (no limit, TLS objects made at accept). The manifests' memory
limits (deploy/cluster-dns/) come from the largest figure with headroom.

Usage: python bench/stubzone_memory.py [--backends coredns,kube-dns,skydns-v2,skydns-v3,unbound]
"""

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.ports import wait_until  # noqa: E402
from harness.stubzone import Pki, StubzoneProcess, client_context, close_all, connect, make_pki  # noqa: E402
from tests.stubzone.stores import make_store  # noqa: E402  (the test suite's helpers)

MB = 1024 * 1024

PLAIN_AIOHTTP = """
import asyncio, ssl, sys
from aiohttp import web
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
context.load_verify_locations(sys.argv[3])
context.verify_mode = ssl.CERT_REQUIRED
async def main():
    app = web.Application()
    app.router.add_get("/healthz", lambda request: web.json_response({"status": "ok"}))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def flood(port: int, count: int, first: bytes = b"") -> list[socket.socket]:
    opened: list[socket.socket] = []
    connect(port, count, opened, first)
    time.sleep(1.0)  # let the server accept, admit or close each one
    return opened


def authenticated(server: StubzoneProcess, count: int) -> list[socket.socket]:
    opened = []
    context = client_context(server.pki)
    for _ in range(count):
        sock = context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=10),
                                   server_hostname="127.0.0.1")
        sock.sendall(b"GET /federations HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.recv(65536)
        opened.append(sock)
    return opened


def settle(pid: int, floor: int) -> int:
    """RSS once it stops falling (the endpoint hands memory back a second after closes)."""
    last = rss(pid)
    for _ in range(10):
        time.sleep(0.5)
        now = rss(pid)
        if abs(now - last) < MB // 4 and now < floor + 16 * MB:
            break
        last = now
    return rss(pid)


def measure(name: str, pki: Pki, directory: Path) -> dict[str, int]:
    store = make_store(name, directory)
    try:
        with StubzoneProcess(pki, *store.args()) as server:
            assert server.proc is not None
            pid = server.proc.pid
            for i in range(20):
                assert server.request("POST", "/federations/bench", {"nameservers": [f"192.0.2.{i + 1}"]}).status == 200
                assert server.request("GET", "/federations").status == 200
            figures = {"rest": rss(pid)}
            clients = authenticated(server, 256)
            figures["256 clients"] = rss(pid)
            close_all(clients)
            settle(pid, figures["rest"])
            idle = flood(server.port, 1000)
            figures["1,000 idle"] = rss(pid)
            close_all(idle)
            settle(pid, figures["rest"])
            started = flood(server.port, 1000, b"\x16")
            figures["1,000 started"] = rss(pid)
            close_all(started)
            figures["after"] = settle(pid, figures["rest"])
            wait_until(lambda: server.request("GET", "/healthz").status == 200, what="healthz")
        return figures
    finally:
        store.close()


def plain_aiohttp(pki: Pki) -> dict[str, int]:
    cert, key = pki.cert("server")
    proc = subprocess.Popen([sys.executable, "-c", PLAIN_AIOHTTP, cert, key, pki.ca], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        figures = {"rest": rss(proc.pid)}
        idle = flood(port, 1000)
        figures["1,000 idle"] = rss(proc.pid)
        close_all(idle)
        time.sleep(2)
        figures["after"] = rss(proc.pid)
        return figures
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="coredns,kube-dns,skydns-v2,skydns-v3,unbound")
    args = parser.parse_args()
    columns = ["rest", "256 clients", "1,000 idle", "1,000 started", "after"]
    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp) / "pki")
        print(f"{'server':<22}" + "".join(f"{column:>15}" for column in columns) + "   (RSS, MB)")
        for name in args.backends.split(","):
            figures = measure(name, pki, Path(tmp))
            print(f"{'stubzone ' + name:<22}" + "".join(f"{figures[c] / MB:>15.1f}" for c in columns), flush=True)
        plain = plain_aiohttp(pki)
        print(f"{'plain aiohttp TLS':<22}" + "".join(f"{plain[c] / MB:>15.1f}" if c in plain else f"{'-':>15}"
                                                   for c in columns))


if __name__ == "__main__":
    main()
