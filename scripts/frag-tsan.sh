#!/usr/bin/env bash
# ThreadSanitizer run of the fragment cache (issue 28, item 5): its unit tests and the property
# test tests/frag.rs (fragments dropped on another thread racing refills, the spare list and
# shrink()), built with TSan and an instrumented std. .ci/run runs it where nightly is present
# (about 3 minutes here).
#
# Needs a nightly toolchain with rust-src (rustup component add rust-src --toolchain nightly).
# Usage: scripts/frag-tsan.sh [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="-Zsanitizer=thread"
export RUSTDOCFLAGS="-Zsanitizer=thread"
# allocator_may_return_null: the tests ask for allocations that must be refused (a panic).
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 allocator_may_return_null=1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/tsan}"
target="$(rustc +nightly -vV | sed -n 's/^host: //p')"
cargo +nightly test -Zbuild-std --target "$target" -p pagepipe --lib frag "$@"
cargo +nightly test -Zbuild-std --target "$target" -p pagepipe --test frag "$@"
