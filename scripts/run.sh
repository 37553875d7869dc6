#!/usr/bin/env bash
# Installs feddns into .venv and serves the built-in example federation (--example, the
# file examples/federation.yaml) on 127.0.0.1:5353, printing dig lines to try. Extra
# arguments go to `feddns serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/debian-deps.sh
install_debian dig=bind9-dnsutils
install_venv ""
Q=myservice.myns.myfederation.svc.federation.
cat <<TRY
Serving the example federation (examples/federation.yaml) on 127.0.0.1:5353. Try, in another shell:
  dig @127.0.0.1 -p 5353 $Q +ednsopt=65245:666f6f          # as cluster foo: foo's clusterIP first
  dig @127.0.0.1 -p 5353 $Q +ednsopt=65245:62617a          # as cluster baz
  dig @127.0.0.1 -p 5353 $Q                                 # an external client: every externalIP
  dig @127.0.0.1 -p 5353 _http._tcp.$Q SRV +ednsopt=65245:626172
  dig @127.0.0.1 -p 5353 nosuch.myns.myfederation.svc.federation.   # NXDOMAIN
Stop with Ctrl-C.
TRY
step "feddns serve --example --listen 127.0.0.1:5353 $*"
exec .venv/bin/feddns serve --example --listen 127.0.0.1:5353 "$@"
