{{/* Labels on every object: the name the plain manifests use, and Helm's own. */}}
{{- define "coscheduling.labels" -}}
app.kubernetes.io/name: coscheduling
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{/* The Lease's namespace and name (the fencing policy reads the same Lease). */}}
{{- define "coscheduling.leaseNamespace" -}}
{{ .Values.config.leaderElection.resourceNamespace | default .Release.Namespace }}
{{- end }}
{{- define "coscheduling.leaseName" -}}
{{ .Values.config.leaderElection.resourceName | default .Values.config.schedulerName | default "batch-scheduler" }}
{{- end }}

{{- define "coscheduling.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end }}

{{/* The configuration file: the values' config with apiVersion, kind and the Lease namespace. */}}
{{- define "coscheduling.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $metrics := printf "0.0.0.0:%d" (int .Values.metrics.port) -}}
{{- if $config.metricsBindAddress -}}
{{- if not (hasSuffix (printf ":%d" (int .Values.metrics.port)) $config.metricsBindAddress) -}}
{{- fail (printf "config.metricsBindAddress: %s is not on metrics.port %d (the probes and the Service use metrics.port; leave metricsBindAddress unset)" $config.metricsBindAddress (int .Values.metrics.port)) -}}
{{- end -}}
{{- else -}}
{{- $_ := set $config "metricsBindAddress" $metrics -}}
{{- end -}}
{{- if $config.leaderElection -}}
{{- $_ := set $config.leaderElection "resourceNamespace" (include "coscheduling.leaseNamespace" .) -}}
{{- end -}}
{{- $doc := merge (dict "apiVersion" "config.batch.scheduler.tencent.com/v1" "kind" "SchedulerConfiguration") $config -}}
{{ toYaml $doc }}
{{- end }}


{{/* A CRD from the chart's files with the chart's labels, kept on uninstall. */}}
{{- define "coscheduling.keptCRD" -}}
{{- $crd := .crd -}}
{{- $meta := $crd.metadata -}}
{{- $_ := set $meta "annotations" (merge (dict "helm.sh/resource-policy" "keep") ($meta.annotations | default dict)) -}}
{{- $_ := set $meta "labels" (merge (include "coscheduling.labels" .top | fromYaml) ($meta.labels | default dict)) -}}
{{ toYaml $crd }}
{{- end }}

{{/* "true" when config.pluginConfig enables the Coscheduling args' scaleUp (its RBAC follows). */}}
{{- define "coscheduling.scaleUp" -}}
{{- range ((.Values.config).pluginConfig | default list) -}}
{{- if and (eq (.name | default "") "Coscheduling") (((.args).scaleUp).enabled) -}}true{{- end -}}
{{- end -}}
{{- end -}}
