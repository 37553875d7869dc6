{{/* The one feddns image every container runs (entrypoint `feddns`, the subcommand in args). */}}
{{- define "feddns.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
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

{{- define "feddns.linksNamespace" -}}
{{ .Values.links.namespace | default .Release.Namespace }}
{{- end }}
