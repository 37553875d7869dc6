{{/* The Secret holding the endpoint's tls.crt and tls.key: stubzone.tls.existingSecret when set, else secretName. */}}
{{- define "feddns.stubzone.serverSecret" -}}
{{ .Values.stubzone.tls.existingSecret | default .Values.stubzone.tls.secretName }}
{{- end }}

{{/* Where the CA of the client certificates comes from, as one projected-volume source:
   clientCA (the chart's ConfigMap feddns-stubzone-client-ca), clientCASecret, clientCAConfigMap;
   empty when it is ca.crt of the server's Secret. */}}
{{- define "feddns.stubzone.clientCASource" -}}
{{- with .Values.stubzone.tls }}
{{- if .clientCA }}
configMap: {name: feddns-stubzone-client-ca, items: [{key: ca.crt, path: ca.crt}]}
{{- else if .clientCASecret.name }}
secret: {name: {{ .clientCASecret.name }}, items: [{key: {{ .clientCASecret.key | quote }}, path: ca.crt}]}
{{- else if .clientCAConfigMap.name }}
configMap: {name: {{ .clientCAConfigMap.name }}, items: [{key: {{ .clientCAConfigMap.key | quote }}, path: ca.crt}]}
{{- end }}
{{- end }}
{{- end }}

{{/* The pod's volume "tls" (a volume, not subPath: the kubelet updates it in place): tls.crt,
   tls.key and ca.crt, the files --cert, --key and --client-ca name. With a separate client CA
   a projected volume joins the two sources; the kubelet still swaps all three files at once
   (Kubernetes docs, "Projected Volumes"). */}}
{{- define "feddns.stubzone.tlsVolume" -}}
{{- $secret := include "feddns.stubzone.serverSecret" . }}
{{- $clientCA := include "feddns.stubzone.clientCASource" . }}
{{- if $clientCA }}
projected:
  sources:
    - secret: {name: {{ $secret }}, items: [{key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}]}
    - {{- $clientCA | nindent 6 }}
{{- else }}
secret:
  secretName: {{ $secret }}
  items:
    - {key: tls.crt, path: tls.crt}
    - {key: tls.key, path: tls.key}
    - {key: ca.crt, path: ca.crt}
{{- end }}
{{- end }}

{{/* What values.schema.json cannot say about stubzone.tls: one way to the server's certificate,
   and a client CA of its own beside cert-manager's. Each failure names the values. */}}
{{- define "feddns.stubzone.tlsChecks" -}}
{{- with .Values.stubzone.tls }}
{{- $ways := list }}
{{- if .cert }}{{ $ways = append $ways "cert" }}{{ end }}
{{- if .existingSecret }}{{ $ways = append $ways "existingSecret" }}{{ end }}
{{- if .certManager.enabled }}{{ $ways = append $ways "certManager.enabled" }}{{ end }}
{{- if gt (len $ways) 1 }}
{{- fail (printf "stubzone.tls: %s are set; give the server certificate one way only (--set-file cert, key and ca; existingSecret; or certManager)" (join " and " $ways)) }}
{{- end }}
{{- $sources := list }}
{{- if .clientCA }}{{ $sources = append $sources "clientCA" }}{{ end }}
{{- if .clientCASecret.name }}{{ $sources = append $sources "clientCASecret.name" }}{{ end }}
{{- if .clientCAConfigMap.name }}{{ $sources = append $sources "clientCAConfigMap.name" }}{{ end }}
{{- if gt (len $sources) 1 }}
{{- fail (printf "stubzone.tls: %s are set; name the client CA one way only" (join " and " $sources)) }}
{{- end }}
{{- if and .cert (not .ca) (not $sources) }}
{{- fail "stubzone.tls.ca: needed with stubzone.tls.cert (the CA of the client certificates), unless clientCA, clientCASecret or clientCAConfigMap gives it" }}
{{- end }}
{{- if .existingSecret }}
{{- $found := lookup "v1" "Secret" $.Values.stubzone.namespace .existingSecret }}
{{- if eq (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $found) $.Release.Name }}
{{- fail (printf "stubzone.tls.existingSecret: Secret %s/%s is this release's own (made from --set-file), which this upgrade would delete: copy it under another name and name that one" $.Values.stubzone.namespace .existingSecret) }}
{{- end }}
{{- end }}
{{- if .certManager.enabled }}
{{- $found := lookup "v1" "Secret" $.Values.stubzone.namespace .secretName }}
{{- if eq (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $found) $.Release.Name }}
{{- fail (printf "stubzone.tls.certManager.enabled: Secret %s/%s is this release's own (made from --set-file), which this upgrade would delete while cert-manager writes into it: set stubzone.tls.secretName to another name for cert-manager" $.Values.stubzone.namespace .secretName) }}
{{- end }}
{{- end }}
{{- if and .certManager.enabled (not $sources) }}
{{- fail "stubzone.tls.certManager.enabled: needs stubzone.tls.clientCA, clientCASecret or clientCAConfigMap: the CA of the controller's client certificate, never the ca.crt cert-manager writes (the issuer's)" }}
{{- end }}
{{- end }}
{{- end }}
