#!/usr/bin/env bash
# Times a tree of small files copied by `cp -r` + `sync` and by pagepipe-cp -r (which makes
# every copy durable before it says so), alternating, and prints each round's seconds, the
# ratio pagepipe-cp / (cp + sync), and the median, least and greatest ratio.
#
#   crates/pagepipe-cp/scripts/small-files.sh [FILES=20000] [ROUNDS=5] [DIR=/var/tmp] [PPCP_ARGS...]
#
# The tree: FILES files of 1 B to 16 KiB (uniform, seeded) in 100 directories. Before each copy
# the source is dropped from the page cache (POSIX_FADV_DONTNEED on each file) and everything
# synced, so every copy starts cold. Copies are removed only at the end: removing 20,000 files
# on a filesystem mounted with `discard` keeps the disk busy discarding for many seconds, and
# slowed whichever copy came next 5-fold. Hold
# /tmp/pagepipe-cpu.lock around it on a shared machine: flock /tmp/pagepipe-cpu.lock <script>.
set -euo pipefail
files=${1:-20000}
rounds=${2:-5}
dir=${3:-/var/tmp}
shift $(( $# < 3 ? $# : 3 ))
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin="$root/target/release/pagepipe-cp"
[ -x "$bin" ] || cargo build --release -q -p pagepipe-cp --manifest-path "$root/Cargo.toml"
work=$(mktemp -d "$dir/pagepipe-cp-small.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 - "$work/src" "$files" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(40)
for d in range(100):
    os.makedirs(f"{root}/d{d:03}", exist_ok=True)
for i in range(n):
    with open(f"{root}/d{i % 100:03}/f{i:05}", "wb") as f:
        f.write(rng.randbytes(rng.randint(1, 16384)))
PY
sync
cold() { # drop the source tree from the page cache
  python3 - "$work/src" <<'PY'
import os, sys
for d, _, names in os.walk(sys.argv[1]):
    for n in names:
        fd = os.open(os.path.join(d, n), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
}
now() { date +%s.%N; }
echo "# $(uname -r), $(findmnt -no FSTYPE,OPTIONS -T "$work"), $files files, $(du -sh "$work/src" | cut -f1), $rounds rounds; pagepipe-cp args: ${*:-none}; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| round | cp -r + sync (s) | pagepipe-cp -r (s) | ratio |\n|---|---|---|---|\n'
ratios=()
for r in $(seq 1 "$rounds"); do
  # Alternate which goes first, so neither always meets the other's leftovers.
  for who in $( [ $((r % 2)) -eq 1 ] && echo "cp pp" || echo "pp cp"); do
    dst="$work/dst-$r-$who"
    sync; cold
    t0=$(now)
    if [ "$who" = cp ]; then cp -r "$work/src" "$dst" && sync; else "$bin" -q -r "$@" "$work/src" "$dst"; fi
    t1=$(now)
    if [ "$who" = cp ]; then t_cp=$(echo "$t1 - $t0" | bc); else t_pp=$(echo "$t1 - $t0" | bc); fi
  done
  ratio=$(echo "scale=3; $t_pp / $t_cp" | bc)
  ratios+=("$ratio")
  printf '| %d | %.2f | %.2f | %.2f |\n' "$r" "$t_cp" "$t_pp" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END {
  printf "ratio pagepipe-cp / (cp -r + sync): median %.2f, range %.2f-%.2f over %d rounds\n",
    (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR], NR }'
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
