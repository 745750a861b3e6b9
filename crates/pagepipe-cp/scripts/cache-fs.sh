#!/usr/bin/env bash
# How much of the sources and the copies pagepipe-cp leaves in the page cache on each filesystem
# it can mount here: ext4, ext4 data=journal, xfs, btrfs (loop-mounted 512 MiB images) and tmpfs.
# Per filesystem and mode (auto, fallback): a 64 MiB file, a sparse one (8 MiB of data, then a
# hole to 64 MiB) and a tree of 300 files of 1 B-16 KiB are copied cold, and fincore (util-linux)
# gives what stays cached. Needs root; a filesystem whose mkfs is missing is skipped with a note.
#
#   crates/pagepipe-cp/scripts/cache-fs.sh [DIR=/var/tmp]
#
# Hold /tmp/pagepipe-cpu.lock around it on a shared machine.
set -euo pipefail
dir=${1:-/var/tmp}
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=${PAGEPIPE_CP:-"$root/target/release/pagepipe-cp"}
[ -x "$bin" ] || cargo build --release -q -p pagepipe-cp --manifest-path "$root/Cargo.toml"
work=$(mktemp -d "$dir/pagepipe-cp-cachefs.XXXXXX")
mnt="$work/mnt"
mkdir "$mnt"
cleanup() { umount "$mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

res() { # bytes of the files given that are cached
  fincore --bytes --noheadings --output RES "$@" | awk '{ s += $1 } END { print s + 0 }'
}
kib() { awk -v b="$1" 'BEGIN { printf "%d KiB", b / 1024 }'; }
cold() { # sync, then drop these files (fadvise DONTNEED through dd)
  sync
  for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done
}

echo "# $(uname -r); pagepipe-cp: $bin"
printf '| filesystem | mode | write mode | 64 MiB file: source / copy | sparse (hole at end): source / copy | 300 small files: sources / copies |\n'
printf '|---|---|---|---|---|---|\n'
for fs in ext4 ext4-data=journal xfs btrfs tmpfs; do
  case $fs in
    tmpfs) mount -t tmpfs -o size=512m tmpfs "$mnt" ;;
    *)
      mkfs=mkfs.${fs%%-*}
      if ! command -v "$mkfs" > /dev/null; then
        echo "| $fs | - | skipped: no $mkfs | | | |"
        continue
      fi
      rm -f "$work/img"
      truncate -s 512M "$work/img"
      case $fs in
        ext4*) mkfs.ext4 -q -F "$work/img" ;;
        xfs) mkfs.xfs -q -f "$work/img" ;;
        btrfs) mkfs.btrfs -q -f "$work/img" > /dev/null ;;
      esac
      opts=loop
      [ "$fs" = ext4-data=journal ] && opts=loop,data=journal
      mount -o "$opts" "$work/img" "$mnt"
      ;;
  esac
  head -c 64M /dev/urandom > "$mnt/dense"
  head -c 8M /dev/urandom > "$mnt/sparse"
  truncate -s 64M "$mnt/sparse"
  mkdir "$mnt/tree"
  python3 - "$mnt/tree" <<'PY'
import os, random, sys
rng = random.Random(40)
for i in range(300):
    with open(f"{sys.argv[1]}/f{i:03}", "wb") as f:
        f.write(rng.randbytes(rng.randint(1, 16384)))
PY
  for mode in auto fallback; do
    out="$mnt/out-$mode"
    mkdir "$out"
    cold "$mnt/dense" "$mnt/sparse" "$mnt"/tree/*
    summary=$("$bin" --mode "$mode" -r "$mnt/dense" "$mnt/sparse" "$mnt/tree" "$out")
    writes=$(echo "$summary" | sed -n 's/.*writes: \([^,]*\),.*/\1/p')
    printf '| %s | %s | %s | %s / %s | %s / %s | %s / %s |\n' "$fs" "$mode" "$writes" \
      "$(kib "$(res "$mnt/dense")")" "$(kib "$(res "$out/dense")")" \
      "$(kib "$(res "$mnt/sparse")")" "$(kib "$(res "$out/sparse")")" \
      "$(kib "$(res "$mnt"/tree/*)")" "$(kib "$(res "$out"/tree/*)")"
  done
  umount "$mnt"
done
