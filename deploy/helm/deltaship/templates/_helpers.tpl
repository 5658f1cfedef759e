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

{{/* The container's environment, in the Deployment and the helm test's pod. */}}
{{- define "deltaship.env" -}}
# The default namespace of the leader election Lease.
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- if .Values.digestKeySecret.name }}
- name: DELTASHIP_REDACTION__DIGEST_KEY_FILE
  value: /etc/deltaship-redaction/digest-key
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The container's mounts: the config, the digest key, extraVolumeMounts. */}}
{{- define "deltaship.volumeMounts" -}}
- name: config
  mountPath: /etc/deltaship
  readOnly: true
{{- if .Values.digestKeySecret.name }}
- name: digest-key
  mountPath: /etc/deltaship-redaction
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The pod's volumes behind those mounts. */}}
{{- define "deltaship.volumes" -}}
- name: config
  configMap:
    name: {{ include "deltaship.fullname" . }}
{{- if .Values.digestKeySecret.name }}
- name: digest-key
  secret:
    secretName: {{ .Values.digestKeySecret.name }}
    items:
      - key: {{ .Values.digestKeySecret.key }}
        path: digest-key
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}
