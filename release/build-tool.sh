#!/usr/bin/env bash
# Build a release tool from the Go module proxy (make syft; cached under .cache/):
#   syft    Anchore's SBOM generator: make release writes each image's SBOM (CycloneDX JSON) with it
# The module has no replace directives, so `go install MODULE/cmd/NAME@VERSION` builds it as released.
# Usage: build-tool.sh syft OUTPUT_BINARY
set -euo pipefail
what=${1:?usage: build-tool.sh syft OUTPUT_BINARY}
case "$what" in
  syft) module=github.com/anchore/syft; version=v1.57.2
        ldflags="-X main.version=${version#v} -X main.gitDescription=$version" ;;
  *) echo "build-tool.sh: unknown tool $what (syft)" >&2; exit 2 ;;
esac
# shellcheck source=../e2e/go-build.sh
source "$(dirname "$0")/../e2e/go-build.sh"
go_build_setup build-tool.sh "${2:-}"
echo "building $module/cmd/$what $version with $(go version) (cold: 3 to 5 minutes on 2 cores)" >&2
GOBIN=$bindir go install -trimpath -ldflags "-s -w $ldflags" "$module/cmd/$what@$version"
mv "$bindir/$what" "$out"
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
