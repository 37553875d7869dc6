#!/usr/bin/env bash
# Runs one federation end to end on this machine (scripts/demo.py): installs etcd, unbound
# and dig from Debian if missing (as root), then the Python packages. Extra arguments
# go to scripts/demo.py (--once: print the dig lines and answers, then stop).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"
declare -A debian=([etcd]=etcd-server [dig]=bind9-dnsutils [unbound]=unbound)
missing=()
for cmd in "${!debian[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${debian[$cmd]}")
done
if ((${#missing[@]})); then
  echo "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]' 2>&1 | grep -v "is ignored" || true
exec .venv/bin/python scripts/demo.py "$@"
