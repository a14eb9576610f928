#!/usr/bin/env bash
# The images' base: a root filesystem of Debian bookworm's own packages (Python 3.11), made with
# mmdebstrap, no registry. Slimmed: no documentation (copyright files stay), man pages, locales,
# apt lists or caches; /usr merged by mmdebstrap's hook, not by the usrmerge package (which would
# bring all of perl). Usage: images/base.sh OUT.tar  (make image caches OUT under .cache/images/ and
# builds it again when it is BASE_REFRESH_DAYS old: images/build.sh).
# The suites move (point releases; security updates in bookworm-security): the base comes from bookworm,
# bookworm-updates and bookworm-security (mmdebstrap's default for a Debian suite, named here so that it
# stays so), and records what it got in /usr/share/slipway/base-packages.txt: the day, each suite's
# Release date and dpkg -l.
set -euo pipefail
out=$1
tmp=${out%.tar}.partial.tar
mirror=http://deb.debian.org
record='mkdir -p "$1/usr/share/slipway" && {
  echo "# The base of the Slipway images: Debian bookworm, built $(date -u +%Y-%m-%dT%H:%MZ) by images/base.sh"
  for f in "$1"/var/lib/apt/lists/*_InRelease; do
    echo "# $(sed -n "s/^Codename: //p" "$f") ($(sed -n "s/^Suite: //p" "$f")): $(sed -n "s/^Date: //p" "$f")"
  done
  COLUMNS=200 dpkg-query --admindir="$1/var/lib/dpkg" -l
} > "$1/usr/share/slipway/base-packages.txt"'
mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
  --include=python3,python3-venv,ca-certificates \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --customize-hook="$record" \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/log/*.log "$1"/var/log/apt/*' \
  bookworm "$tmp" \
  "deb $mirror/debian bookworm main" \
  "deb $mirror/debian bookworm-updates main" \
  "deb $mirror/debian-security bookworm-security main"
mv "$tmp" "$out"
