#!/usr/bin/env bash
# System packages the local cluster needs and pip cannot bring: Debian's
# Prometheus. Go (>= 1.25) must already be installed for the control plane.
set -euo pipefail
missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
  echo "install-system-deps: need ${missing[*]} (apt-get install ${missing[*]}) and cannot become root" >&2
  exit 1
fi
echo "installing ${missing[*]} with apt-get" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts the packaged service; the tests run their own Prometheus on 127.0.0.1.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  $sudo systemctl stop prometheus || true
fi
