{{- /*
Slipway's CRDs as templates, one for each of the chart's files matching .glob: `helm upgrade`
applies a changed schema, which Helm never does for a chart's crds/ directory. With .keep, each
carries helm.sh/resource-policy: keep, so that `helm uninstall` (and Argo CD's prune) leaves it:
deleting a CRD deletes every object of its kind. The same file in charts/slipway and
charts/slipway-crds (a chart test holds the two equal). Called as
  include "slipway.crds" (dict "root" $ "glob" "files/slipway.dev_*.yaml" "keep" true)
*/ -}}
{{- define "slipway.crds" -}}
{{- $root := .root }}
{{- range $path, $_ := $root.Files.Glob .glob }}
{{- $crd := $root.Files.Get $path | fromYaml }}
{{- $meta := $crd.metadata }}
{{- if $.keep }}
{{- $_ := set $meta "annotations" (merge (dict "helm.sh/resource-policy" "keep") ($meta.annotations | default dict)) }}
{{- end }}
{{- $labels := dict "app.kubernetes.io/name" "slipway" "app.kubernetes.io/instance" $root.Release.Name "app.kubernetes.io/version" $root.Chart.AppVersion "app.kubernetes.io/managed-by" $root.Release.Service "helm.sh/chart" (printf "%s-%s" $root.Chart.Name $root.Chart.Version) }}
{{- $_ := set $meta "labels" (merge $labels ($meta.labels | default dict)) }}
---
{{ toYaml $crd }}
{{- end }}
{{- end -}}
