#!/bin/sh
# Instruction counts (callgrind) of pagepipe-bench frag's real workloads, per allocator: what
# the receiver thread executes in user space per message, what allocating a receive buffer
# costs there (udp), and what freeing a message costs in the worker. Instruction counts do not
# depend on the machine's load; the kernel's work (the syscalls) is invisible to callgrind:
# compare with cpu_ns_per_msg of a normal run to see how much of the
# receiver's CPU the allocator is.
#
# Each number is one valgrind run with --toggle-collect on one function (collection is per
# thread): `udp` / `tcp` (the receiving thread's whole run, setup included), `fresh_slot`
# (allocating one receive buffer), `release` (the worker dropping one message).
#
# usage: scripts/frag-callgrind.sh [MSGS]      (run from the workspace root; needs valgrind)
set -eu
MSGS=${1:-20000}
OUT=${OUT:-target/callgrind-frag}
BIN=target/release/pagepipe-bench
cargo build --release -q -p pagepipe-bench
mkdir -p "$OUT"
ir() { # workload alloc function -> instructions collected in the receiving process
  valgrind --tool=callgrind --collect-atstart=no \
    --toggle-collect="pagepipe_bench::frag::net::$3*" --callgrind-out-file=/dev/null \
    "$BIN" frag --workload "$1" --runs 1 --msgs "$MSGS" --alloc "$2" --json \
    2>&1 >"$OUT/$1-$2.json" | sed -n 's/.*Collected : //p' | sort -n | tail -1
}
echo "| workload | allocator | receiver Ir/msg | allocating Ir/buffer | freeing Ir/msg (worker) |"
echo "|---|---|---|---|---|"
for w in udp tcp; do
  for a in fragcache system mimalloc bytesmut; do
    rx=$(ir "$w" "$a" "$w")
    if [ "$w" = udp ]; then alloc=$(ir "$w" "$a" fresh_slot); else alloc=-; fi
    free=$(ir "$w" "$a" release)
    python3 - "$OUT/$w-$a.json" "$rx" "$alloc" "$free" "$w" "$a" <<'EOF'
import json, sys
path, rx, alloc, free, w, a = sys.argv[1:]
line = json.loads(open(path).readline())
sent = line["config"]["sent"]
delivered = sent * (1 - line["metrics"].get("drop_pct", 0.0) / 100)
slots = delivered + line["config"].get("batch", 0)  # the batch's first fill
per = lambda x, n: "-" if x == "-" else f"{int(x) / n:.0f}"
print(f"| {w} | {a} | {per(rx, delivered)} | {per(alloc, slots)} | {per(free, delivered)} |")
EOF
  done
done
