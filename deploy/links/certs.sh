#!/usr/bin/env bash
# Makes the webhook's certificates with `feddns certs` and writes, into DIR:
#   ca.crt ca.key server.crt server.key   the CA and the server certificate for the names the
#                                          API server dials (feddns-links.feddns-links.svc)
#   tls.yaml                               Secret feddns-links-tls with the server certificate
#   webhook.yaml                           deploy/links/webhook.yaml with caBundle = the CA
# Usage: bash deploy/links/certs.sh DIR [--force]   then: kubectl apply -f DIR/tls.yaml -f DIR/webhook.yaml
# Needs feddns installed: the `feddns` command, else $PYTHON (default python3) -m feddns.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:?usage: certs.sh DIR [--force]}"
force=("${@:2}")
mkdir -p "$dir"
python="${PYTHON:-python3}"
feddns=(feddns)
command -v feddns >/dev/null || feddns=("$python" -m feddns)
service=feddns-links namespace=feddns-links
"${feddns[@]}" certs init --dir "$dir" --cn "feddns links webhook CA" "${force[@]}"
"${feddns[@]}" certs issue-server --dir "$dir" --dns "$service.$namespace.svc" \
  --dns "$service.$namespace.svc.cluster.local" "${force[@]}"
"$python" - "$here" "$dir" <<'PY'
import base64, pathlib, sys
import yaml
here, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
secret = yaml.safe_load((here / "tls.yaml").read_text())
secret["stringData"] = {"tls.crt": (out / "server.crt").read_text(), "tls.key": (out / "server.key").read_text()}
webhook = yaml.safe_load((here / "webhook.yaml").read_text())
for hook in webhook["webhooks"]:
    hook["clientConfig"]["caBundle"] = base64.b64encode((out / "ca.crt").read_bytes()).decode()
for name, obj in (("tls.yaml", secret), ("webhook.yaml", webhook)):
    path = out / name
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    path.chmod(0o600)
    print(f"wrote {path}")
PY
