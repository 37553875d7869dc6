"""`feddns links --resolver` is HOST:PORT (docs/reference.md section 6): a missing port is refused naming the
flag, exit 2, before anything else is read."""

import subprocess
import sys

import pytest

from tests.links.support import Pki


def links(pki: Pki, *args: str) -> subprocess.CompletedProcess[str]:
    cert, key = pki.cert()
    return subprocess.run([sys.executable, "-m", "feddns", "links", "--listen", "127.0.0.1:0", "--cert", str(cert),
                           "--key", str(key), *args], check=False, capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("resolver,line", [
    ("127.0.0.1", "feddns links: error: --resolver '127.0.0.1' has no port (expected HOST:PORT)"),
    ("[::1]", "feddns links: error: --resolver '[::1]' has no port (expected HOST:PORT)"),
    ("dns.example:53", "feddns links: error: --resolver 'dns.example:53' is not an IP address "
                       "(hostnames are not accepted)"),
])
def test_resolver_without_a_port_or_not_an_address_exits_2_naming_the_flag(pki: Pki, resolver: str, line: str):
    result = links(pki, "--resolver", resolver)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [line], result.stderr
