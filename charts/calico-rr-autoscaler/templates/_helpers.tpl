{{/*
Chart name.
*/}}
{{- define "rra.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of resources: fullnameOverride, else the release name (with the chart
name appended unless the release name contains it). Kept to 52 characters so
that suffixed names ("-selfsigned", "-metrics") stay within 63.
*/}}
{{- define "rra.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rra.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels (immutable in the Deployment: never add to them).
*/}}
{{- define "rra.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rra.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of every resource.
*/}}
{{- define "rra.labels" -}}
helm.sh/chart: {{ include "rra.chart" . }}
{{ include "rra.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: calico-rr-autoscaler
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "rra.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rra.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The controller's user name, which the webhooks never send for review.
*/}}
{{- define "rra.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "rra.serviceAccountName" .) }}
{{- end }}

{{- define "rra.image" -}}
{{- $repo := .Values.image.repository }}
{{- if .Values.image.registry }}
{{- $repo = printf "%s/%s" .Values.image.registry .Values.image.repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Webhook Service name; also the serving certificate's DNS names' first label.
*/}}
{{- define "rra.serviceName" -}}
{{- include "rra.fullname" . }}
{{- end }}

{{- define "rra.dnsNames" -}}
{{- $svc := include "rra.serviceName" . -}}
- {{ $svc }}
- {{ $svc }}.{{ .Release.Namespace }}
- {{ $svc }}.{{ .Release.Namespace }}.svc
- {{ $svc }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end }}

{{/*
Secret of the serving certificate (tls.crt, tls.key, ca.crt).
*/}}
{{- define "rra.tlsSecretName" -}}
{{- if .Values.certManager.enabled }}
{{- printf "%s-tls" (include "rra.fullname" .) }}
{{- else }}
{{- default (printf "%s-tls" (include "rra.fullname" .)) .Values.selfManagedCerts.secretName }}
{{- end }}
{{- end }}

{{/*
Names of the webhook configurations.
*/}}
{{- define "rra.webhookConfigName" -}}
{{- include "rra.fullname" . }}
{{- end }}

{{- define "rra.mutatingEnabled" -}}
{{- if .Values.webhooks.node.mutating.enabled }}true{{ end }}
{{- end }}

{{- define "rra.validatingEnabled" -}}
{{- if or .Values.webhooks.node.validating.enabled .Values.webhooks.policy.enabled .Values.webhooks.bgpPeer.enabled }}true{{ end }}
{{- end }}

{{/*
Annotations of the webhook configurations: cert-manager's CA injection.
*/}}
{{- define "rra.webhookAnnotations" -}}
{{- if .Values.certManager.enabled }}
cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "rra.tlsSecretName" .) }}
{{- end }}
{{- end }}

{{/*
clientConfig of a webhook; the argument is a dict with "ctx" (the root
context) and "path".
*/}}
{{- define "rra.clientConfig" -}}
{{- if .ctx.Values.webhook.url -}}
url: {{ printf "%s%s" (trimSuffix "/" .ctx.Values.webhook.url) .path | quote }}
{{- with .ctx.Values.webhook.caBundle }}
caBundle: {{ . }}
{{- end }}
{{- else -}}
service:
  name: {{ include "rra.serviceName" .ctx }}
  namespace: {{ .ctx.Release.Namespace }}
  path: {{ .path }}
  port: {{ .ctx.Values.service.port }}
{{- end }}
{{- end }}

{{/*
CEL matchCondition of both node webhooks: CREATE and DELETE always match; an
UPDATE matches only when something the product decides on changed: labels, the
watched annotations, spec.unschedulable, taints or the Ready condition's status.
A kubelet heartbeat (status.conditions' timestamps, images, addresses...) matches
none of these, so it never reaches the webhook.
*/}}
{{- define "rra.nodeChanged" -}}
{{- $exprs := list
  "request.operation != 'UPDATE'"
  "object.metadata.?labels.orValue({}) != oldObject.metadata.?labels.orValue({})"
  "object.spec.?unschedulable.orValue(false) != oldObject.spec.?unschedulable.orValue(false)"
  "object.spec.?taints.orValue([]) != oldObject.spec.?taints.orValue([])"
  "object.status.?conditions.orValue([]).filter(c, c.type == 'Ready').map(c, c.status) != oldObject.status.?conditions.orValue([]).filter(c, c.type == 'Ready').map(c, c.status)"
  "has(object.metadata.deletionTimestamp) != has(oldObject.metadata.deletionTimestamp)"
-}}
{{- range concat (include "rra.productAnnotations" . | fromYamlArray) .Values.webhooks.node.watchedAnnotations | uniq }}
{{- $exprs = append $exprs (printf "object.metadata.?annotations[?%s] != oldObject.metadata.?annotations[?%s]" (squote .) (squote .)) }}
{{- end }}
{{- join " ||\n" $exprs }}
{{- end }}

{{/*
The node annotations the product reads or writes (extender.WatchedAnnotationKeys;
a chart test keeps the two equal): a change to one of them reaches the node
webhooks whatever webhooks.node.watchedAnnotations says.
*/}}
{{- define "rra.productAnnotations" -}}
- projectcalico.org/RouteReflectorClusterID
- projectcalico.org/labels
- routereflector.io/route-reflectors
- routereflector.io/draining-since
- routereflector.io/draining-reason
- routereflector.io/rack
- routereflector.io/plane
- routereflector.io/standby-for
- routereflector.io/protection
{{- end }}
