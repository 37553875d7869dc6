{{/* What values.schema.json cannot say: names across entries. Each failure names the value. */}}
{{- define "feddns.checks" -}}
{{- /* Helm stores the release in its namespace before the chart's objects exist, so a chart
   cannot make its own release namespace: `helm install -n X` would fail with "namespaces "X"
   not found", and with --create-namespace the chart's Namespace would collide with Helm's.
   `lookup` answers only against a live cluster (not `helm template`, which deploy/helm/render.sh
   runs with createNamespace: true for the plain manifests). */}}
{{- if and .Values.createNamespace (lookup "v1" "Namespace" "" "kube-system") }}
{{- fail (printf "createNamespace: true is for `helm template` (the plain manifests of deploy/myfederation/); Helm needs namespace %s before it installs anything: leave createNamespace false and run `helm install --create-namespace` (docs/operations.md)" .Release.Namespace) }}
{{- end }}
{{- $names := list }}
{{- range $i, $c := .Values.clusters }}
{{- if has $c.name $names }}
{{- fail (printf "clusters[%d].name: %s is listed twice" $i $c.name) }}
{{- end }}
{{- $names = append $names $c.name }}
{{- if and $c.stubzone (not $.Values.nameservers) }}
{{- fail (printf "clusters[%d].stubzone: needs nameservers (Federated-DNS's addresses, to program there)" $i) }}
{{- end }}
{{- end }}
{{- with .Values.nameservers }}
{{- if and (kindIs "map" .) (not (has .fromService.cluster $names)) }}
{{- fail (printf "nameservers.fromService.cluster: %s is not one of clusters[].name (%s)" .fromService.cluster (join ", " $names)) }}
{{- end }}
{{- end }}
{{- with .Values.controller.external.cluster }}
{{- if not (has . $names) }}
{{- fail (printf "controller.external.cluster: %s is not one of clusters[].name (%s)" . (join ", " $names)) }}
{{- end }}
{{- end }}
{{- with (.Values.serve.resources.limits | default dict).cpu }}
{{- $text := toString . }}
{{- $cpus := ternary (div (atoi (trimSuffix "m" $text)) 1000) (int (float64 $text)) (hasSuffix "m" $text) }}
{{- if ne (int $cpus) (int $.Values.serve.workers) }}
{{- fail (printf "serve.workers: %d, but serve.resources.limits.cpu is %s: keep them equal (one worker per whole CPU; a worker on a CPU it may not use waits for the quota)" (int $.Values.serve.workers) $text) }}
{{- end }}
{{- end }}
{{- end }}
