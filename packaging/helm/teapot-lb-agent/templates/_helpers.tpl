{{- define "teapot-lb-agent.labels" -}}
app.kubernetes.io/name: teapot-lb-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "teapot-lb-agent.selector" -}}
app.kubernetes.io/name: teapot-lb-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
