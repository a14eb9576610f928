# Sourced by the build scripts of the binaries the local cluster and the tests use: Go never
# downloads a toolchain (GOTOOLCHAIN=local), no cgo, modules resolved from the module proxy.
# go_build_setup SCRIPT OUTPUT sets $out (the output's absolute path, its folder made), $start
# (for the build time printed at the end) and $bindir (a GOBIN removed on exit).
go_build_setup() {
  local script=$1
  out=${2:?usage: $script OUTPUT_BINARY}
  mkdir -p "$(dirname "$out")"
  out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
  command -v go >/dev/null || { echo "$script: Go is not installed" >&2; exit 1; }
  start=$(date +%s)
  bindir=$(mktemp -d)
  trap 'rm -rf "$bindir"' EXIT
}

# go_module_src MODULE VERSION copies the module's source from the module cache (downloading it)
# into a writable scratch folder and sets $src to it, for modules built as the main module.
go_module_src() {
  local dir
  dir=$(go mod download -json "$1@$2" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir" ] || { echo "$1@$2 is not in the module cache" >&2; exit 1; }
  src=$bindir/src
  cp -r "$dir/." "$src"
  chmod -R u+w "$src"
}
