"""testssl (Debian's testssl.sh) against the running endpoint on loopback: the protocols, the cipher
categories and the vulnerability checks, without network lookups. It must report no vulnerability and no
CBC suite (docs/stubzone.md, "TLS"). About 25 s."""

import json
import subprocess

from tests.stubzone.support import StubzoneProcess

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
    for check in ("heartbleed", "CCS", "ROBOT", "secure_client_renego", "POODLE_SSL", "SWEET32", "FREAK", "DROWN",
                  "LOGJAM", "BEAST", "RC4"):
        assert findings[check]["severity"] == "OK", findings[check]
