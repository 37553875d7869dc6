#!/usr/bin/env bash
# One federation end to end on this machine (scripts/demo.py): installs etcd, unbound and
# dig from Debian if missing (as root), then the Python packages, builds the real peers
# (scripts/peers.sh: kube-apiserver and CoreDNS; minutes the first time), and runs the demo.
#   bash scripts/demo.sh [--once]      start it; prints every endpoint and dig lines
#   bash scripts/demo.sh fail foo      (another shell) foo's shard to 0 ready: answers move to bar
#   bash scripts/demo.sh recover foo   foo's endpoints ready again
set -euo pipefail
cd "$(dirname "$0")/.."
export FEDDNS_DEMO_STATE="${TMPDIR:-/tmp}/feddns-demo-$(id -u).json"
if [ "${1:-}" = fail ] || [ "${1:-}" = recover ]; then
  exec .venv/bin/python scripts/demo.py "$@"
fi
source scripts/debian-deps.sh
install_debian etcd=etcd-server dig=bind9-dnsutils unbound=unbound
install_venv ""  # the product alone: the demo imports no test library (harness/)
bash scripts/peers.sh
# Every temporary file of the demo (etcd's data, kubeconfigs, logs, unbound's configs) goes
# into one directory, removed on exit however the demo ends, with the state file.
TMPDIR="$(mktemp -d "${TMPDIR:-/tmp}/feddns-demo.XXXXXX")"
export TMPDIR
trap 'rm -rf "$TMPDIR"; rm -f "$FEDDNS_DEMO_STATE"' EXIT
step "scripts/demo.py $* (files in $TMPDIR)"
.venv/bin/python scripts/demo.py "$@"
