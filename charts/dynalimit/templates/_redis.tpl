{{/* The Redis store (backend: redis): envoyproxy/ratelimit's REDIS_* settings, passwords from a Secret, TLS files from a Secret. */}}

{{/* Name of the Secret the chart creates for Redis's passwords and TLS files. */}}
{{- define "dynalimit.redisSecretName" -}}
{{- printf "%s-redis" (include "dynalimit.fullname" .) }}
{{- end }}

{{/* Where the TLS files are mounted. */}}
{{- define "dynalimit.redisTLSDir" -}}/etc/dynalimit/redis-tls{{- end }}

{{/* The TLS files, as YAML: a map of the file name (ca.crt, tls.crt, tls.key) to the key of the Secret holding it. */}}
{{- define "dynalimit.redisTLSFiles" -}}
{{- $t := .Values.redis.tls }}
{{- $files := dict }}
{{- if $t.existingSecret }}
{{- with $t.caKey }}{{ $_ := set $files "ca.crt" . }}{{ end }}
{{- with $t.certKey }}{{ $_ := set $files "tls.crt" . }}{{ end }}
{{- with $t.keyKey }}{{ $_ := set $files "tls.key" . }}{{ end }}
{{- else }}
{{- if $t.ca }}{{ $_ := set $files "ca.crt" "ca.crt" }}{{ end }}
{{- if $t.cert }}{{ $_ := set $files "tls.crt" "tls.crt" }}{{ end }}
{{- if $t.key }}{{ $_ := set $files "tls.key" "tls.key" }}{{ end }}
{{- end }}
{{- toYaml $files }}
{{- end }}

{{/* The Secret holding the TLS files. */}}
{{- define "dynalimit.redisTLSSecretName" -}}
{{- default (include "dynalimit.redisSecretName" .) .Values.redis.tls.existingSecret }}
{{- end }}

{{/* The data of the Secret the chart creates, as YAML (empty when it creates none): the passwords given as values and the TLS files given as PEM. */}}
{{- define "dynalimit.redisSecretData" -}}
{{- $r := .Values.redis }}
{{- $data := dict }}
{{- if eq .Values.backend "redis" }}
{{- if not $r.auth.existingSecret }}
{{- with $r.auth.password }}{{ $_ := set $data "password" (b64enc .) }}{{ end }}
{{- with $r.auth.sentinelPassword }}{{ $_ := set $data "sentinel-password" (b64enc .) }}{{ end }}
{{- end }}
{{- if and $r.perSecond.enabled (not $r.perSecond.auth.existingSecret) }}
{{- with $r.perSecond.auth.password }}{{ $_ := set $data "persecond-password" (b64enc .) }}{{ end }}
{{- with $r.perSecond.auth.sentinelPassword }}{{ $_ := set $data "persecond-sentinel-password" (b64enc .) }}{{ end }}
{{- end }}
{{- if not $r.tls.existingSecret }}
{{- with $r.tls.ca }}{{ $_ := set $data "ca.crt" (b64enc .) }}{{ end }}
{{- with $r.tls.cert }}{{ $_ := set $data "tls.crt" (b64enc .) }}{{ end }}
{{- with $r.tls.key }}{{ $_ := set $data "tls.key" (b64enc .) }}{{ end }}
{{- end }}
{{- end }}
{{- if $data }}{{ toYaml $data }}{{ end }}
{{- end }}

{{/* REDIS_<prefix>_AUTH and _SENTINEL_AUTH from a Secret. Takes a dict: prefix (REDIS or REDIS_PERSECOND), auth (the values), keyPrefix (of the chart's Secret's keys), secret (the chart's Secret). */}}
{{- define "dynalimit.redisAuthEnv" -}}
{{- $a := .auth }}
{{- $secret := default .secret $a.existingSecret }}
{{- $key := "" }}
{{- $sentinelKey := "" }}
{{- if $a.existingSecret }}
{{- $key = $a.existingSecretKey }}
{{- $sentinelKey = $a.existingSecretSentinelKey }}
{{- else }}
{{- if $a.password }}{{ $key = printf "%spassword" .keyPrefix }}{{ end }}
{{- if $a.sentinelPassword }}{{ $sentinelKey = printf "%ssentinel-password" .keyPrefix }}{{ end }}
{{- end }}
{{- with $key }}
- name: {{ $.prefix }}_AUTH
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . | quote }}
{{- end }}
{{- with $sentinelKey }}
- name: {{ $.prefix }}_SENTINEL_AUTH
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . | quote }}
{{- end }}
{{- end }}

{{/* REDIS_<prefix>_URL, _TYPE, _SOCKET_TYPE, and the tuning values that are set (not _PIPELINE_LIMIT, which the binary ignores: each write sends every command queued). Takes a dict: prefix, r (the values). */}}
{{- define "dynalimit.redisConnEnv" -}}
{{- $p := .prefix }}
{{- $r := .r }}
- name: {{ $p }}_URL
  value: {{ $r.url | quote }}
- name: {{ $p }}_TYPE
  value: {{ $r.type | quote }}
