{{/* Names, labels and image references shared by every template of the chart. */}}

{{- define "cso.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cso.fullname" -}}
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

{{/*
<fullname><suffix> within 63 characters (the limit of Service and ConfigMap names): the fullname
is cut, never the suffix (cutting the whole name could make two names equal). Usage:
include "cso.suffixedName" (list . "-metrics").
*/}}
{{- define "cso.suffixedName" -}}
{{- $ctx := index . 0 }}
{{- $suffix := index . 1 }}
{{- $prefix := include "cso.fullname" $ctx | trunc (sub 63 (len $suffix) | int) | trimSuffix "-" }}
{{- printf "%s%s" $prefix $suffix }}
{{- end }}

{{- define "cso.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cso.selectorLabels" -}}
{{- /* Quoted: a release named 2024, true or on must stay a string. */}}
app.kubernetes.io/name: {{ include "cso.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{- define "cso.labels" -}}
helm.sh/chart: {{ include "cso.chart" . | quote }}
{{ include "cso.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: content-platform
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end }}

{{/*
The chart's labels with a user label map (podLabels, metrics.service.labels, serviceMonitor.labels,
...) as one YAML map, so no key appears twice. User labels may add labels and override the other
chart labels, never the selector labels (app.kubernetes.io/name, app.kubernetes.io/instance): the
Deployment, the metrics Service, the ServiceMonitor and the NetworkPolicy select by them. Usage:
include "cso.labelsWith" (list . .Values.metrics.service.labels).
*/}}
{{- define "cso.labelsWith" -}}
{{- $ctx := index . 0 }}
{{- $user := index . 1 | default dict }}
{{- toYaml (merge (include "cso.selectorLabels" $ctx | fromYaml) (deepCopy $user) (include "cso.labels" $ctx | fromYaml)) }}
{{- end }}

{{- define "cso.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cso.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cso.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The operator's RBAC rules live in files/rbac-rules.yaml (plain YAML, no templating) so tests can
compare them with the operator's code. Usage: include "cso.rules" (list . "watchedNamespaces").
*/}}
{{- define "cso.rules" -}}
{{- $ctx := index . 0 }}
{{- $key := index . 1 }}
{{- $all := $ctx.Files.Get "files/rbac-rules.yaml" | fromYaml }}
{{- if hasKey $all "Error" }}{{ fail (printf "files/rbac-rules.yaml: %s" $all.Error) }}{{ end }}
{{- if not (hasKey $all $key) }}{{ fail (printf "files/rbac-rules.yaml: missing key %s" $key) }}{{ end }}
{{- with (index $all $key) }}{{ toYaml . }}{{ end }}
{{- end }}

{{/* The leader-election Lease's name (the operator's --lease-name; the Role names it). */}}
{{- define "cso.leaseName" -}}
{{- include "cso.fullname" . }}
{{- end }}

{{/* content-operator's command line (operator/src/main.rs: `content-operator run ...`). The flags
the chart sets itself cannot be repeated in extraArgs (the operator refuses a flag given twice);
the template says which value sets each instead. */}}
{{- define "cso.operatorArgs" -}}
{{- $own := dict "--metrics-listen" "metrics.address and metrics.port" "--lease-name" "fullnameOverride (the Lease is named like the chart's objects)" "--lease-namespace" "the release namespace (the Lease's Role is there)" "--namespaces" "watchNamespaces" "--allow-host-path" "allowHostPath" }}
{{- range .Values.extraArgs }}
{{- $flag := regexReplaceAll "=.*$" (toString .) "" }}
{{- if hasKey $own $flag }}
{{- fail (printf "extraArgs: %s is set by the chart; use %s instead" $flag (index $own $flag)) }}
{{- end }}
{{- end }}
- run
{{- $addr := .Values.metrics.address | default "*" }}
{{- if contains ":" $addr }}{{ $addr = printf "[%s]" $addr }}{{ end }}
- {{ printf "--metrics-listen=%s:%v" $addr .Values.metrics.port | quote }}
- {{ printf "--lease-name=%s" (include "cso.leaseName" .) | quote }}
{{- with .Values.watchNamespaces }}
- {{ printf "--namespaces=%s" (join "," .) | quote }}
{{- end }}
{{- if .Values.allowHostPath }}
- "--allow-host-path"
{{- end }}
{{- end }}

{{/* A Prometheus duration ("1h30m", "10s", "500ms"; the values schema checks the syntax) in
milliseconds. Usage: include "cso.durationMs" "30s". */}}
{{- define "cso.durationMs" -}}
{{- $units := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 }}
{{- $total := 0 }}
{{- range regexFindAll "[0-9]+(ms|y|w|d|h|m|s)" (toString .) -1 }}
{{- /* atoi: base 10, so "010s" is 10 s as Prometheus reads it (mul alone reads 010 as octal). */}}
{{- $total = add $total (mul (atoi (regexFind "^[0-9]+" .)) (get $units (regexReplaceAll "^[0-9]+" . ""))) }}
{{- end }}
{{- $total }}
{{- end }}
