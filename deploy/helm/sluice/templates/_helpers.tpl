{{/* Names and labels shared by every template. */}}

{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sluice.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ include "sluice.chart" . }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The cluster's group.id and internal topics. */}}
{{- define "sluice.groupId" -}}
{{- default (include "sluice.fullname" .) .Values.cluster.groupId }}
{{- end }}

{{- define "sluice.topic" -}}
{{- $root := index . 0 }}{{- $given := index . 1 }}{{- $suffix := index . 2 }}
{{- default (printf "%s-%s" (include "sluice.groupId" $root) $suffix) $given }}
{{- end }}

{{/* The Secret holding the REST bearer token (auth mode "token"). */}}
{{- define "sluice.authSecretName" -}}
{{- default (printf "%s-rest-auth" (include "sluice.fullname" .)) .Values.rest.auth.existingSecret }}
{{- end }}

{{/* The Secret a `secrets` entry is mounted from. */}}
{{- define "sluice.secretName" -}}
{{- $root := index . 0 }}{{- $entry := index . 1 }}
{{- default (printf "%s-%s" (include "sluice.fullname" $root) $entry.name) $entry.existingSecret }}
{{- end }}

{{/* A ConfigMap key for a connector: names may hold characters keys may not. */}}
{{- define "sluice.connectorKey" -}}
{{- printf "%s.json" (regexReplaceAll "[^-._a-zA-Z0-9]" . "_") }}
{{- end }}

{{- define "sluice.applyEnabled" -}}
{{- if and .Values.apply.enabled (or .Values.connectors .Values.apply.prune) }}true{{ end }}
{{- end }}
