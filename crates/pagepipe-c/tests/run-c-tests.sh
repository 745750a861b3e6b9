#!/usr/bin/env bash
# Builds libpagepipe_c (release) and runs the C tests against the static and the shared
# library, compiled with the system C compiler. Called by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -p pagepipe-c
out="$target/c-tests"
mkdir -p "$out"
cc="${CC:-cc}"
flags=(-std=c11 -O2 -Wall -Wextra -Werror -pthread -Icrates/pagepipe-c/include)
"$cc" "${flags[@]}" crates/pagepipe-c/tests/c/test_pagepipe.c "$target/release/libpagepipe_c.a" \
  -lpthread -ldl -lm -o "$out/test_pagepipe_static"
"$cc" "${flags[@]}" crates/pagepipe-c/tests/c/test_pagepipe.c -L"$target/release" -lpagepipe_c \
  -Wl,-rpath,"$(cd "$target/release" && pwd)" -o "$out/test_pagepipe_shared"
echo "-- static library"
"$out/test_pagepipe_static"
echo "-- shared library"
"$out/test_pagepipe_shared"
