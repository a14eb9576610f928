#!/usr/bin/env bash
# The cached base images/build.sh reuses: the newest DIR/base-HASH-YYYYMMDD.tar (HASH: of images/base.sh)
# made less than DAYS days ago (find -mtime -DAYS; 0: none, so the base is made again). Prints its path,
# or nothing when the base is to be made again. Usage: base-pick.sh DIR HASH DAYS
set -euo pipefail
dir=$1 hash=$2 days=$3
[[ $days =~ ^[0-9]+$ ]] || { echo "image: BASE_REFRESH_DAYS=$days is not a number of days" >&2; exit 2; }
find "$dir" -maxdepth 1 -name "base-$hash-*.tar" ! -name '*.partial.tar' -mtime "-$days" -printf '%T@ %p\n' \
  | sort -rn | head -n1 | cut -d' ' -f2-
