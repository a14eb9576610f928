#!/usr/bin/env bash
# make image: Slipway's operator and workloads images, built with Debian's buildah from
# images/Dockerfile, without a Docker daemon or a registry:
#   1. the base: a root filesystem of Debian's packages (images/base.sh, mmdebstrap), cached under
#      .cache/images/ and imported into buildah as localhost/slipway-base:<hash of base.sh>-<day built>;
#      built again when images/base.sh changes or when it is BASE_REFRESH_DAYS (default 7; 0: now)
#      days old, so that Debian's security updates reach the images within a week; its package list
#      (dpkg -l, in the image as /usr/share/slipway/base-packages.txt) goes to dist/ beside the images;
#   2. the wheels, built on the host (images/wheels.sh) into build/image/, the build context;
#   3. both images (buildah bud --layers: a code change rebuilds the last layers only);
#   4. checks that fail the build: the operator image's file list (images/check.py: no test
#      cluster, no test code, no workloads extra, no installer), and each image run once as UID
#      65532 on a read-only root (python -m slipway --help; the workloads import their libraries);
#   5. OCI archives in dist/, their digests printed and written to dist/images.txt.
# buildah keeps its storage in .cache/images/storage-DRIVER (STORAGE_DRIVER: overlay, the default,
# or vfs where overlayfs cannot be mounted).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DRIVER=${STORAGE_DRIVER:-overlay}
STATE=$PWD/.cache/images
bh() { buildah --root "$STATE/storage-$DRIVER" --runroot "$STATE/run-$DRIVER" --storage-driver "$DRIVER" "$@"; }
step() { echo "image: $* ($(( $(date +%s) - start ))s)"; }
start=$(date +%s)
# Debian's tools, installed if missing (apt-get update first only if apt does not know them).
missing=$(for p in buildah mmdebstrap; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  apt-cache show $missing >/dev/null 2>&1 || apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
fi
# The version the tree is stamped with (release/versioning.py; make release stamps a copy for another).
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' operator/slipway/_version.py)

# The image run once without a container runtime: its root filesystem bind-mounted read-only in a
# mount namespace of its own, the program run as UID 65532 with a clean environment.
probe() {
  local kind=$1 mnt=$2 code
  code='import errno, os, subprocess, sys
assert os.getuid() == 65532 and os.getgid() == 65532, (os.getuid(), os.getgid())
try:
    open("/probe", "w")
    sys.exit("the root filesystem is writable")
except OSError as e:
    assert e.errno == errno.EROFS, e
subprocess.run([sys.executable, "-m", "slipway", "--help"], check=True, stdout=subprocess.DEVNULL)
import slipway.cli.main, slipway.kube, slipway.operator, slipway.training.handler, slipway.inference.handler
if sys.argv[1] == "workloads":
    import numpy, onnx, onnxruntime, skl2onnx, sklearn
    import slipway.workloads.fetch, slipway.workloads.quantize, slipway.workloads.serve
    import slipway.workloads.train, slipway.workloads.validate
print(f"probe {sys.argv[1]}: UID {os.getuid()}, / read-only, python -m slipway --help ran")'
  mkdir -p "$STATE/probe-root"
  unshare --mount --propagation private sh -ec '
    mount --bind "$1" "$2"; mount -t proc proc "$2/proc"; mount --rbind /dev "$2/dev"
    mount -o remount,bind,ro "$2"
    exec chroot --userspec=65532:65532 "$2" /usr/bin/env -i PATH=/opt/slipway/bin:/usr/bin:/bin \
      HOME=/tmp python -c "$3" "$4"' probe "$mnt" "$STATE/probe-root" "$code" "$kind"
}

# 1. The base: the newest built from this images/base.sh, unless BASE_REFRESH_DAYS old (find -mtime).
base_hash=$(sha256sum images/base.sh | cut -c1-12)
mkdir -p "$STATE"
base_tar=$(bash images/base-pick.sh "$STATE" "$base_hash" "${BASE_REFRESH_DAYS:-7}")
if [ -z "$base_tar" ]; then
  base_tar=$STATE/base-$base_hash-$(date -u +%Y%m%d).tar
  step "base root filesystem (mmdebstrap; log in $STATE/base.log)"
  bash images/base.sh "$base_tar" > "$STATE/base.log" 2>&1 || { tail -n 30 "$STATE/base.log"; exit 1; }
  # Older bases, and those of another images/base.sh, go (their images in buildah's storage too).
  find "$STATE" -maxdepth 1 -name 'base-*.tar' ! -path "$base_tar" -delete
  for old in $(bh images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/slipway-base:' || true); do
    bh rmi "$old" >/dev/null 2>&1 || true
  done
fi
base_key=$(basename "$base_tar" .tar); base_key=${base_key#base-}
base=localhost/slipway-base:$base_key
if ! bh inspect --type image "$base" >/dev/null 2>&1; then
  step "importing the base as $base"
  c=$(bh from scratch)
  bh add --quiet "$c" "$base_tar" / >/dev/null
  bh config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --label dev.slipway.base.key="$base_key" --label dev.slipway.base.suite=bookworm \
    --label dev.slipway.base.packages=/usr/share/slipway/base-packages.txt --cmd '["python3"]' "$c"
  bh commit --quiet --rm "$c" "$base" >/dev/null
fi
mkdir -p dist
tar -xOf "$base_tar" ./usr/share/slipway/base-packages.txt > "dist/slipway-base-$version.packages.txt"
step "base $base: $(grep -c '^ii ' "dist/slipway-base-$version.packages.txt") Debian packages (dist/slipway-base-$version.packages.txt)"

# 2. The wheels.
step "wheels"
PYTHON=$PY bash images/wheels.sh build/image

# 3.-5. The images.
mkdir -p dist
: > dist/images.txt.partial
for kind in operator workloads; do
  image=localhost/slipway-$kind:$version
  step "building $image"
  bh bud --quiet --layers --isolation chroot --build-arg BASE="$base" --build-arg WHEELS="$kind" \
    -f images/Dockerfile -t "$image" build/image >/dev/null
  c=$(bh from --quiet "$image")
  mnt=$(bh mount "$c")
  step "checking $image"
  ok=1
  "$PY" images/check.py "$kind" "$mnt" build/image/$kind/slipway/*.whl \
    --list "dist/slipway-$kind-$version.files.txt" || ok=0
  probe "$kind" "$mnt" || ok=0
  bh umount "$c" >/dev/null && bh rm "$c" >/dev/null
  [ $ok = 1 ] || { echo "image: $image failed its checks" >&2; exit 1; }
  archive=dist/slipway-$kind-$version.oci.tar
  rm -f "$archive"
  bh push --quiet --digestfile "$STATE/digest" "$image" "oci-archive:$archive:$image"
  digest=$(cat "$STATE/digest")
  size=$(bh images --format '{{.Size}}' "$image" | tr -d ' ')
  echo "$image $digest $archive archive=$(du -m "$archive" | cut -f1)MB unpacked=$size" | tee -a dist/images.txt.partial
done
mv dist/images.txt.partial dist/images.txt
step "done: dist/images.txt"
