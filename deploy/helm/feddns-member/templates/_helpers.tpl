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
  forwarder     the chart runs its own tagging CoreDNS (feddns-forwarder, in the endpoint's pods) the
                platform's DNS forwards to
  probeService  NAMESPACE/SELECTOR of the platform's cluster DNS Service, by its labels, for --probe-service */}}
{{- define "feddns.clusterDNS" -}}
{{- $ns := .Values.stubzone.namespace -}}
{{- $platform := .Values.clusterDNS.platform -}}
{{- $dns := dict "backend" "coredns" "configMap" (printf "%s/coredns-feddns" $ns) "chartOwned" true
      "forwarder" false "probeService" "kube-system/k8s-app=kube-dns" -}}
{{- if has $platform (list "aks" "k3s") -}}
{{- $_ := set $dns "backend" "coredns-custom" -}}
{{- $_ = set $dns "configMap" "kube-system/coredns-custom" -}}
{{- $_ = set $dns "chartOwned" false -}}
{{- else if eq $platform "gke" -}}
{{- $_ := set $dns "backend" "kube-dns" -}}
{{- $_ = set $dns "configMap" "kube-system/kube-dns" -}}
{{- $_ = set $dns "chartOwned" false -}}
{{- else if eq $platform "openshift" -}}
{{- $_ := set $dns "probeService" "openshift-dns/dns.operator.openshift.io/owning-dns=default" -}}
{{- if .Values.clusterDNS.openshift.forwarder -}}
{{- $_ = set $dns "configMap" (printf "%s/feddns-forwarder-zones" $ns) -}}
{{- $_ = set $dns "forwarder" true -}}
{{- else -}}
{{- $_ = set $dns "backend" "openshift" -}}
{{- $_ = set $dns "configMap" "" -}}
{{- $_ = set $dns "chartOwned" false -}}
{{- end -}}
{{- else if eq $platform "rke2" -}}
{{- $_ := set $dns "probeService" "kube-system/app.kubernetes.io/instance=rke2-coredns" -}}
{{- else if has $platform (list "eks" "forwarder") -}}
{{- $_ := set $dns "configMap" (printf "%s/feddns-forwarder-zones" $ns) -}}
{{- $_ = set $dns "forwarder" true -}}
{{- end -}}
{{- toYaml $dns -}}
{{- end }}

{{/* Where the path check asks, as YAML for fromYaml: server (--probe-server HOST:PORT) or service
(--probe-service NAMESPACE/SELECTOR). clusterDNS.probeServer when set; else NodeLocal DNSCache's
address when nodeLocalDNS.enabled (what pods on the endpoint's node ask, in iptables and IPVS mode
alike); else the platform's cluster DNS Service, found by the endpoint through the API at run time,
so helm template and helm install render the same check. */}}
{{- define "feddns.probeTarget" -}}
{{- if .Values.clusterDNS.probeServer -}}
server: {{ .Values.clusterDNS.probeServer | quote }}
{{- else if .Values.nodeLocalDNS.enabled -}}
{{- $ip := .Values.nodeLocalDNS.address -}}
server: {{ ternary (printf "[%s]:53" $ip) (printf "%s:53" $ip) (contains ":" $ip) | quote }}
{{- else -}}
service: {{ (include "feddns.clusterDNS" . | fromYaml).probeService | quote }}
{{- end -}}
{{- end }}

{{/* The arguments of feddns stubzone, the Deployment's and the pre-delete hook's alike. */}}
{{- define "feddns.stubzoneArgs" -}}
{{- $sz := .Values.stubzone -}}
{{- $dns := include "feddns.clusterDNS" . | fromYaml -}}
{{- $probe := include "feddns.probeTarget" . | fromYaml -}}
- stubzone
- --backend={{ $dns.backend }}
- --cluster={{ .Values.cluster }}                      # this member cluster's name, as in the controller config
{{- with $dns.configMap }}
- --configmap={{ . }}
{{- end }}
{{- if $dns.forwarder }}
- --coredns-port=1053                 # where feddns-forwarder serves (its Service: 53)
- --mirror-dir=/etc/coredns/feddns    # feddns-forwarder's imports, beside it in the pod (--remove-all ignores it)
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
{{- if has $dns.backend (list "coredns" "coredns-custom") }}
- --cache-min-ttl={{ $sz.cacheMinTTL }}                    # the stub zone's cache holds no answer past its TTL
- --cache-serve-stale={{ $sz.cacheServeStale }}            # ... unless Federated-DNS fails: then the expired one
{{- end }}
- --backend-timeout={{ $sz.backendTimeout }}                # a request's whole time with the store; 503 after it
{{- if $probe.server }}
- --probe-server={{ $probe.server }}                  # where pods ask the cluster DNS: the path is checked there (_whoami)
{{- else }}
- --probe-service={{ $probe.service }}      # the cluster DNS Service, found through the API: the path is checked there (_whoami)
{{- end }}
- --probe-interval={{ .Values.clusterDNS.probeInterval }}
{{- end }}
