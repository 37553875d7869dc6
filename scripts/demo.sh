#!/usr/bin/env bash
# Runs one federation end to end on this machine (scripts/demo.py): installs etcd, unbound
# and dig from Debian if missing (as root), then the Python packages. Extra arguments
# go to scripts/demo.py (--once: print the dig lines and answers, then stop).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/debian-deps.sh
install_debian etcd=etcd-server dig=bind9-dnsutils unbound=unbound
install_venv "[test]"
exec .venv/bin/python scripts/demo.py "$@"
