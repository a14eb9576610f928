#!/usr/bin/env bash
# Build upstream metrics-server from the Go module proxy (its own go.mod pins its
# dependencies, so it is a separate binary from the control plane).
# Usage: build-metrics-server.sh OUTPUT_BINARY
set -euo pipefail
out=${1:?usage: build-metrics-server.sh OUTPUT_BINARY}
version=v0.8.0
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
command -v go >/dev/null || { echo "build-metrics-server.sh: Go is not installed" >&2; exit 1; }
echo "building metrics-server $version with $(go version) (cold: about 4 minutes on 2 cores)" >&2
start=$(date +%s)
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
GOBIN=$bindir go install -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/metrics-server/pkg/version.gitVersion=$version" \
  "sigs.k8s.io/metrics-server/cmd/metrics-server@$version"
mv "$bindir/metrics-server" "$out"
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
