{{- define "kvroute.fullname" -}}
{{- printf "%s-kvroute" .Release.Name -}}
{{- end -}}

{{- define "kvroute.labels" -}}
app.kubernetes.io/name: kvroute
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: frontend
{{- end -}}
