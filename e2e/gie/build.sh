#!/usr/bin/env bash
# Build the Gateway API Inference Extension's endpoint picker (EPP, ./cmd/epp) from the Go module
# proxy, and unpack its CRDs (InferencePool, InferenceObjective, InferenceModelRewrite,
# InferencePoolImport) beside it: the local cluster's inference gateway (e2e/localkube/gie.py) runs
# it as the image registry.k8s.io/gateway-api-inference-extension/epp (the node agent's table of
# known images). The module's go.work names a module its zip lacks, so the build runs with
# GOWORK=off; the source is copied from the module cache and built as the main module.
# Usage: build.sh OUTPUT_DIR   (writes OUTPUT_DIR/epp and OUTPUT_DIR/crds/*.yaml)
set -euo pipefail
module=sigs.k8s.io/gateway-api-inference-extension
version=v1.5.0
dir=${1:?usage: build.sh OUTPUT_DIR}
# shellcheck source=../go-build.sh
source "$(dirname "$0")/../go-build.sh"
go_build_setup build.sh "$dir/epp"
dir=$(dirname "$out")
export GOWORK=off
echo "building $module $version (cmd/epp) with $(go version) (warm cache: about a minute on 2 cores)" >&2
go_module_src "$module" "$version"
(cd "$src" && go build -trimpath -ldflags "-s -w" -o "$dir/epp.tmp" ./cmd/epp)
rm -rf "$dir/crds" && mkdir -p "$dir/crds"
cp "$src"/config/crd/bases/*.yaml "$dir/crds/"
mv "$dir/epp.tmp" "$dir/epp"
echo "built $dir/epp in $(( $(date +%s) - start ))s ($(du -h "$dir/epp" | cut -f1)), CRDs in $dir/crds" >&2
