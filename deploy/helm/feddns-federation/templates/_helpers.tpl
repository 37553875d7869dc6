{{/* The one feddns image every container runs (entrypoint `feddns`, the subcommand in args). */}}
{{- define "feddns.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "feddns.labels" -}}
{app.kubernetes.io/name: feddns, app.kubernetes.io/instance: {{ .Release.Name }}}
{{- end }}

{{- define "feddns.etcdLabels" -}}
{app.kubernetes.io/name: feddns-etcd, app.kubernetes.io/instance: {{ .Release.Name }}}
{{- end }}

{{/* etcd's client URLs, one a line: the external ones, or the StatefulSet's members by name. */}}
{{- define "feddns.etcdEndpoints" -}}
{{- if .Values.etcd.external.endpoints }}
{{- range .Values.etcd.external.endpoints }}
{{ . }}
{{- end }}
{{- else }}
{{- range $i := until (int .Values.etcd.statefulset.replicas) }}
http://feddns-etcd-{{ $i }}.feddns-etcd:2379
{{- end }}
{{- end }}
{{- end }}

{{/* "true" when some cluster has a stub-zone endpoint for the controller to program. */}}
{{- define "feddns.stubzones" -}}
{{- range .Values.clusters }}{{ if .stubzone }}true{{ end }}{{ end }}
{{- end }}

{{/* Pod-level security context: non-root, the image's user (65532, distroless's nonroot). */}}
{{- define "feddns.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* Every container: read-only root, no privilege escalation, no capabilities. */}}
{{- define "feddns.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}

{{/* Flags and mounts by which serve reaches an external etcd (TLS, a user). */}}
{{- define "feddns.etcdAccessArgs" -}}
{{- $ext := .Values.etcd.external }}
{{- if $ext.tls.secretName }}
- --etcd-cacert=/etc/feddns/etcd/ca.crt
{{- if $ext.tls.clientCertificate }}
- --etcd-cert=/etc/feddns/etcd/tls.crt
- --etcd-key=/etc/feddns/etcd/tls.key
{{- end }}
{{- end }}
{{- if $ext.serve.user }}
- --etcd-user={{ $ext.serve.user }}
- --etcd-password-file=/etc/feddns/etcd-auth/password
{{- end }}
{{- end }}
