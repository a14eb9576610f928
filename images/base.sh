#!/usr/bin/env bash
# The images' base: a root filesystem of Debian bookworm's own packages (Python 3.11), made with
# mmdebstrap, no registry. Slimmed: no documentation (copyright files stay), man pages, locales,
# apt lists or caches; /usr merged by mmdebstrap's hook, not by the usrmerge package (which would
# bring all of perl). Usage: images/base.sh OUT.tar  (make image caches OUT under .cache/images/).
set -euo pipefail
out=$1
tmp=${out%.tar}.partial.tar
mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
  --include=python3,python3-venv,ca-certificates \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/log/*.log "$1"/var/log/apt/*' \
  bookworm "$tmp"
mv "$tmp" "$out"
