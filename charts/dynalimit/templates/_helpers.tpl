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

{{/* Selector labels of the aggregator's pods: never the service's, so that
the Service and the service's Deployment do not select them. */}}
{{- define "dynalimit.aggregatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "dynalimit.name" . }}-aggregator
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

{{/* Lease keys: the Secret holding them, its key, and where the pods read them (LEASE_SIGNING_KEY_FILE). */}}
{{- define "dynalimit.leaseSecretName" -}}
{{- default (printf "%s-lease" (include "dynalimit.fullname" .)) .Values.lease.existingSecret }}
{{- end }}
{{- define "dynalimit.leaseSecretKey" -}}
{{- if .Values.lease.existingSecret }}{{ .Values.lease.existingSecretKey }}{{ else }}keys{{ end }}
{{- end }}
{{- define "dynalimit.leaseDir" -}}/etc/dynalimit/lease{{- end }}
{{- define "dynalimit.leaseFile" -}}keys{{- end }}

{{/* Refuses lease values the binary would refuse, or that would put the keys in two places. */}}
{{- define "dynalimit.leaseCheck" -}}
{{- $l := .Values.lease }}
{{- if and $l.existingSecret (or $l.key $l.previousKeys) }}
{{- fail "lease.existingSecret and lease.key or lease.previousKeys are both set: keep the keys in one place, the Secret" }}
{{- end }}
{{- if and $l.previousKeys (not $l.key) }}
{{- fail "lease.previousKeys is set but lease.key is not: previous keys go with a signing key" }}
{{- end }}
{{- $keys := dict }}
{{- with $l.key }}{{ $_ := set $keys "lease.key" . }}{{ end }}
{{- range $i, $k := $l.previousKeys }}{{ $_ := set $keys (printf "lease.previousKeys[%d]" $i) $k }}{{ end }}
{{- range $name, $k := $keys }}
{{- if lt (len (trim $k)) 32 }}
{{- fail (printf "%s is %d bytes, want at least 32 (openssl rand -base64 48)" $name (len (trim $k))) }}
{{- end }}
{{- if contains "\n" (trim $k) }}
{{- fail (printf "%s spans lines: give one key a value (previous keys in lease.previousKeys)" $name) }}
{{- end }}
{{- end }}
{{- range $name, $_ := .Values.extraEnv }}
{{- if or (hasPrefix "LEASE_SIGNING_KEY" $name) (eq $name "LEASE_TTL") }}
{{- fail (printf "extraEnv.%s: the chart sets it from the lease values; use those" $name) }}
{{- end }}
{{- end }}
{{- end }}
