"""docs/stubzone-openapi.yaml against the running `feddns stubzone`: schemathesis, with a valid
client certificate, finds no 5xx and no response outside the documented statuses and schemas."""

import re
import subprocess
import sys
from pathlib import Path

import yaml

from harness.stubzone import StubzoneProcess

SPEC = Path(__file__).resolve().parents[2] / "docs" / "stubzone-openapi.yaml"
CHECKS = ",".join([
    "not_a_server_error", "status_code_conformance", "content_type_conformance",
    "response_schema_conformance", "response_headers_conformance", "negative_data_rejection",
])


def test_spec_documents_every_route_of_the_server():
    spec = yaml.safe_load(SPEC.read_text())
    operations = {(method.upper(), path) for path, item in spec["paths"].items()
                  for method in item if method != "parameters"}
    assert operations == {
        ("GET", "/federations"), ("GET", "/federations/{federation}"), ("POST", "/federations/{federation}"),
        ("DELETE", "/federations/{federation}"), ("GET", "/healthz"),
    }


def test_schemathesis_finds_no_5xx_and_no_schema_violation(stubzone: StubzoneProcess, pki, tmp_path):
    cert, key = pki.cert("client")
    log_start = len(stubzone.lines)
    command = [
        str(Path(sys.executable).parent / "st"), "run", str(SPEC), "--url", f"https://127.0.0.1:{stubzone.port}",
        "--request-cert", cert, "--request-cert-key", key, "--tls-verify", pki.ca,
        "--checks", CHECKS, "--max-examples", "40", "--seed", "20240601", "--workers", "1",
    ]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    answered = [line for line in stubzone.lines[log_start:] if 'client="CN=feddns-controller"' in line]
    statuses = {int(match.group(1)) for line in answered if (match := re.search(r" status=(\d+) ", line))}
    assert len(answered) >= 100, result.stdout[-3000:]
    assert {200, 400, 404, 415} <= statuses
    assert not any(status >= 500 for status in statuses)
