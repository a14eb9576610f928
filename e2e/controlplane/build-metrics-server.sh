#!/usr/bin/env bash
# Build upstream metrics-server from the Go module proxy (its own go.mod pins its
# dependencies, so it is a separate binary from the control plane).
# Usage: build-metrics-server.sh OUTPUT_BINARY
set -euo pipefail
version=v0.8.0
# shellcheck source=../go-build.sh
source "$(dirname "$0")/../go-build.sh"
go_build_setup build-metrics-server.sh "${1:-}"
echo "building metrics-server $version with $(go version) (cold: about 4 minutes on 2 cores)" >&2
GOBIN=$bindir go install -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/metrics-server/pkg/version.gitVersion=$version" \
  "sigs.k8s.io/metrics-server/cmd/metrics-server@$version"
mv "$bindir/metrics-server" "$out"
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