- name: {{ $p }}_SOCKET_TYPE
  value: {{ $r.socketType | quote }}
{{- with $r.timeout }}
- name: {{ $p }}_TIMEOUT
  value: {{ . | quote }}
{{- end }}
{{- with $r.poolSize }}
- name: {{ $p }}_POOL_SIZE
  value: {{ . | int64 | quote }}
{{- end }}
{{- with $r.pipelineWindow }}
- name: {{ $p }}_PIPELINE_WINDOW
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The container's environment on the Redis store. */}}
{{- define "dynalimit.redisEnv" -}}
{{- $r := .Values.redis }}
{{- $secret := include "dynalimit.redisSecretName" . }}
{{- include "dynalimit.redisConnEnv" (dict "prefix" "REDIS" "r" $r) }}
{{- include "dynalimit.redisAuthEnv" (dict "prefix" "REDIS" "auth" $r.auth "keyPrefix" "" "secret" $secret) }}
{{- if $r.tls.enabled }}
- name: REDIS_TLS
  value: "true"
{{- end }}
{{- if $r.tls.skipHostnameVerification }}
- name: REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
  value: "true"
{{- end }}
{{- $files := include "dynalimit.redisTLSFiles" . | fromYaml }}
{{- $dir := include "dynalimit.redisTLSDir" . }}
{{- range $file, $name := dict "ca.crt" "REDIS_TLS_CACERT" "tls.crt" "REDIS_TLS_CLIENT_CERT" "tls.key" "REDIS_TLS_CLIENT_KEY" }}
{{- if hasKey $files $file }}
- name: {{ $name }}
  value: {{ printf "%s/%s" $dir $file | quote }}
{{- end }}
{{- end }}
{{- with $r.perSecond }}
{{- if .enabled }}
- name: REDIS_PERSECOND
  value: "true"
{{- include "dynalimit.redisConnEnv" (dict "prefix" "REDIS_PERSECOND" "r" .) }}
{{- include "dynalimit.redisAuthEnv" (dict "prefix" "REDIS_PERSECOND" "auth" .auth "keyPrefix" "persecond-" "secret" $secret) }}
{{- if .tls }}
- name: REDIS_PERSECOND_TLS
  value: "true"
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Settings the chart sets from the redis values, which extraEnv may not set. */}}
{{- define "dynalimit.redisManaged" -}}
{{- $names := list "REDIS_TLS" "REDIS_TLS_CACERT" "REDIS_TLS_CLIENT_CERT" "REDIS_TLS_CLIENT_KEY" "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION" "REDIS_PERSECOND" "REDIS_PERSECOND_TLS" }}
{{- range $p := list "REDIS" "REDIS_PERSECOND" }}
{{- range list "URL" "TYPE" "SOCKET_TYPE" "TIMEOUT" "POOL_SIZE" "PIPELINE_WINDOW" "AUTH" "SENTINEL_AUTH" }}
{{- $names = append $names (printf "%s_%s" $p .) }}
{{- end }}
{{- end }}
{{- toYaml $names }}
{{- end }}

{{/* Refuses redis values the binary would refuse, that would put a password or a file in two places, or that would leave a password in the Deployment. */}}
{{- define "dynalimit.redisCheck" -}}
{{- if eq .Values.backend "redis" }}
{{- $r := .Values.redis }}
{{- if not $r.url }}
{{- fail "backend redis needs redis.url (REDIS_URL): host:port, the cluster's nodes, or mastername,host:port,... of the sentinels" }}
{{- end }}
{{- if and $r.perSecond.enabled (not $r.perSecond.url) }}
{{- fail "redis.perSecond.enabled needs redis.perSecond.url (REDIS_PERSECOND_URL)" }}
{{- end }}
{{- range $name, $url := dict "redis.url" $r.url "redis.perSecond.url" $r.perSecond.url }}
{{- if regexMatch "^rediss?://[^/@]*:[^/@]*@" $url }}
{{- fail (printf "%s holds a password, which would be plain text in the Deployment: give it in redis.auth (a Secret)" $name) }}
{{- end }}
{{- end }}
{{- range $name, $a := dict "redis.auth" $r.auth "redis.perSecond.auth" $r.perSecond.auth }}
{{- if and $a.existingSecret (or $a.password $a.sentinelPassword) }}
{{- fail (printf "%s.existingSecret and %s.password or sentinelPassword are both set: keep the passwords in one place, the Secret" $name $name) }}
{{- end }}
{{- if and $a.existingSecretSentinelKey (not $a.existingSecret) }}
{{- fail (printf "%s.existingSecretSentinelKey is set but %s.existingSecret is not" $name $name) }}
{{- end }}
{{- end }}
{{- $t := $r.tls }}
{{- if and $t.existingSecret (or $t.ca $t.cert $t.key) }}
{{- fail "redis.tls.existingSecret and redis.tls.ca, cert or key are both set: keep the TLS files in one place" }}
{{- end }}
{{- if or (and $t.cert (not $t.key)) (and $t.key (not $t.cert)) }}
{{- fail "redis.tls.cert and redis.tls.key go together: a client certificate needs its key" }}
{{- end }}
{{- if and $t.existingSecret (or (and $t.certKey (not $t.keyKey)) (and $t.keyKey (not $t.certKey))) }}
{{- fail "redis.tls.certKey and redis.tls.keyKey go together: a client certificate needs its key" }}
{{- end }}
{{- $files := include "dynalimit.redisTLSFiles" . | fromYaml }}
{{- $tlsOn := or $t.enabled $r.perSecond.tls (hasPrefix "rediss://" $r.url) }}
{{- if and (or $files $t.skipHostnameVerification) (not $tlsOn) }}
{{- fail "redis.tls has files or skipHostnameVerification but no connection uses TLS: set redis.tls.enabled (or a rediss:// url)" }}
{{- end }}
{{- $managed := include "dynalimit.redisManaged" . | fromYamlArray }}
{{- range $name, $_ := .Values.extraEnv }}
{{- if has $name $managed }}
{{- fail (printf "extraEnv.%s: the chart sets it from the redis values (a password from a Secret); use those" $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
