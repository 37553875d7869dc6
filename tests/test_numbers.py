"""Every number flag of every command refuses what is not a finite number in its range (``nan``, ``inf``,
``1e10``, 0, a negative number) with exit status 2 and one line naming the flag, before it opens a socket
or reads a file (feddns/numbers.py; docs/reference.md section 6). Before, ``feddns status --timeout nan``
printed a traceback and ``--timeout inf`` or ``1e10`` ended in a false "etcd unreachable"."""

import pytest

from feddns.cli import main

ETCD = ["--etcd", "http://127.0.0.1:1"]
STUBZONE = ["stubzone", "--cert", "server.crt", "--key", "server.key", "--client-ca", "ca.crt", "--allow", "c",
            "--backend", "skydns", *ETCD]
LINKS = ["links", "--cert", "server.crt", "--key", "server.key", "--resolver", "127.0.0.1:53"]
FLAGS = {
    "status --timeout": ["status", *ETCD, "--timeout"],
    "explain --timeout": ["explain", "a.b.c.svc.federation.", "--from", "foo", "--example", "--timeout"],
    "serve --tcp-idle-timeout": ["serve", "--example", "--listen", "127.0.0.1:0", "--tcp-idle-timeout"],
    "stubzone --backend-timeout": [*STUBZONE, "--backend-timeout"],
    "stubzone --probe-interval": [*STUBZONE, "--probe-interval"],
    "stubzone --tls-reload-interval": [*STUBZONE, "--tls-reload-interval"],
    "stubzone --tls-handshake-timeout": [*STUBZONE, "--tls-handshake-timeout"],
    "stubzone --request-timeout": [*STUBZONE, "--request-timeout"],
    "links --idle-timeout": [*LINKS, "--idle-timeout"],
    "links --gating-timeout": [*LINKS, "--gating-timeout"],
    "certs --days": ["certs", "issue-client", "--cn", "c", "--dir", "/nonexistent", "--days"],
}
VALUES = ["nan", "inf", "-inf", "1e10", "0", "-1"]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("flag", list(FLAGS))
def test_a_number_flag_out_of_range_exits_2_with_one_line_naming_it(capsys, monkeypatch, flag, value):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = [*FLAGS[flag][:-1], f"{FLAGS[flag][-1]}={value}"]  # = : argparse reads -inf alone as a flag
    try:
        status = main(args)
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2, (out, err)
    assert len(lines) == 1, lines
    name = flag.split()[1]
    assert f"{name} {float(value):g} is not a number of " in lines[0], lines[0]
    assert lines[0].startswith(f"feddns {flag.split()[0]}"), lines[0]
