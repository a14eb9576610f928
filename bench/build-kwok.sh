#!/usr/bin/env bash
# Build kwok (fake nodes and pods for the scale benchmarks) from the Go module proxy.
# Usage: build-kwok.sh OUTPUT_BINARY
set -euo pipefail
version=v0.8.0
# shellcheck source=../e2e/go-build.sh
source "$(dirname "$0")/../e2e/go-build.sh"
go_build_setup build-kwok.sh "${1:-}"
echo "building kwok $version with $(go version)" >&2
GOBIN=$bindir go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$version"
mv "$bindir/kwok" "$out"
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
