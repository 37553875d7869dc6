#!/usr/bin/env bash
# Renders the plain manifests of deploy/ from the charts, so that the charts are their one
# source: each file below is `helm template` of a chart with a sample values file kept in the
# chart's samples/. Edit the chart or the sample, then run this; tests/deploy/test_charts.py
# renders again and fails when a file differs.
# Usage: bash deploy/helm/render.sh [OUT]   writes OUT/deploy/... (default OUT: this clone)
# HELM names the helm binary (default: helm on PATH; the tests use the peers' v3.22.0).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$repo}"
helm="${HELM:-helm}"

# render CHART RELEASE NAMESPACE SAMPLE TEMPLATE...: helm template, those templates only.
render() {
  local chart="$1" release="$2" namespace="$3" sample="$4" shown=()
  shift 4
  for template in "$@"; do shown+=(--show-only "templates/$template"); done
  "$helm" template "$release" "$here/$chart" --namespace "$namespace" \
    --values "$here/$chart/samples/$sample" "${shown[@]}"
}

# write FILE WHAT CHART SAMPLE: FILE with its header, from what the commands after it print.
write() {
  local file="$out/$1" what="$2" chart="$3" sample="$4"
  mkdir -p "$(dirname "$file")"
  {
    echo "# $what"
    echo "# Rendered from deploy/helm/$chart (values: samples/$sample) by deploy/helm/render.sh:"
    echo "# edit those and run it again; tests/deploy/test_charts.py fails when this file differs."
    cat
  } > "$file"
  echo "wrote ${file#"$out"/}"
}

federation=(feddns-federation myfederation feddns-myfederation myfederation.yaml)
member=(feddns-member feddns-member feddns-system foo.yaml)

render "${federation[@]}" config.yaml serve.yaml controller.yaml etcd.yaml |
  write deploy/myfederation/federated-dns.yaml \
    'Federated-DNS for federation "myfederation" (member clusters foo and bar), in the cluster that hosts it.' \
    feddns-federation myfederation.yaml
render "${member[@]}" stubzone.yaml stubzone-pdb.yaml networkpolicy.yaml |
  write deploy/cluster-dns/coredns/stubzone.yaml \
    'feddns stubzone for member cluster foo, which runs CoreDNS; then coredns-import.sh wires CoreDNS to it.' \
    feddns-member foo.yaml
render "${member[@]}" controller-access.yaml |
  write deploy/member/controller-access.yaml \
    "What the federation's controller may do in member cluster foo; then kubeconfig.sh writes its kubeconfig." \
    feddns-member foo.yaml
render "${member[@]}" links.yaml |
  write deploy/links/links.yaml \
    'feddns links, the service-links webhook of member cluster foo: then certs.sh, tls.yaml and webhook.yaml.' \
    feddns-member foo.yaml
render "${member[@]}" links-tls.yaml |
  write deploy/links/tls.yaml \
    'Placeholder: `bash deploy/links/certs.sh DIR` writes DIR/tls.yaml with a real certificate; apply that one.' \
    feddns-member foo.yaml
render "${member[@]}" links-webhook.yaml |
  write deploy/links/webhook.yaml \
    '`bash deploy/links/certs.sh DIR` writes DIR/webhook.yaml, this with caBundle set to its CA; apply that one.' \
    feddns-member foo.yaml
{ render "${federation[@]}" podmonitors.yaml; render "${member[@]}" podmonitor.yaml; } |
  write deploy/monitoring/podmonitors.yaml \
    "What Prometheus scrapes: feddns and feddns-etcd in the federation's cluster, feddns-stubzone in each member." \
    'feddns-federation and feddns-member' 'myfederation.yaml and foo.yaml'
render "${federation[@]}" prometheusrule.yaml |
  write deploy/monitoring/feddns-rules.yaml \
    'The alerts of feddns (a PrometheusRule); its spec is the chart'"'"'s files/feddns-rules.yaml.' \
    feddns-federation myfederation.yaml
