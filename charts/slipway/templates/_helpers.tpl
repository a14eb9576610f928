{{/* Prefix of every object name: see namePrefix in values.yaml. */}}
{{- define "slipway.prefix" -}}
{{- $p := .Values.namePrefix -}}
{{- if not $p -}}
{{- $p = ternary .Release.Name (printf "%s-slipway" .Release.Name) (contains "slipway" .Release.Name) -}}
{{- end -}}
{{- $p | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "slipway.operator" -}}
{{- include "slipway.prefix" . }}-operator
{{- end -}}

{{- define "slipway.labels" -}}
app.kubernetes.io/name: slipway
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "slipway.selectorLabels" -}}
app.kubernetes.io/name: slipway
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* An image reference from {repository, tag, digest}: by digest when one is set, else by tag. */}}
{{- define "slipway.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .appVersion) -}}
{{- end -}}
{{- end -}}

{{- define "slipway.image" -}}
{{- include "slipway.imageRef" (dict "image" .Values.image "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{- define "slipway.workloadsImage" -}}
{{- include "slipway.imageRef" (dict "image" .Values.workloadsImage "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{/* "true" when every watched namespace is an exact name, so namespaced RBAC can be bound to each. */}}
{{- define "slipway.narrowRBAC" -}}
{{- $exact := gt (len .Values.watchNamespaces) 0 -}}
{{- range .Values.watchNamespaces -}}
{{- if regexMatch "[*?\\[\\]!]" . -}}{{- $exact = false -}}{{- end -}}
{{- end -}}
{{- ternary "true" "" $exact -}}
{{- end -}}

{{- define "slipway.inferencePriorityClass" -}}
{{- if .Values.priorityClasses.create -}}
{{- .Values.priorityClasses.inference.name | default (printf "%s-inference" (include "slipway.prefix" .)) -}}
{{- else -}}
{{- .Values.priorityClasses.inference.name -}}
{{- end -}}
{{- end -}}

{{- define "slipway.trainingPriorityClass" -}}
{{- if .Values.priorityClasses.create -}}
{{- .Values.priorityClasses.training.name | default (printf "%s-training" (include "slipway.prefix" .)) -}}
{{- else -}}
{{- .Values.priorityClasses.training.name -}}
{{- end -}}
{{- end -}}

{{/* The operator's RBAC rules, slipway.clusterRules and slipway.namespacedRules, are generated from
   operator/slipway/kinds.py into _rbac.tpl (`make crds`). */}}
