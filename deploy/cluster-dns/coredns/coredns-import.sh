#!/usr/bin/env bash
# Wires a member cluster's own CoreDNS to the stub zones feddns stubzone writes, once: the two
# changes docs/stubzone.md ("coredns") describes, to objects neither feddns nor its chart owns.
#   1. Deployment coredns: coredns-deployment.patch.yaml (mount ConfigMap coredns-feddns at
#      /etc/coredns/feddns), by kubectl patch: nothing else of the Deployment changes.
#   2. ConfigMap coredns: corefile-import.txt's line put first in the Corefile, if it is not
#      there; a JSON patch whose "test" makes it fail, changing nothing, if someone else
#      changed the Corefile meanwhile (run it again).
# Both are idempotent. --undo takes both out again (after the cluster has left its federation).
# Usage: bash deploy/cluster-dns/coredns/coredns-import.sh [--context CONTEXT] [--namespace kube-system] [--undo]
# Needs kubectl and python3.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
kubectl=(kubectl) namespace=kube-system undo=false
while (($#)); do
  case "$1" in
    --context) kubectl+=(--context "$2"); shift 2 ;;
    --namespace) namespace="$2"; shift 2 ;;
    --undo) undo=true; shift ;;
    *) echo "usage: coredns-import.sh [--context CONTEXT] [--namespace NAMESPACE] [--undo]" >&2; exit 2 ;;
  esac
done
kubectl+=(-n "$namespace")
line="$(cat "$here/corefile-import.txt")"

if $undo; then
  "${kubectl[@]}" patch deployment coredns --patch \
    '{"spec":{"template":{"spec":{"containers":[{"name":"coredns","volumeMounts":[{"$patch":"delete","mountPath":"/etc/coredns/feddns"}]}],"volumes":[{"$patch":"delete","name":"feddns-stub-zones"}]}}}}'
else
  "${kubectl[@]}" patch deployment coredns --patch-file "$here/coredns-deployment.patch.yaml"
fi

# The Corefile's JSON patch: test the Corefile read, replace it; nothing when it is as wanted.
patch="$("${kubectl[@]}" get configmap coredns -o json | python3 -c '
import json, sys
line, undo = sys.argv[1], sys.argv[2] == "true"
corefile = json.load(sys.stdin)["data"]["Corefile"]
lines = corefile.split("\n")
if undo:
    wanted = "\n".join(l for l in lines if l.strip() != line)
else:
    wanted = corefile if any(l.strip() == line for l in lines) else line + "\n" + corefile
if wanted != corefile:
    print(json.dumps([{"op": "test", "path": "/data/Corefile", "value": corefile},
                      {"op": "replace", "path": "/data/Corefile", "value": wanted}]))
' "$line" "$undo")"
if [[ -n "$patch" ]]; then
  "${kubectl[@]}" patch configmap coredns --type json --patch "$patch"
else
  echo "configmap/coredns already as wanted (${line})"
fi
