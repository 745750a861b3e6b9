#!/usr/bin/env bash
# Builds libpagepipe_c (release) and the C examples against its static library into
# $CARGO_TARGET_DIR/c-examples (target/c-examples by default); prints that directory.
set -euo pipefail
cd "$(dirname "$0")/../../.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -p pagepipe-c >&2
out="$target/c-examples"
mkdir -p "$out"
for ex in bw_pipe lat_pipe pipe_bench; do
  "${CC:-cc}" -std=c11 -O2 -Wall -Wextra -Werror -Icrates/pagepipe-c/include \
    "crates/pagepipe-c/examples/$ex.c" "$target/release/libpagepipe_c.a" -lpthread -ldl -lm \
    -o "$out/$ex"
done
echo "$out"
