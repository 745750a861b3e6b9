#!/bin/bash
# Two pagepipe-bench binaries, alternating, each run between two readings of the vCPUs'
# cache-line round trip (scripts/core-rtt.c), so runs can be sorted by the host's placement:
# keep the rows whose two readings agree (both under 250 ns: near; both over 350: far).
#
#   scripts/placement-ab.sh OLD_BENCH NEW_BENCH ROUNDS [bw options...]
#   e.g. scripts/placement-ab.sh /tmp/old-bench target/release/pagepipe-bench 10
#
# Prints one line per run: time, rtt before, rtt after, which binary, MB/s per transport.
# Hold /tmp/pagepipe-cpu.lock around it, as around every benchmark.
set -eu
old=$1 new=$2 rounds=$3
shift 3
[ $# -gt 0 ] || set -- --pipe-size 1048576 --transport kernel,pagepipe,rtrb
rtt=/tmp/core-rtt
cc -O2 -pthread "$(dirname "$0")/core-rtt.c" -o "$rtt"
for _ in $(seq "$rounds"); do
    for which in old new; do
        bench=$old
        [ "$which" = new ] && bench=$new
        before=$("$rtt")
        mbs=$("$bench" bw --duration 0.3 --runs 2 "$@" 2>&1 | grep "MB/s" |
            awk -F'|' '{gsub(/ /, "", $4); split($5, a, " "); printf "%s=%s ", $4, a[1]}')
        echo "$(date +%T) $before $("$rtt") $which $mbs"
    done
done
