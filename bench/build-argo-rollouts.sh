#!/usr/bin/env bash
# Build the Argo Rollouts controller (the peer the benchmarks measure Slipway against) from the Go
# module proxy, and unpack its CRDs. Its go.mod has a replace block (every k8s.io module pinned),
# which `go install pkg@version` refuses, so the module's source is copied from the module cache
# into a scratch folder and built there as the main module, its replace block in force.
# Usage: build-argo-rollouts.sh OUTPUT_BINARY   (the CRDs go to OUTPUT_BINARY's folder, crds/)
set -euo pipefail
version=v1.10.1
module=github.com/argoproj/argo-rollouts
# shellcheck source=../e2e/go-build.sh
source "$(dirname "$0")/../e2e/go-build.sh"
go_build_setup build-argo-rollouts.sh "${1:-}"
echo "building Argo Rollouts $version with $(go version) (cold: several minutes on 2 cores)" >&2
go_module_src "$module" "$version"
(cd "$src" && go build -trimpath \
  -ldflags "-s -w -X $module/utils/version.version=${version#v} -X $module/utils/version.gitTreeState=clean" \
  -o "$out" ./cmd/rollouts-controller)
crds=$(dirname "$out")/crds
rm -rf "$crds" && mkdir -p "$crds"
cp "$src"/manifests/crds/*-crd.yaml "$crds"/
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1)); CRDs in $crds" >&2
