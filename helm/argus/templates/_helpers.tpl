{{/* Names. */}}
{{- define "argus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "argus.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "argus.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "argus.labels" -}}
{{ include "argus.commonLabels" . }}
app.kubernetes.io/component: agent
{{- end -}}

{{/* The labels above less the component (the test pod names its own). */}}
{{- define "argus.commonLabels" -}}
helm.sh/chart: {{ include "argus.chart" . }}
app.kubernetes.io/name: {{ include "argus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: argus
{{- end -}}

{{/* What the DaemonSet, Service and monitors select the agent pods by. */}}
{{- define "argus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "argus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "argus.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "argus.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "argus.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* http or https: what probes, scrapes and the test use. */}}
{{- define "argus.scheme" -}}
{{- if .Values.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* The Secret holding the token (chart-made or the user's). */}}
{{- define "argus.authSecretName" -}}
{{- default (printf "%s-auth" (include "argus.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "argus.authSecretKey" -}}
{{- if .Values.auth.existingSecret -}}{{ .Values.auth.secretKey }}{{- else -}}token{{- end -}}
{{- end -}}

{{- define "argus.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "argus.fullname" .)) .Values.tls.existingSecret -}}
{{- end -}}

{{/* The pod's ServiceAccount token is mounted only where the agent uses it. */}}
{{- define "argus.needsApiToken" -}}
{{- if eq .Values.podInfo.source "apiserver" -}}true{{- end -}}
{{- end -}}

{{/* Values that no schema can check: combinations. */}}
{{- define "argus.validate" -}}
{{- if and .Values.auth.enabled (not .Values.auth.token) (not .Values.auth.existingSecret) -}}
{{- fail "auth.enabled needs auth.token or auth.existingSecret" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) (or (not .Values.tls.cert) (not .Values.tls.key)) -}}
{{- fail "tls.enabled needs tls.cert and tls.key, or tls.existingSecret" -}}
{{- end -}}
{{- if and .Values.serviceMonitor.enabled (not .Values.service.enabled) -}}
{{- fail "serviceMonitor.enabled needs service.enabled (the ServiceMonitor finds the agents through the Service's endpoints); use podMonitor instead" -}}
{{- end -}}
{{- end -}}

{{/* One monitor endpoint's common part: scheme, TLS, token, labels. $ = root, .m = the monitor's values. */}}
{{- define "argus.monitorEndpoint" -}}
{{- $root := .root -}}
{{- $m := .m -}}
path: /metrics
interval: {{ $m.interval }}
scrapeTimeout: {{ $m.scrapeTimeout }}
honorLabels: {{ $m.honorLabels }}
scheme: {{ include "argus.scheme" $root }}
{{- if and $root.Values.tls.enabled $m.tlsConfig }}
tlsConfig:
  {{- toYaml $m.tlsConfig | nindent 2 }}
{{- end }}
{{- if $root.Values.auth.enabled }}
authorization:
  type: Bearer
  credentials:
    name: {{ include "argus.authSecretName" $root }}
    key: {{ include "argus.authSecretKey" $root }}
{{- end }}
relabelings:
  # The node the agent runs on, as the agent names it in argus_rank_info.
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
    action: replace
  {{- if $m.renameAgentLabels }}
  # The agent pod's own namespace, pod and container move to agent_*: the
  # namespace, pod and container labels then come from the agent only, on
  # argus_rank_info, where absent means unknown.
  - sourceLabels: [namespace]
    targetLabel: agent_namespace
    action: replace
  - sourceLabels: [pod]
    targetLabel: agent_pod
    action: replace
  - sourceLabels: [container]
    targetLabel: agent_container
    action: replace
  - regex: namespace|pod|container
    action: labeldrop
  {{- end }}
  {{- with $m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
