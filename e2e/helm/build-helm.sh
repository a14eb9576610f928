#!/usr/bin/env bash
# Build Helm (the client the chart tests drive: lint, template, install, uninstall) from the
# Go module proxy. Helm's go.mod has no replace directives, so `go install` of its cmd/helm
# at a tagged version works directly. Usage: build-helm.sh OUTPUT_BINARY
set -euo pipefail
version=v3.22.0
k8s_minor=37            # Helm v3.22.0 builds against k8s.io/client-go v0.37: its lint and template default to 1.37
# shellcheck source=../go-build.sh
source "$(dirname "$0")/../go-build.sh"
go_build_setup build-helm.sh "${1:-}"
echo "building Helm $version with $(go version) (cold: about 3 minutes on 2 cores, 400 MB of modules)" >&2
# The same -X flags as Helm's own Makefile, so `helm version` and the Kubernetes version
# that `helm lint`/`helm template` assume are those of a release build.
GOBIN=$bindir go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor" \
  "helm.sh/helm/v3/cmd/helm@$version"
mv "$bindir/helm" "$out"
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
