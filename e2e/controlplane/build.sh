#!/usr/bin/env bash
# Build the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) from upstream Go modules into one binary with symlinks.
# Usage: build.sh OUTPUT_BINARY
set -euo pipefail
out=${1:?usage: build.sh OUTPUT_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
k8s_version=$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")
minor=$(echo "$k8s_version" | cut -d. -f2)
export GOTOOLCHAIN=local CGO_ENABLED=0
command -v go >/dev/null || { echo "build.sh: Go is not installed (need Go >= 1.25)" >&2; exit 1; }
echo "building control plane $k8s_version with $(go version) (a cold build takes 10-20 minutes)" >&2
start=$(date +%s)
cd "$here"
go build -trimpath \
  -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
  -o "$out.tmp" .
mv "$out.tmp" "$out"
for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
  ln -sf "$(basename "$out")" "$(dirname "$out")/$c"
done
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
