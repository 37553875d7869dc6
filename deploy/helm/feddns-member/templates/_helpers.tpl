{{/* The one feddns image every container runs (entrypoint `feddns`, the subcommand in args). */}}
{{- define "feddns.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Pod-level security context: non-root, the image's user (65532, distroless's nonroot). On
OpenShift no fixed user or group: its restricted SCC gives each namespace a range and assigns one
from it, and refuses a pod that asks for a user outside it. */}}
{{- define "feddns.podSecurityContext" -}}
runAsNonRoot: true
{{- if ne .Values.clusterDNS.platform "openshift" }}
runAsUser: 65532
runAsGroup: 65532
{{- end }}
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* Every container: read-only root, no privilege escalation, no capabilities. */}}
{{- define "feddns.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}

{{- define "feddns.linksNamespace" -}}
{{ .Values.links.namespace | default .Release.Namespace }}
{{- end }}

{{/* The cluster DNS the stub-zone endpoint programs, by clusterDNS.platform (docs/operations.md,
"Join a cluster"), as YAML for fromYaml:
  backend       --backend
  configMap     NAMESPACE/NAME of --configmap ("" for openshift: it writes the DNS operator's object)
  chartOwned    the chart makes that ConfigMap (its own; else the platform's, never rendered here)
  forwarder     the chart runs its own tagging CoreDNS (feddns-forwarder) the platform's DNS forwards to
  probeService  NAMESPACE/NAME of the platform's cluster DNS Service, for --probe-server */}}
{{- define "feddns.clusterDNS" -}}
{{- $ns := .Values.stubzone.namespace -}}
{{- $platform := .Values.clusterDNS.platform -}}
{{- $dns := dict "backend" "coredns" "configMap" (printf "%s/coredns-feddns" $ns) "chartOwned" true
      "forwarder" false "probeService" "kube-system/kube-dns" -}}
{{- if has $platform (list "aks" "k3s") -}}
{{- $_ := set $dns "backend" "coredns-custom" -}}
{{- $_ = set $dns "configMap" "kube-system/coredns-custom" -}}
{{- $_ = set $dns "chartOwned" false -}}
{{- else if eq $platform "gke" -}}
{{- $_ := set $dns "backend" "kube-dns" -}}
{{- $_ = set $dns "configMap" "kube-system/kube-dns" -}}
{{- $_ = set $dns "chartOwned" false -}}
{{- else if eq $platform "openshift" -}}
{{- $_ := set $dns "backend" "openshift" -}}
{{- $_ = set $dns "configMap" "" -}}
{{- $_ = set $dns "chartOwned" false -}}
{{- $_ = set $dns "probeService" "openshift-dns/dns-default" -}}
{{- else if eq $platform "rke2" -}}
{{- $_ := set $dns "probeService" "kube-system/rke2-coredns-rke2-coredns" -}}
{{- else if has $platform (list "eks" "forwarder") -}}
{{- $_ := set $dns "configMap" (printf "%s/feddns-forwarder-zones" $ns) -}}
{{- $_ = set $dns "forwarder" true -}}
{{- end -}}
{{- toYaml $dns -}}
{{- end }}

{{/* --probe-server's HOST:PORT: clusterDNS.probeServer, else the clusterIP of the platform's cluster
DNS Service read from the API server at install (helm's lookup; nothing with helm template), else "". */}}
{{- define "feddns.probeServer" -}}
{{- if .Values.clusterDNS.probeServer -}}
{{ .Values.clusterDNS.probeServer }}
{{- else -}}
{{- $service := splitList "/" (include "feddns.clusterDNS" . | fromYaml).probeService -}}
{{- $found := lookup "v1" "Service" (index $service 0) (index $service 1) -}}
{{- $ip := dig "spec" "clusterIP" "" $found -}}
{{- if and $ip (ne $ip "None") -}}
{{ ternary (printf "[%s]:53" $ip) (printf "%s:53" $ip) (contains ":" $ip) }}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The arguments of feddns stubzone, the Deployment's and the pre-delete hook's alike. */}}
{{- define "feddns.stubzoneArgs" -}}
{{- $sz := .Values.stubzone -}}
{{- $dns := include "feddns.clusterDNS" . | fromYaml -}}
{{- $probe := include "feddns.probeServer" . -}}
- stubzone
- --backend={{ $dns.backend }}
- --cluster={{ .Values.cluster }}                      # this member cluster's name, as in the controller config
{{- with $dns.configMap }}
- --configmap={{ . }}
{{- end }}
{{- if $dns.forwarder }}
- --coredns-port=1053                 # where feddns-forwarder serves (its Service: 53)
{{- end }}
- --cluster-domain={{ $sz.clusterDomain }}
- --federation-zone={{ $sz.federationZone }}
- --listen=0.0.0.0:8443
- --cert=/etc/feddns/tls/tls.crt
- --key=/etc/feddns/tls/tls.key
- --client-ca=/etc/feddns/tls/ca.crt
{{- range $sz.allow }}
- --allow={{ . }}
{{- end }}
- --metrics=0.0.0.0:9155
- --max-connections={{ $sz.maxConnections }}              # more are closed at once: memory bounded before authentication
- --tls-handshake-timeout={{ $sz.tlsHandshakeTimeout }}         # seconds from the accept
- --tls-reload-interval={{ $sz.tlsReloadInterval }}           # a renewed Secret applies without a restart
- --backend-timeout={{ $sz.backendTimeout }}                # a request's whole time with the store; 503 after it
{{- if $probe }}
- --probe-server={{ $probe }}                  # the cluster DNS the path is checked through (_whoami)
- --probe-interval={{ .Values.clusterDNS.probeInterval }}
{{- end }}
{{- end }}
