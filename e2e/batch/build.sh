#!/usr/bin/env bash
# Build the batch system the TrainingRun tests run on, from the Go module proxy: Kueue's controller
# (quotas, admission, preemption) or JobSet's (gangs of Jobs). The module's source is copied from
# the module cache into a scratch folder and built there as the main module, and its CRDs and
# webhook configuration are unpacked beside the binary (config/).
# Usage: build.sh kueue|jobset OUTPUT_BINARY
set -euo pipefail
what=${1:?usage: build.sh kueue|jobset OUTPUT_BINARY}
case "$what" in
  kueue) module=sigs.k8s.io/kueue; version=v0.17.0; pkg=./cmd/kueue
         ldflags="-X sigs.k8s.io/kueue/pkg/version.GitVersion=$version" ;;
  jobset) module=sigs.k8s.io/jobset; version=v0.11.1; pkg=.
         ldflags="-X sigs.k8s.io/jobset/pkg/version.GitVersion=$version" ;;
  *) echo "build.sh: unknown component $what (kueue or jobset)" >&2; exit 2 ;;
esac
# shellcheck source=../go-build.sh
source "$(dirname "$0")/../go-build.sh"
go_build_setup build.sh "${2:-}"
echo "building $module $version with $(go version) (cold: several minutes on 2 cores)" >&2
go_module_src "$module" "$version"
(cd "$src" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg")
config=$(dirname "$out")/config
rm -rf "$config" && mkdir -p "$config"
cp -r "$src"/config/components/crd "$src"/config/components/webhook "$src"/config/components/rbac "$config"/
mv "$out.tmp" "$out"
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1)); config in $config" >&2
