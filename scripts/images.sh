#!/usr/bin/env bash
# Makes the container images the node tests run (harness/images.py; docs/development.md, "The
# node"): the pinned ones (a Debian 12 base by mmdebstrap, pause, CoreDNS, etcd) once per machine,
# and the feddns image of this source tree from the Dockerfile, reused while the sources are the
# same. Into FEDDNS_PEERS_DIR/images, outside the clone. Installs buildah and mmdebstrap when
# missing. Prints one line per image it makes.
# Usage: bash scripts/images.sh [local|peers]: local, the images that need no peer (the Debian
# ones, pause, feddns), which scripts/test.sh makes while the Go builds run; peers, the CoreDNS and
# etcd images (the peers built first, scripts/peers.sh); neither, all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/debian-deps.sh
install_debian buildah=buildah mmdebstrap=mmdebstrap cc=gcc
parts=("$@")
((${#parts[@]})) || parts=(local peers)
for part in "${parts[@]}"; do
  step "images ($part): harness/images.py"
  python3 -m harness.images "$part"
done
