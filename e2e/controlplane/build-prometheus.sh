#!/usr/bin/env bash
# Build upstream Prometheus from the Go module proxy with only the Kubernetes
# service discovery (plus file/http/static). Debian's prometheus package has
# no kubernetes_sd_configs: Debian removed it in 1.5.0 for its dependencies.
# promtool is built beside it. Usage: build-prometheus.sh OUTPUT_BINARY
set -euo pipefail
out=${1:?usage: build-prometheus.sh OUTPUT_BINARY}
version=v0.316.0        # Go module version of Prometheus 3.16.0
release=3.16.0
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
command -v go >/dev/null || { echo "build-prometheus.sh: Go is not installed" >&2; exit 1; }
echo "building Prometheus $release (kubernetes SD only) with $(go version)" >&2
start=$(date +%s)
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
# promtool too (checks and unit-tests rule files), beside the server.
GOBIN=$bindir go install -trimpath -tags remove_all_sd,enable_kubernetes_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release -X github.com/prometheus/common/version.Branch=module-proxy" \
  "github.com/prometheus/prometheus/cmd/prometheus@$version" "github.com/prometheus/prometheus/cmd/promtool@$version"
mv "$bindir/promtool" "$(dirname "$out")/promtool"
mv "$bindir/prometheus" "$out"
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
