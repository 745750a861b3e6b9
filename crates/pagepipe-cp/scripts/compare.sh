#!/usr/bin/env bash
# Copies one file with cp, dd oflag=direct, dd iflag=nocache oflag=nocache (alone, and followed
# by coreutils' documented `dd of=F oflag=nocache conv=notrunc,fdatasync count=0` that drops the
# written file) and pagepipe-cp (auto and fallback), alternating, and prints the time (including making the copy durable)
# and how much of the source and the copy each left in the page cache (fincore, util-linux).
#
#   crates/pagepipe-cp/scripts/compare.sh [SIZE_MiB=2048] [ROUNDS=2] [DIR=/var/tmp]
#
# Before each copy the source's cache is dropped (dd iflag=nocache count=0, our file only) so
# every tool starts cold. cp and plain dd do not fsync; `sync -d` is timed with them so every
# row has the copy on disk.
set -euo pipefail
size_mib=${1:-2048}
rounds=${2:-2}
dir=${3:-/var/tmp}
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin="$root/target/release/pagepipe-cp"
[ -x "$bin" ] || cargo build --release -q -p pagepipe-cp --manifest-path "$root/Cargo.toml"
work=$(mktemp -d "$dir/pagepipe-cp-compare.XXXXXX")
trap 'rm -rf "$work"' EXIT
src="$work/src"
dst="$work/dst"
head -c $((size_mib << 20)) /dev/urandom > "$src"
sync -d "$src"

cached() { fincore --bytes --noheadings --output RES "$1" | tr -d ' '; }

declare -A tools=(
  [cp]="cp '$src' '$dst' && sync -d '$dst'"
  [dd-direct]="dd if='$src' of='$dst' bs=1M oflag=direct status=none && sync -d '$dst'"
  [dd-nocache]="dd if='$src' of='$dst' bs=1M iflag=nocache oflag=nocache conv=fdatasync status=none"
  [dd-nocache+drop]="dd if='$src' of='$dst' bs=1M iflag=nocache oflag=nocache conv=fdatasync status=none && dd of='$dst' oflag=nocache conv=notrunc,fdatasync count=0 status=none"
  [pagepipe-cp]="'$bin' -q '$src' '$dst'"
  [pagepipe-cp-fallback]="'$bin' -q --mode fallback '$src' '$dst'"
)
order=(cp dd-direct dd-nocache dd-nocache+drop pagepipe-cp pagepipe-cp-fallback)

echo "# $(uname -r), $(findmnt -no FSTYPE -T "$work") in $dir, ${size_mib} MiB, $rounds round(s); load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| %-22s | %5s | %8s | %8s | %14s | %14s |\n' tool round "seconds" "MB/s" "source cached" "copy cached"
printf '|%s|\n' "------------------------|-------|----------|----------|----------------|----------------"
for r in $(seq 1 "$rounds"); do
  for t in "${order[@]}"; do
    rm -f "$dst"
    dd if="$src" iflag=nocache count=0 status=none
    sync
    t0=$(date +%s.%N)
    bash -c "${tools[$t]}"
    t1=$(date +%s.%N)
    s_c=$(cached "$src"); d_c=$(cached "$dst")
    awk -v t="$t" -v r="$r" -v secs="$(awk "BEGIN{print $t1 - $t0}")" -v total=$((size_mib << 20)) \
      -v s="$s_c" -v d="$d_c" 'BEGIN {
        printf "| %-22s | %5d | %8.2f | %8.0f | %5.1f%% %6s | %5.1f%% %6s |\n", t, r, secs,
          total / 1e6 / secs, 100 * s / total, int(s / 1048576) "M", 100 * d / total, int(d / 1048576) "M" }'
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
