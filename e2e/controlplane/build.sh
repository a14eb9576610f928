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
echo "building control plane $k8s_version with $(go version) (cold: about 8 minutes on 2 cores; warm: seconds)" >&2
start=$(date +%s)
cd "$here"

# The one deviation from upstream: every pod of the local cluster lives on its
# own loopback address (127.0.x.y), which Endpoints/EndpointSlice validation
# rejects ("may not be in the loopback range"). ValidateEndpointIP is patched
# to accept loopback addresses when the kube-apiserver runs with
# LOCALKUBE_ALLOW_LOOPBACK_ENDPOINTS=true (the launcher sets it); without that
# variable the binary behaves as upstream. Go refuses overlays of files in the
# module cache, so the module is hard-linked into a patched copy (outside the
# repo) that a build-time copy of go.mod substitutes; go.mod stays upstream.
go mod download k8s.io/kubernetes   # a fresh module cache has nothing to list yet
kmod="$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
[ -n "$kmod" ] || { echo "build.sh: k8s.io/kubernetes is not in the module cache after go mod download" >&2; exit 1; }
patched_dir="$(dirname "$out")/kubernetes-$k8s_version-localkube"
rel=pkg/apis/core/validation/validation.go
if ! grep -q LOCALKUBE_ALLOW_LOOPBACK_ENDPOINTS "$patched_dir/$rel" 2>/dev/null; then
  rm -rf "$patched_dir"
  cp -al "$kmod" "$patched_dir"
  chmod u+w "$patched_dir/$(dirname "$rel")"
  rm -f "$patched_dir/$rel"
  if grep -qx $'\t"os"' "$kmod/$rel"; then echo "build.sh: $rel already imports os; adjust the patch" >&2; exit 1; fi
  awk '
    !imported && /^import \($/ { print; print "\t\"os\""; imported = 1; next }
    /^\tif ip.IsLoopback\(\) \{$/ && !done {
      print "\tif ip.IsLoopback() && os.Getenv(\"LOCALKUBE_ALLOW_LOOPBACK_ENDPOINTS\") != \"true\" {"
      done = 1; next
    }
    { print }
    END { if (!imported || !done) exit 1 }
  ' "$kmod/$rel" > "$patched_dir/$rel.tmp" || { echo "build.sh: could not patch $rel (upstream changed?)" >&2; exit 1; }
  mv "$patched_dir/$rel.tmp" "$patched_dir/$rel"
fi
# Build from a copy of this module whose go.mod also replaces k8s.io/kubernetes
# with the patched copy (module mode keeps the module graph exactly as go.mod
# and go.sum describe it).
src_dir="$(dirname "$out")/src"
rm -rf "$src_dir" && mkdir -p "$src_dir"
cp "$here/go.mod" "$here/go.sum" "$here"/*.go "$src_dir/"
printf '\nreplace k8s.io/kubernetes => %s\n' "$patched_dir" >> "$src_dir/go.mod"
cd "$src_dir"

go build -trimpath \
  -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
  -o "$out.tmp" .
mv "$out.tmp" "$out"
for c in etcd kube-apiserver kube-controller-manager kube-scheduler metrics-adapter kubectl; do
  ln -sf "$(basename "$out")" "$(dirname "$out")/$c"
done
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
