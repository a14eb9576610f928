#!/usr/bin/env bash
# The wheels the images install, built on the host (a build container does not share the host's
# package index settings, and a release wants a hermetic build):
#   OUT/operator/deps   the operator's runtime dependencies, pinned by constraints.txt
#   OUT/workloads/deps  the same and the workloads extra
#   OUT/{operator,workloads}/slipway  the slipway-operator wheel of the working tree
# Each deps folder has a requirements.txt naming its wheels exactly, each with its sha256 (the image
# installs them with --require-hashes). The dependencies come in pip's hash-checking mode: every
# file fetched must have a hash constraints.txt gives, and wheels only (no build, so no unhashed
# build dependency is fetched). The dependencies are built
# once per constraints.txt and pyproject.toml (cached under .cache/images/wheels/); the slipway
# wheel is built every time, from a clean copy of the sources (a stale build/ never leaks into it).
# Usage: images/wheels.sh OUT   (PYTHON: an interpreter with pip and setuptools>=77; .venv's)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
py=${PYTHON:-.venv/bin/python}

key=$(cat constraints.txt pyproject.toml | sha256sum | cut -c1-16)
cache=.cache/images/wheels/$key
mkdir -p .cache/images/wheels  # wheels of other constraints go: one set is kept
find .cache/images/wheels -mindepth 1 -maxdepth 1 ! -name "$key" -exec rm -rf {} +
deps() {  # deps KIND EXTRA: the pinned dependency wheels of slipway-operator (with EXTRA)
  local kind=$1 extra=$2 dir=$cache/$1
  [ -f "$dir/requirements.txt" ] && return
  rm -rf "$dir" "$dir.partial" && mkdir -p "$dir.partial"
  "$py" - "$extra" > "$dir.partial/requirements.in" <<'EOF'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extra = sys.argv[1]
print("\n".join(project["dependencies"] + (project["optional-dependencies"][extra] if extra else [])))
EOF
  "$py" -m pip wheel --quiet --require-hashes --only-binary :all: -c constraints.txt \
    -r "$dir.partial/requirements.in" -w "$dir.partial"
  # The exact set: every wheel by name and version (name-version-...whl) and its sha256.
  for whl in "$dir.partial"/*.whl; do
    base=$(basename "$whl")
    echo "${base%%-*}==$(cut -d- -f2 <<<"$base") --hash=sha256:$(sha256sum "$whl" | cut -d' ' -f1)"
  done > "$dir.partial/requirements.txt"
  mv "$dir.partial" "$dir"
  echo "wheels: $kind dependencies: $(ls "$dir"/*.whl | wc -l) wheels, $(du -sh "$dir" | cut -f1)"
}
deps operator ""
deps workloads workloads

src=$out/src
rm -rf "$src" "$out/operator" "$out/workloads" && mkdir -p "$src/operator"
cp pyproject.toml README.md LICENSE "$src/"
tar -c --exclude=__pycache__ operator/slipway | tar -x -C "$src"
"$py" -m pip wheel --quiet --no-deps --no-build-isolation "$src" -w "$out/slipway"
for kind in operator workloads; do
  mkdir -p "$out/$kind/slipway"
  cp -al "$cache/$kind" "$out/$kind/deps"
  cp "$out"/slipway/*.whl "$out/$kind/slipway/"
done
rm -rf "$src" "$out/slipway"
