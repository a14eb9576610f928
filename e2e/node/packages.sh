#!/usr/bin/env bash
# What the real node runs beside kubelet and kube-proxy: Debian's container runtime, CNI plugins and
# the pause image's busybox, installed if missing (apt-get update first only if apt does not know
# them). Run by `make node` every time: a check of five packages when they are there.
set -euo pipefail
packages="containerd runc containernetworking-plugins busybox-static iptables"
missing=$(for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  # shellcheck disable=SC2086 # a list of package names
  apt-cache show $missing >/dev/null 2>&1 || apt-get update -q
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
fi
