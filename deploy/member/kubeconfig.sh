#!/usr/bin/env bash
# Prints the kubeconfig the federation's controller uses for one member cluster: the identity
# of ServiceAccount feddns-controller there (feddns-member's controllerAccess, or
# controller-access.yaml), with the long-lived token and the cluster CA that the cluster's
# token controller put in Secret feddns-controller-token, and the API server's URL from
# your own kubeconfig's context (--server when the controller reaches it by another
# address). Nothing else: the controller gets no more than that ServiceAccount may do.
# Usage: bash deploy/member/kubeconfig.sh --context CONTEXT [--name CLUSTER] [--namespace feddns-system] [--server URL]
#   CLUSTER (default: CONTEXT) names the cluster, user and context inside the file.
# Then, for the federation's Secret (docs/operations.md, "Add a member cluster"):
#   kubectl -n feddns-myfederation patch secret feddns-clusters \
#     -p "{\"data\":{\"bar.kubeconfig\":\"$(bash deploy/member/kubeconfig.sh --context bar | base64 -w0)\"}}"
set -euo pipefail
context="" name="" namespace=feddns-system server=""
while (($#)); do
  case "$1" in
    --context) context="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --namespace) namespace="$2"; shift 2 ;;
    --server) server="$2"; shift 2 ;;
    *) echo "usage: kubeconfig.sh --context CONTEXT [--name CLUSTER] [--namespace NS] [--server URL]" >&2; exit 2 ;;
  esac
done
[[ -n "$context" ]] || { echo "kubeconfig.sh: --context is required" >&2; exit 2; }
name="${name:-$context}"
kubectl=(kubectl --context "$context")
secret="$("${kubectl[@]}" -n "$namespace" get secret feddns-controller-token -o json)"
if [[ -z "$server" ]]; then
  server="$("${kubectl[@]}" config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')"
fi
python3 -c '
import base64, json, sys
secret, name, server = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
data = secret.get("data") or {}
if "token" not in data or "ca.crt" not in data:
    sys.exit("kubeconfig.sh: Secret feddns-controller-token has no token yet (is the token controller running?)")
user = f"{name}-feddns-controller"
config = {
    "apiVersion": "v1", "kind": "Config",
    "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": data["ca.crt"]}}],
    "users": [{"name": user, "user": {"token": base64.b64decode(data["token"]).decode()}}],
    "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
    "current-context": name,
}
print(json.dumps(config, indent=2))
' "$secret" "$name" "$server"
