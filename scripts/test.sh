#!/usr/bin/env bash
# Installs everything the tests need on a fresh Debian machine (as root, with Debian's
# packages, PyPI and the Go module proxy reachable, Go 1.26 on PATH), builds the real peers
# once per machine (scripts/peers.sh: CoreDNS, kube-apiserver, kubectl, helm, into
# ~/.cache/feddns-peers, reused when there) and the node's images (scripts/images.sh), runs the code checks (scripts/check.sh: ruff, mypy --strict,
# import-linter; any violation fails the run) and the whole test suite. Extra arguments go to
# pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/debian-deps.sh
# The Go builds (minutes on a new machine, CPU-bound) run while apt-get and pip download.
step "scripts/peers.sh in the background (its lines follow as it goes)"
bash scripts/peers.sh &
peers=$!
install_debian etcd=etcd-server etcdctl=etcd-client dig=bind9-dnsutils unbound=unbound named=bind9 curl=curl \
  promtool=prometheus testssl=testssl.sh nsd=nsd dnsperf=dnsperf
# The node of the e2e tier (harness/node.py): its container runtime, CNI plugins, iptables for
# kube-proxy, and what makes its images (scripts/images.sh).
install_debian containerd=containerd runc=runc /usr/lib/cni/bridge=containernetworking-plugins \
  iptables=iptables conntrack=conntrack buildah=buildah mmdebstrap=mmdebstrap cc=gcc
# The images that need no peer (Debian bases, pause, feddns) are made meanwhile too; their lines
# come after the code checks, from a log.
images_log="$(mktemp)"
bash scripts/images.sh local >"$images_log" 2>&1 &
images=$!
install_venv "[test]"
if ! wait "$peers"; then
  echo "scripts/test.sh: the real peers did not build (scripts/peers.sh said why above)" >&2
  exit 1
fi
bash scripts/images.sh peers
bash scripts/check.sh
if ! wait "$images"; then
  cat "$images_log"
  echo "scripts/test.sh: the node's images were not made (scripts/images.sh local said why above)" >&2
  exit 1
fi
cat "$images_log"
step "pytest $*"
exec .venv/bin/python -m pytest "$@"
