{{/* Names and labels shared by every template. */}}

{{/* The chart name, or nameOverride. */}}
{{- define "deltaship.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the objects: fullnameOverride, else the release name when it already
contains the chart name, else "<release>-<chart>". 63 characters at most (DNS labels).
*/}}
{{- define "deltaship.fullname" -}}
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

{{- define "deltaship.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "deltaship.labels" -}}
helm.sh/chart: {{ include "deltaship.chart" . }}
{{ include "deltaship.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels that select the pods (Deployment, Service, PodDisruptionBudget). */}}
{{- define "deltaship.selectorLabels" -}}
app.kubernetes.io/name: {{ include "deltaship.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "deltaship.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "deltaship.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The HTTP port: the port of config.http.listen (deltaship's default 0.0.0.0:9090). */}}
{{- define "deltaship.httpPort" -}}
{{- dig "http" "listen" "0.0.0.0:9090" .Values.config | splitList ":" | last }}
{{- end }}

{{/* The namespace of the leader election Lease: config.leader_election.namespace, else the
release namespace (deltaship's default is $POD_NAMESPACE, the pod's own). */}}
{{- define "deltaship.leaseNamespace" -}}
{{- dig "leader_election" "namespace" "" .Values.config | default .Release.Namespace }}
{{- end }}

{{/* rbac.scope: "cluster" (the default) or "namespaced"; anything else fails the render. */}}
{{- define "deltaship.rbacScope" -}}
{{- $scope := .Values.rbac.scope | default "cluster" }}
{{- if not (has $scope (list "cluster" "namespaced")) }}
{{- fail (printf "rbac.scope is %q: use cluster (a ClusterRole, all namespaces) or namespaced (a Role in each namespace of config.resources[].namespaces)" $scope) }}
{{- end }}
{{- $scope }}
{{- end }}
