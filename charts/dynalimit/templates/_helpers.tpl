{{/* Name of the chart, or nameOverride. */}}
{{- define "dynalimit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the objects: fullnameOverride, else release-chart (the release name alone when it contains the chart name). */}}
{{- define "dynalimit.fullname" -}}
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

{{/* chart label value: name-version. */}}
{{- define "dynalimit.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "dynalimit.labels" -}}
helm.sh/chart: {{ include "dynalimit.chart" . }}
{{ include "dynalimit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the pods. */}}
{{- define "dynalimit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dynalimit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Name of the ServiceAccount the pods run as. */}}
{{- define "dynalimit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dynalimit.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Image reference: repository:tag, the tag defaulting to appVersion. */}}
{{- define "dynalimit.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Directory the descriptor ConfigMap is mounted at: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY. */}}
{{- define "dynalimit.runtimeRoot" -}}/data{{- end }}
{{- define "dynalimit.runtimeSubdirectory" -}}ratelimit{{- end }}
{{- define "dynalimit.runtimeAppdirectory" -}}config{{- end }}
