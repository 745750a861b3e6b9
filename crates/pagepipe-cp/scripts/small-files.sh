#!/usr/bin/env bash
# Times a tree of small files copied by `cp -r` + `sync` and by pagepipe-cp -r (which makes
# every copy durable before it says so), alternating, and prints each round's seconds, the
# ratio pagepipe-cp / (cp + sync), and the median, least and greatest ratio.
#
#   crates/pagepipe-cp/scripts/small-files.sh [FILES=20000] [ROUNDS=5] [DIR=/var/tmp] [PPCP_ARGS...]
#
# PAGEPIPE_CP=PATH times that binary (default: target/release/pagepipe-cp, built if missing).
# BASE=PATH also times another build of pagepipe-cp in the same rounds (the order of the three
# rotates from round to round), to compare a change with what it changes: a column and a median
# of its own.
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
bin=${PAGEPIPE_CP:-"$root/target/release/pagepipe-cp"}
[ -x "$bin" ] || cargo build --release -q -p pagepipe-cp --manifest-path "$root/Cargo.toml"
base=${BASE:-}
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
if [ -n "$base" ]; then
  echo "# base: $base"
  printf '| round | cp -r + sync (s) | pagepipe-cp -r (s) | ratio | base (s) | base ratio |\n|---|---|---|---|---|---|\n'
  order=(cp pp base)
else
  printf '| round | cp -r + sync (s) | pagepipe-cp -r (s) | ratio |\n|---|---|---|---|\n'
  order=(cp pp)
fi
ratios=()
base_ratios=()
for r in $(seq 1 "$rounds"); do
  # Rotate which goes first, so none always meets another's leftovers.
  n=${#order[@]}
  for i in $(seq 0 $((n - 1))); do
    who=${order[$(( (i + r - 1) % n ))]}
    dst="$work/dst-$r-$who"
    sync; cold
    t0=$(now)
    case $who in
      cp) cp -r "$work/src" "$dst" && sync ;;
      pp) "$bin" -q -r "$@" "$work/src" "$dst" ;;
      base) "$base" -q -r "$@" "$work/src" "$dst" ;;
    esac
    t1=$(now)
    case $who in
      cp) t_cp=$(echo "$t1 - $t0" | bc) ;;
      pp) t_pp=$(echo "$t1 - $t0" | bc) ;;
      base) t_base=$(echo "$t1 - $t0" | bc) ;;
    esac
  done
  ratio=$(echo "scale=3; $t_pp / $t_cp" | bc)
  ratios+=("$ratio")
  if [ -n "$base" ]; then
    base_ratio=$(echo "scale=3; $t_base / $t_cp" | bc)
    base_ratios+=("$base_ratio")
    printf '| %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n' "$r" "$t_cp" "$t_pp" "$ratio" "$t_base" "$base_ratio"
  else
    printf '| %d | %.2f | %.2f | %.2f |\n' "$r" "$t_cp" "$t_pp" "$ratio"
  fi
done
summary() { # LABEL RATIO...
  local label=$1; shift
  printf '%s\n' "$@" | sort -n | awk -v label="$label" '{ v[NR] = $1 } END {
    printf "ratio %s / (cp -r + sync): median %.2f, range %.2f-%.2f over %d rounds\n", label,
      (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR], NR }'
}
summary pagepipe-cp "${ratios[@]}"
[ -z "$base" ] || summary base "${base_ratios[@]}"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
