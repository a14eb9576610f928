#!/usr/bin/env bash
# Build Traefik (the local cluster's Gateway API data plane) from the Go module proxy.
# Traefik's go.mod has replace directives, so `go install traefik@version` cannot work:
# its cmd/traefik is built inside this wrapper module (go.mod copied from Traefik's, with
# the workarounds it explains). Usage: build-traefik.sh OUTPUT_BINARY
set -euo pipefail
version=v3.7.13
lego_version=v5.4.1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../go-build.sh
source "$(dirname "$0")/../go-build.sh"
go_build_setup build-traefik.sh "${1:-}"
echo "building Traefik $version with $(go version) (cold: about 4 minutes on 2 cores, 1.5 GB of modules)" >&2
work="$(dirname "$out")/build"
mkdir -p "$work"
dir_of() { go mod download -json "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'; }
traefik_dir=$(dir_of "github.com/traefik/traefik/v3@$version")
lego_dir=$(dir_of "github.com/go-acme/lego/v5@$lego_version")

# lego without the DNS providers whose SDKs the proxy refuses (a hard-linked copy, one file rewritten).
if [ ! -f "$work/lego-v5/.localkube-$lego_version" ]; then
  rm -rf "$work/lego-v5"
  cp -al "$lego_dir" "$work/lego-v5"
  chmod u+w "$work/lego-v5" "$work/lego-v5/providers/dns"
  python3 - "$work/lego-v5/providers/dns/zz_gen_dns_providers.go" <<'PY'
import os, re, sys
path = sys.argv[1]
drop = {"edgedns", "azion", "dnsimple", "alidns", "aliesa", "tencentcloud", "edgeone", "huaweicloud",
        "oraclecloud", "regfish", "sakuracloud", "ucloud", "yandexcloud"}
lines = open(path).read().split("\n")
out, i, dropped = [], 0, 0
while i < len(lines):
    line = lines[i]
    imported = re.match(r'\s*"github.com/go-acme/lego/v5/providers/dns/([a-z0-9]+)"$', line)
    if imported and imported.group(1) in drop:
        i += 1
        dropped += 1
        continue
    if line.strip().startswith("case ") and i + 1 < len(lines):
        returned = re.match(r"\s*return ([a-z0-9]+)\.", lines[i + 1])
        if returned and returned.group(1) in drop:
            i += 2
            continue
    out.append(line)
    i += 1
if dropped != len(drop):
    sys.exit(f"build-traefik.sh: expected to drop {len(drop)} providers from {path}, dropped {dropped}")
os.unlink(path)  # a hard link into the module cache: write a new file
open(path, "w").write("\n".join(out))
PY
  touch "$work/lego-v5/.localkube-$lego_version"
fi
rm -rf "$work/ext" "$work/wrap"
cp -r "$here/ext" "$work/ext"
mkdir -p "$work/wrap"
cp "$here/go.mod" "$here/go.sum" "$work/wrap/"
cp "$traefik_dir"/cmd/traefik/{logger,plugins,traefik}.go "$work/wrap/"
chmod u+w "$work/wrap"/*.go
cd "$work/wrap"
pkg=github.com/traefik/traefik/v3/pkg/version
go build -trimpath \
  -ldflags "-s -w -X $pkg.Version=$version -X $pkg.Codename=localkube -X $pkg.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  -o "$out.tmp" .
mv "$out.tmp" "$out"
echo "built $out in $(( $(date +%s) - start ))s ($(du -h "$out" | cut -f1))" >&2
