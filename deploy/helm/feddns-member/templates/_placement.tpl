{{/* A pod's placement from a values block with nodeSelector, tolerations and affinity
   (Kubernetes PodSpec), each left out when empty: stubzone's and links'. */}}
{{- define "feddns.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
