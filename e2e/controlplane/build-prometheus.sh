#!/usr/bin/env bash
# Build upstream Prometheus from the Go module proxy with only the Kubernetes
# service discovery (plus file/http/static). Debian's prometheus package has
# no kubernetes_sd_configs: Debian removed it in 1.5.0 for its dependencies.
# promtool is built beside it. Usage: build-prometheus.sh OUTPUT_BINARY
set -euo pipefail
version=v0.316.0        # Go module version of Prometheus 3.16.0
release=3.16.0
# shellcheck source=../go-build.sh
source "$(dirname "$0")/../go-build.sh"
go_build_setup build-prometheus.sh "${1:-}"
echo "building Prometheus $release (kubernetes SD only) with $(go version)" >&2
# promtool too (checks and unit-tests rule files), beside the server.
GOBIN=$bindir go install -trimpath -tags remove_all_sd,enable_kubernetes_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release -X github.com/prometheus/common/version.Branch=module-proxy" \
  "github.com/prometheus/prometheus/cmd/prometheus@$version" "github.com/prometheus/prometheus/cmd/promtool@$version"
mv "$bindir/promtool" "$(dirname "$out")/promtool"
mv "$bindir/prometheus" "$out"
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
