#!/usr/bin/env bash
# Sends the federation zone from NodeLocal DNSCache to the cluster's CoreDNS, once (docs/operations.md,
# "NodeLocal DNSCache"). The upstream node-local-dns manifest (kubernetes/kubernetes
# cluster/addons/dns/nodelocaldns/nodelocaldns.yaml) forwards only the cluster domain and the reverse
# zones to CoreDNS (its kube-dns-upstream Service, __PILLAR__CLUSTER__DNS__) and everything else, the
# federation's names included, to the node's resolvers, which answer NXDOMAIN. This adds one server block
# for the federation zone to ConfigMap node-local-dns's Corefile, written the way that manifest writes its
# cluster-domain block (same bind addresses, forward to __PILLAR__CLUSTER__DNS__ over TCP), between two
# marker comments; CoreDNS then tags each query with this cluster's name (its coredns-feddns import).
# node-cache re-reads the ConfigMap (its reload plugin) without a restart.
# Idempotent; a JSON patch whose "test" makes it fail, changing nothing, if someone else changed the
# Corefile meanwhile (run it again). --undo takes the block out. A ConfigMap that a Helm release renders
# (RKE2's rke2-coredns chart) is refused, naming the way that release keeps the block.
# Usage: bash node-local-dns-import.sh [--context CONTEXT] [--namespace kube-system] [--zone federation.] [--undo]
# Needs kubectl and python3.
set -euo pipefail
kubectl=(kubectl) namespace=kube-system zone=federation. undo=false
while (($#)); do
  case "$1" in
    --context) kubectl+=(--context "$2"); shift 2 ;;
    --namespace) namespace="$2"; shift 2 ;;
    --zone) zone="$2"; shift 2 ;;
    --undo) undo=true; shift ;;
    *) echo "usage: node-local-dns-import.sh [--context CONTEXT] [--namespace NAMESPACE] [--zone ZONE] [--undo]" >&2
       exit 2 ;;
  esac
done
kubectl+=(-n "$namespace")

patch="$("${kubectl[@]}" get configmap node-local-dns -o json | python3 -c '
import json, re, sys
zone, undo = sys.argv[1].rstrip(".") + ".", sys.argv[2] == "true"
begin, end = f"# feddns: {zone} to CoreDNS (kube-dns-upstream), which tags it", "# feddns: end"
configmap = json.load(sys.stdin)
release = (configmap["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name")
if (configmap["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "Helm" and release:
    # A Helm release renders this ConfigMap again at its next upgrade: a patch would be lost then.
    way = (f"RKE2: add {zone} to nodelocal.extraClusterDomains in the valuesContent of HelmChartConfig "
           "rke2-coredns (deploy/cluster-dns/rke2/rke2-coredns-config.yaml)" if release == "rke2-coredns" else
           f"give the block to that release (its values), or ask its owner")
    sys.exit(f"node-local-dns-import.sh: ConfigMap node-local-dns belongs to Helm release {release}, which "
             f"puts it back at its next upgrade; not patched. {way}")
corefile = configmap["data"]["Corefile"]
lines = corefile.split("\n")
if begin in lines:
    after = lines.index(end, lines.index(begin)) + 1
    lines = lines[:lines.index(begin)] + lines[after:]
bind = re.search(r"^\s*(bind\s.*)$", corefile, re.MULTILINE)
# The cache holds no answer past its TTL (MINTTL 0; the plugin floor is 5 s): the short TTL of serve is what
# makes a failover reach pods in seconds (docs/operations.md, "Failover and join times").
block = [begin, f"{zone}:53 {{", "    errors", "    cache 30 {", "            success 9984 30 0",
         "            denial 9984 30 0", "    }", "    reload", "    loop",
         *([f"    {bind.group(1)}"] if bind else []),
         "    forward . __PILLAR__CLUSTER__DNS__ {", "            force_tcp", "    }",
         "    prometheus :9253", "    }", end]
if undo:
    wanted = "\n".join(lines)
else:
    wanted = "\n".join((lines[:-1] if lines[-1:] == [""] else lines) + block + [""])
if wanted != corefile:
    print(json.dumps([{"op": "test", "path": "/data/Corefile", "value": corefile},
                      {"op": "replace", "path": "/data/Corefile", "value": wanted}]))
' "$zone" "$undo")"
if [[ -n "$patch" ]]; then
  "${kubectl[@]}" patch configmap node-local-dns --type json --patch "$patch"
else
  echo "configmap/node-local-dns already as wanted"
fi
