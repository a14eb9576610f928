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

{{/* Rules on cluster-scoped resources: needed whatever namespaces are watched. Each names its user. */}}
{{- define "slipway.clusterRules" -}}
# Nodes for GPU memory labels, read once before a sized run's Job exists.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list"]
# kopf: discovery of the resources it serves.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
# Namespaces: their slipway.dev/allowed-models annotation (tenancy), and watching by pattern.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
# A queued run's quota: its ClusterQueue and that one's cohort (ExceedsQueueQuota).
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["clusterqueues", "cohorts"]
  verbs: ["get", "list"]
{{- end -}}

{{/* Rules on namespaced resources, as manifests/clusterrole.yaml has them. Each names its user. */}}
{{- define "slipway.namespacedRules" -}}
# Its own kinds: watched into the operator's cache; a consumed slipway.dev/promote|abort
# annotation and an earlier version's finalizer are removed by patch. It never edits a spec.
- apiGroups: ["slipway.dev"]
  resources: ["trainingruns", "modelartifacts", "inferencedeployments"]
  verbs: ["get", "list", "watch", "patch"]
# A TrainingRun that succeeds creates its ModelArtifact.
- apiGroups: ["slipway.dev"]
  resources: ["modelartifacts"]
  verbs: ["create"]
- apiGroups: ["slipway.dev"]
  resources: ["trainingruns/status", "modelartifacts/status", "inferencedeployments/status"]
  verbs: ["patch"]
# Children carry ownerReferences with blockOwnerDeletion, which needs update on the
# owner's finalizers where OwnerReferencesPermissionEnforcement is on (e.g. OpenShift).
- apiGroups: ["slipway.dev"]
  resources: ["trainingruns/finalizers", "modelartifacts/finalizers", "inferencedeployments/finalizers"]
  verbs: ["update"]
# Training, quantization and validation Jobs: created once; suspend is a patch.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Checkpoint claims: created once; their ownerReferences are patched as spec.checkpoint.whenDeleted
# says (none for Retain), and when one left by an earlier TrainingRun of the same name is adopted.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "patch"]
# The headless Service of multi-node runs and serving Services.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
# Serving Deployments and autoscalers are replaced whole (update); the canary is scaled by patch.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "update", "patch"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "update"]
# GatewayAPI traffic mode: the HTTPRoute's weights; deleted when the mode is Replicas again.
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
# Multi-node runs as one gang (spec.runtime JobSet): created once, suspended/resumed by patch.
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Kueue's Workloads of queued training Jobs: what Queued, Admitted and PreemptedByKueue say.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["list", "watch"]
# A queued run's LocalQueue: which ClusterQueue holds its quota.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["localqueues"]
  verbs: ["get", "list"]
# A queued run's place in its LocalQueue (Kueue's visibility API, an aggregated API).
- apiGroups: ["visibility.kueue.x-k8s.io"]
  resources: ["localqueues/pendingworkloads"]
  verbs: ["get"]
# Training pods for exit codes, restarts and the scheduler's reasons; patch: a training pod made
# before its MLflow run existed gets the run's id and its slipway.dev/mlflow-run gate lifted.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "patch"]
# Events on its objects, one per transition; list: the FailedCreate Events of a Job or
# Deployment whose pods the API server refuses, read only while it has none.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "list"]
{{- end -}}
