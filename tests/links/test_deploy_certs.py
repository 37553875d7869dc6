"""deploy/links/certs.sh: the certificates it makes with `feddns certs` let the API server reach the webhook.

The API server dials ``https://feddns-links.feddns-links.svc:443/mutate`` and trusts only
the webhook configuration's caBundle; this test does the same handshake against the real
`feddns links` serving the Secret's certificate.
"""

import base64
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import yaml

from tests.links.support import LinksProcess, Pki, admission_review, pod

REPO = Path(__file__).parents[2]
DIALED = "feddns-links.feddns-links.svc"


def test_certs_script_makes_a_secret_and_ca_bundle_the_api_server_can_use(tmp_path: Path, kubeconfig: str):
    out = tmp_path / "pki"
    result = subprocess.run(["bash", str(REPO / "deploy/links/certs.sh"), str(out)], capture_output=True, text=True,
                            timeout=120, check=False, env=dict(os.environ, PYTHON=sys.executable))
    assert result.returncode == 0, result.stderr
    secret = yaml.safe_load((out / "tls.yaml").read_text())
    webhook = yaml.safe_load((out / "webhook.yaml").read_text())
    for obj in (secret, webhook):
        kubernetes_validate.validate(obj, "1.30.0", strict=True)
    assert oct((out / "tls.yaml").stat().st_mode & 0o777) == "0o600"
    (hook,) = webhook["webhooks"]
    ca_bundle = base64.b64decode(hook["clientConfig"]["caBundle"])
    assert ca_bundle == (out / "ca.crt").read_bytes()
    (tmp_path / "tls.crt").write_text(secret["stringData"]["tls.crt"])
    (tmp_path / "tls.key").write_text(secret["stringData"]["tls.key"])

    process = LinksProcess(Pki(out), kubeconfig=kubeconfig, resolver="127.0.0.1:53")
    process.args[process.args.index("--cert") + 1] = str(tmp_path / "tls.crt")
    process.args[process.args.index("--key") + 1] = str(tmp_path / "tls.key")
    process.start()
    try:
        trusted = ssl.create_default_context(cadata=ca_bundle.decode())
        connection = http.client.HTTPSConnection(DIALED, process.port, context=trusted, timeout=10)
        # the name the API server dials, on loopback: verified against the caBundle alone
        connection.sock = trusted.wrap_socket(socket.create_connection(("127.0.0.1", process.port), timeout=10),
                                              server_hostname=DIALED)
        assert connection.sock.version() in ("TLSv1.2", "TLSv1.3")
        connection.request("POST", hook["clientConfig"]["service"]["path"], body=json.dumps(admission_review(pod())),
                           headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        assert answer.status == 200 and json.loads(answer.read())["response"]["allowed"] is True
        connection.close()
    finally:
        assert process.stop() == 0
