#!/usr/bin/env bash
# Installs everything the tests need on a fresh Debian machine (as root, with Debian's
# packages and PyPI reachable) and runs the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"

# command -> Debian package that provides it
declare -A debian=([etcd]=etcd-server [etcdctl]=etcd-client [dig]=bind9-dnsutils
                   [unbound]=unbound [named]=bind9 [curl]=curl)
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
exec .venv/bin/python -m pytest "$@"
