"""testssl (Debian's testssl.sh) against the running endpoint on loopback: the protocols, the cipher
categories and the vulnerability checks, without network lookups. It must report no vulnerability and no
CBC suite (docs/stubzone.md, "TLS"). About 25 s."""

import contextlib
import json
import subprocess
import time

from harness.stubzone import StubzoneProcess

COMMAND = ["testssl", "--quiet", "--warnings", "batch", "--nodns", "none", "--color", "0",
           "--protocols", "--std", "--vulnerable"]
"""The command of docs/stubzone.md, less ``--jsonfile`` and the address."""


def test_testssl_reports_no_vulnerability_and_no_cbc(stubzone: StubzoneProcess, tmp_path):
    report = tmp_path / "testssl.json"
    result = subprocess.run([*COMMAND, "--jsonfile", str(report), f"127.0.0.1:{stubzone.port}"],
                            capture_output=True, text=True, timeout=180, check=False)
    assert report.exists(), result.stdout + result.stderr
    findings = {finding["id"]: finding for finding in json.loads(report.read_text())}
    print("\n".join(f"{f['id']}: {f['severity']} {f['finding']}" for f in findings.values()))
    flagged = {key: f["finding"] for key, f in findings.items() if f["severity"] in ("LOW", "MEDIUM", "HIGH",
                                                                                     "CRITICAL")}
    assert not flagged
    assert findings["cipherlist_AVERAGE"]["finding"] == "not offered"  # "Obsolete CBC ciphers"
    assert findings["cipherlist_3DES_IDEA"]["finding"] == "not offered"
    assert findings["LUCKY13"]["finding"].startswith("not vulnerable")
    assert [findings[v]["finding"] for v in ("SSLv2", "SSLv3", "TLS1", "TLS1_1")] == ["not offered"] * 4
    assert findings["TLS1_2"]["finding"] == "offered"
    assert findings["TLS1_3"]["finding"].startswith("offered")
    for check in ("heartbleed", "CCS", "ROBOT", "POODLE_SSL", "SWEET32", "FREAK", "DROWN", "LOGJAM", "BEAST", "RC4"):
        assert findings[check]["severity"] == "OK", findings[check]
    # Now and then testssl's own client is turned away before it can ask (WARN "client x509-based
    # authentication prevents this from being tested"); test_a_client_cannot_renegotiate asks with
    # a certificate the server accepts.
    renegotiation = findings["secure_client_renego"]
    untested = renegotiation["severity"] == "WARN" and "authentication prevents this" in renegotiation["finding"]
    assert renegotiation["severity"] == "OK" or untested, renegotiation


def renegotiate(stubzone: StubzoneProcess) -> str:
    """What ``openssl s_client`` prints when an authenticated TLS 1.2 client asks to renegotiate
    (``R`` alone on its input, as s_client reads its commands), then sends a request on the
    same connection."""
    cert, key = stubzone.pki.cert("client")
    with subprocess.Popen(["openssl", "s_client", "-tls1_2", "-connect", f"127.0.0.1:{stubzone.port}",
                           "-CAfile", stubzone.pki.ca, "-cert", cert, "-key", key],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as client:
        assert client.stdin is not None
        for line, pause in (("R\n", 1.0), ("GET /healthz HTTP/1.0\r\n\r\n", 1.0)):
            with contextlib.suppress(BrokenPipeError):
                client.stdin.write(line)
                client.stdin.flush()
            time.sleep(pause)
        with contextlib.suppress(BrokenPipeError):
            client.stdin.close()
        assert client.stdout is not None
        output = client.stdout.read()
        client.wait(timeout=30)
        return output


def test_a_client_cannot_renegotiate(stubzone: StubzoneProcess):
    """testssl cannot always test client-initiated renegotiation behind client-certificate
    authentication (it says WARN then); this asks with a certificate the server accepts."""
    output = renegotiate(stubzone)
    assert "RENEGOTIATING" in output, output
    assert ":no renegotiation:" in output, output  # the server's no_renegotiation alert (RFC 5246 7.2.2)
    assert "HTTP/1.1 200" not in output, output
