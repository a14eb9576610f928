#!/usr/bin/env bash
# Build the real node of the local cluster (kubelet and kube-proxy) into one binary with symlinks,
# from the control plane's own go.mod and go.sum (e2e/controlplane): the same k8s.io/kubernetes
# version and the same pins of its staging modules, so node and control plane never drift apart.
# Usage: build.sh OUTPUT_BINARY
set -euo pipefail
out=${1:?usage: build.sh OUTPUT_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
cp_mod=$here/../controlplane
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
k8s_version=$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$cp_mod/go.mod")
minor=$(echo "$k8s_version" | cut -d. -f2)
export GOTOOLCHAIN=local CGO_ENABLED=0
command -v go >/dev/null || { echo "build.sh: Go is not installed (need Go >= 1.25)" >&2; exit 1; }
echo "building kubelet and kube-proxy $k8s_version with $(go version) (cold: about 5 minutes on 2 cores; warm: seconds)" >&2
start=$(date +%s)
# A scratch module: this folder's Go files with the control plane's go.mod and go.sum. -mod=mod lets
# Go add the go.sum lines of packages only the node imports; versions stay those of go.mod.
src_dir="$(dirname "$out")/src"
rm -rf "$src_dir" && mkdir -p "$src_dir"
cp "$cp_mod/go.mod" "$cp_mod/go.sum" "$here"/*.go "$src_dir/"
sed -i 's|^module .*|module slipway.dev/e2e/node|' "$src_dir/go.mod"
cd "$src_dir"
go build -mod=mod -trimpath \
  -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
  -o "$out.tmp" .
mv "$out.tmp" "$out"
for c in kubelet kube-proxy; do
  ln -sf "$(basename "$out")" "$(dirname "$out")/$c"
done
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
