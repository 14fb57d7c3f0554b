{{/* The release's full name: the release name, or release-chart when the
release name does not already contain the chart's. */}}
{{- define "pgoutbox.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. app.kubernetes.io/name is also the Prometheus
job label (the ServiceMonitor's jobLabel), which alerts.yml expects to be
"pgoutbox" whatever the release is called. */}}
{{- define "pgoutbox.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pgoutbox
{{- end -}}

{{/* Selector of the relay pods: stable across upgrades (a Deployment's
selector is immutable), so no version in it. */}}
{{- define "pgoutbox.relaySelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: relay
{{- end -}}

{{- define "pgoutbox.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pgoutbox.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image, pinned: a digest, else a tag defaulting to the chart's
appVersion. */}}
{{- define "pgoutbox.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if eq $tag "latest" -}}
{{- fail "image.tag: latest is not a version; set the release you deploy (or leave it empty for the chart's appVersion)" -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* The pod and container security settings of every pgoutbox container:
the image's nonroot user, nothing written to disk, no privilege. */}}
{{- define "pgoutbox.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "pgoutbox.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Values the schema cannot express. */}}
{{- define "pgoutbox.validate" -}}
{{- if not (has .Values.relay.source (list "table" "wal")) -}}
{{- fail (printf "relay.source: %q is not a source (want table or wal)" .Values.relay.source) -}}
{{- end -}}
{{- if not .Values.database.existingSecret -}}
{{- fail "database.existingSecret: name the Secret holding the database URLs (the chart creates none)" -}}
{{- end -}}
{{- end -}}
