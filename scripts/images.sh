#!/usr/bin/env bash
# Makes the container images the node tests run (harness/images.py; docs/development.md, "The
# node"): the pinned ones (a Debian 12 base by mmdebstrap, pause, CoreDNS, etcd) once per machine,
# and the feddns image of this source tree from the Dockerfile, reused while the sources are the
# same. Into FEDDNS_PEERS_DIR/images, outside the clone. Needs the peers built (scripts/peers.sh);
# installs buildah and mmdebstrap when missing. Prints one line per image it makes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/debian-deps.sh
install_debian buildah=buildah mmdebstrap=mmdebstrap cc=gcc
step "images: the node's pinned images and the feddns image (harness/images.py)"
python3 -m harness.images pinned
python3 -m harness.images feddns
