#!/bin/sh
# Instruction counts (callgrind) of pagepipe-bench frag's real workloads, per allocator: what
# the receiver thread executes in user space per message, and what allocating and freeing a
# buffer costs there. Instruction counts do not depend on the machine's load; the kernel's
# share (the syscalls) is invisible to callgrind: compare with user_ns_per_msg and
# cpu_ns_per_msg of a normal run to see how much of the receiver's CPU the allocator is.
#
# usage: scripts/frag-callgrind.sh [MSGS]      (run from the workspace root; needs valgrind)
set -eu
MSGS=${1:-20000}
OUT=${OUT:-target/callgrind-frag}
BIN=target/release/pagepipe-bench
cargo build --release -q -p pagepipe-bench
mkdir -p "$OUT"
rm -f "$OUT"/*.out
for w in udp tcp; do
  for a in fragcache system mimalloc bytesmut; do
    # Paced sender: few drops even though valgrind slows the receiver down about 50 times.
    valgrind --tool=callgrind --callgrind-out-file="$OUT/$w-$a.%p.out" "$BIN" frag \
      --workload "$w" --runs 1 --msgs "$MSGS" --udp-rate 10000 --alloc "$a" --json \
      > "$OUT/$w-$a.json" 2> "$OUT/$w-$a.err"
  done
done
python3 - "$OUT" <<'EOF'
import glob, re, subprocess, sys
out = sys.argv[1]
def inclusive(path):
    """function -> (inclusive Ir, calls) from callgrind_annotate's inclusive listing."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                          capture_output=True, text=True).stdout
    ir, calls = {}, {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S+?:(pagepipe_bench::frag::net::\w+) \[", line)
        if m:
            ir[m.group(2)] = ir.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
        m = re.search(r"=> \S+?:(pagepipe_bench::frag::net::\w+) \(([\d,]+)x\)", line)
        if m:
            calls[m.group(1)] = max(calls.get(m.group(1), 0), int(m.group(2).replace(",", "")))
    return ir, calls
print("| workload | allocator | receiver Ir/msg | alloc Ir/msg | free Ir/msg (worker) |")
print("|---|---|---|---|---|")
for w in ["udp", "tcp"]:
    for a in ["fragcache", "system", "mimalloc", "bytesmut"]:
        best = None
        for path in glob.glob(f"{out}/{w}-{a}.*.out"):
            ir, calls = inclusive(path)
            if "pagepipe_bench::frag::net::worker" in ir:  # the receiver's process, not the sender
                best = (ir, calls)
        if best is None:
            print(f"| {w} | {a} | (no profile) | | |")
            continue
        ir, calls = best
        n = calls.get("pagepipe_bench::frag::net::release", 0) or 1
        rx = ir["pagepipe_bench::frag::net::measure"] / n
        slots = calls.get("pagepipe_bench::frag::net::fresh_slot", 0)
        alloc = ir.get("pagepipe_bench::frag::net::fresh_slot", 0) / slots if slots else float("nan")
        free = ir.get("pagepipe_bench::frag::net::release", 0) / n
        print(f"| {w} | {a} | {rx:.0f} | {alloc:.0f} | {free:.0f} |")
EOF
