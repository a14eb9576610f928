#!/usr/bin/env bash
# Build KEDA (event-driven autoscaling: ScaledObjects, its Prometheus scaler, the external metrics
# API) from the Go module proxy: its operator and its metrics adapter. Its go.mod carries a
# `replace`, so `go install module@version` refuses it: the module's source is copied from the
# module cache into a scratch folder and built there as the main module; its CRDs
# and RBAC are unpacked beside the binaries (config/crd, config/rbac).
# Usage: build.sh OUTPUT_DIR   (writes OUTPUT_DIR/keda-operator and OUTPUT_DIR/keda-adapter)
set -euo pipefail
module=github.com/kedacore/keda/v2
version=v2.21.0
dir=${1:?usage: build.sh OUTPUT_DIR}
# shellcheck source=../go-build.sh
source "$(dirname "$0")/../go-build.sh"
go_build_setup build.sh "$dir/keda-operator"
dir=$(dirname "$out")
echo "building $module $version with $(go version) (cold: about 11 minutes on 2 cores, 3.5 GB)" >&2
go_module_src "$module" "$version"
ldflags="-s -w -X github.com/kedacore/keda/v2/version.Version=$version"
(cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$dir/keda-adapter.tmp" ./cmd/adapter)
(cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$dir/keda-operator.tmp" ./cmd/operator)
rm -rf "$dir/config" && mkdir -p "$dir/config"
cp -r "$src"/config/crd "$src"/config/rbac "$dir/config/"
mv "$dir/keda-adapter.tmp" "$dir/keda-adapter"
mv "$dir/keda-operator.tmp" "$dir/keda-operator"
echo "built $dir/keda-operator and keda-adapter in $(( $(date +%s) - start ))s ($(du -ch "$dir"/keda-* | tail -1 | cut -f1))" >&2
