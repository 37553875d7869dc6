#!/usr/bin/env bash
# Builds the real peers that the tests, the demo and the benchmarks run (docs/development.md,
# "Real peers"), from the Go module proxy, at the versions pinned in tests/peers/versions.env:
#   coredns                    go install github.com/coredns/coredns@COREDNS_VERSION
#   kube-apiserver, kubectl    go build from tests/peers/go.mod (k8s.io/kubernetes, staging
#                              modules mapped to their published v0.X.Y)
#   kubelet, kube-proxy,       the node's binaries (harness/node.py), go build from the same
#   kube-controller-manager,   module; about 17 CPU-minutes once, 490 MB
#   kube-scheduler
#   etcd                       go build from tests/peers/etcd/go.mod: the federation chart's etcd
# The images the node tests run are made from these by scripts/images.sh.
#   helm                       go install helm.sh/helm/v3/cmd/helm@HELM_VERSION
#   CRDs                       ExternalDNS's DNSEndpoint, the MCS API's ServiceExport, the
#                              prometheus-operator's PodMonitor and PrometheusRule,
#                              cert-manager's Certificate, as those
#                              projects publish them in their modules
# into FEDDNS_PEERS_DIR (default ~/.cache/feddns-peers), outside the clone, one directory per
# peer and version; a build that is there already is reused. Each step prints one line
# before it starts. A failed build exits 1 naming the peer, the module and the version, with
# the tail of its log. Needs Go (1.26) on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/debian-deps.sh
# FEDDNS_PEERS_VERSIONS: another versions file (the tests try a version the proxy refuses).
source "${FEDDNS_PEERS_VERSIONS:-tests/peers/versions.env}"
PEERS_DIR="${FEDDNS_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/feddns-peers}"
mkdir -p "$PEERS_DIR/logs"
export CGO_ENABLED=0

if ! command -v go >/dev/null 2>&1; then
  echo "scripts/peers.sh: go is not on PATH; the real peers (CoreDNS, kube-apiserver, kubectl, helm) are built with Go 1.26" >&2
  exit 1
fi

# fail PEER MODULE@VERSION LOG: the one error every failed step ends with.
fail() {
  echo "scripts/peers.sh: building $1 ($2) failed; the last lines of $3:" >&2
  tail -n 25 "$3" >&2
  exit 1
}

# build PEER MODULE@VERSION DIR COMMAND...: runs COMMAND (which puts the binaries in DIR)
# unless DIR/.done exists; DIR is filled in a temporary directory and renamed when complete,
# so an interrupted build is never taken for a finished one.
build() {
  local peer="$1" module="$2" dir="$3"
  shift 3
  if [ -e "$dir/.done" ]; then
    step "peer $peer $module: cached in $dir"
    return 0
  fi
  local log="$PEERS_DIR/logs/$peer.log" partial="$dir.partial"
  step "peer $peer: building $module into $dir (minutes on a new machine; log $log)"
  rm -rf "$partial"
  mkdir -p "$partial"
  local start=$SECONDS
  if ! OUT="$partial" "$@" >"$log" 2>&1; then
    fail "$peer" "$module" "$log"
  fi
  echo "$((SECONDS - start))" >"$partial/.build-seconds"
  touch "$partial/.done"
  rm -rf "$dir"
  mv "$partial" "$dir"
}

go_install() { GOBIN="$OUT" go install -trimpath "$1"; }
# The version kube-apiserver and kubectl report (/version, `kubectl version`), stamped as the
# Kubernetes release's own build does (hack/lib/version.sh); without it they say v0.0.0-master.
k8s_build() {
  local minor="${KUBERNETES_VERSION#v1.}" flags=""
  minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd tests/peers && go build -trimpath -ldflags "$flags" -o "$OUT/" "$@")
}
k8s_control() { k8s_build k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl; }
# (A step's function runs with errexit off, since build() tests its status: each command that
# can fail says `|| return 1`.)
k8s_node() {
  k8s_build k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler || return 1
  # kubeadm's own CoreDNS manifests (Deployment, Service, Corefile), which the node runs as its
  # cluster DNS (harness/node.py), from the same module.
  local dir
  dir="$(cd tests/peers && go list -m -f '{{.Dir}}' k8s.io/kubernetes)" || return 1
  cp "$dir/cmd/kubeadm/app/phases/addons/dns/manifests.go" "$OUT/kubeadm-dns-manifests.go"
}
etcd_build() { (cd tests/peers/etcd && go build -trimpath -o "$OUT/etcd" go.etcd.io/etcd/server/v3); }

# crds: each CRD file as its project publishes it, from the module's zip (go mod download
# fetches it even where the module's go.mod asks for a newer Go than ours).
crds() {
  local spec
  for spec in \
    "sigs.k8s.io/external-dns@$EXTERNAL_DNS_VERSION config/crd/standard/dnsendpoints.externaldns.k8s.io.yaml dnsendpoints.yaml" \
    "sigs.k8s.io/mcs-api@$MCS_API_VERSION config/crd/multicluster.x-k8s.io_serviceexports.yaml serviceexports.yaml" \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml podmonitors.yaml" \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml prometheusrules.yaml" \
    "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION deploy/crds/cert-manager.io_certificates.yaml certificates.yaml" \
    "github.com/k3s-io/helm-controller@$HELM_CONTROLLER_VERSION pkg/crds/yaml/generated/helm.cattle.io_helmchartconfigs.yaml helmchartconfigs.yaml"; do
    # shellcheck disable=SC2086 # three words: module@version, path in the module, file name here
    set -- $spec
    go mod download -json "$1" >"$OUT/download.json" || true
    python3 - "$OUT/download.json" "$1/$2" "$OUT/$3" <<'PY' || return 1
import json, sys, zipfile
download, member, target = sys.argv[1:]
with open(download) as stream:
    answer = json.load(stream)
if not answer.get("Zip"):
    sys.exit(f"go mod download {member.split('/', 1)[0]}...: {answer.get('Error', 'no zip')}")
with zipfile.ZipFile(answer["Zip"]) as z, open(target, "wb") as out:
    out.write(z.read(member))
PY
  done
  rm -f "$OUT/download.json"
}

build coredns "github.com/coredns/coredns@$COREDNS_VERSION" "$PEERS_DIR/coredns-$COREDNS_VERSION" \
  go_install "github.com/coredns/coredns@$COREDNS_VERSION"
build kubernetes "k8s.io/kubernetes@$KUBERNETES_VERSION (kube-apiserver, kubectl)" "$PEERS_DIR/kubernetes-$KUBERNETES_VERSION" \
  k8s_control
build helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "$PEERS_DIR/helm-$HELM_VERSION" \
  go_install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
build crds "external-dns@$EXTERNAL_DNS_VERSION mcs-api@$MCS_API_VERSION prometheus-operator@$PROMETHEUS_OPERATOR_VERSION cert-manager@$CERT_MANAGER_VERSION helm-controller@$HELM_CONTROLLER_VERSION" \
  "$PEERS_DIR/crds-$EXTERNAL_DNS_VERSION-$MCS_API_VERSION-$PROMETHEUS_OPERATOR_VERSION-$CERT_MANAGER_VERSION-$HELM_CONTROLLER_VERSION" crds
build node "k8s.io/kubernetes@$KUBERNETES_VERSION (kubelet, kube-proxy, kube-controller-manager, kube-scheduler)" \
  "$PEERS_DIR/node-$KUBERNETES_VERSION" k8s_node
build etcd "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "$PEERS_DIR/etcd-$ETCD_VERSION" etcd_build
