#!/usr/bin/env bash
# Installs libpagepipe_c with install.sh into a temporary prefix, builds the README's example with
# the README's own `cc` lines (pkg-config, shared and static) and runs it, then runs the C tests
# against the installed static and shared library, compiled with the system C compiler. Called
# by .ci/run. Arguments, if any, name the C tests to run (all by default).
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$(pwd)
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
out="$target/c-tests"
prefix="$out/prefix"
rm -rf "$out"
mkdir -p "$out"
crates/pagepipe-c/install.sh "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
readme=crates/pagepipe-c/README.md

echo "-- the README's example, built with the README's link lines"
# The first ```c block is prog.c; every line of the first ```sh block that starts with `cc ` is
# run as written, in a directory of its own.
awk '/^```c$/ {on = 1; next} on && /^```$/ {exit} on' "$readme" >"$out/prog.c"
mapfile -t lines < <(awk '/^```sh$/ {on = 1; next} on && /^```$/ {exit} on && /^cc /' "$readme")
[ "${#lines[@]}" -eq 2 ] || { echo "expected 2 cc lines in $readme, found ${#lines[@]}" >&2; exit 1; }
for i in "${!lines[@]}"; do
  dir="$out/readme-$i"
  mkdir -p "$dir"
  cp "$out/prog.c" "$dir/prog.c"
  (cd "$dir" && eval "${lines[$i]}")
  echo "\$ $(sed 's/ *#.*//' <<<"${lines[$i]}")"
  "$dir/prog"
  if ldd "$dir/prog" | grep -q libpagepipe_c; then kind=shared; else kind=static; fi
  echo "   ($kind, $(stat -c %s "$dir/prog") bytes)"
done
# The static line must not need the shared library, the shared one must find it without help.
ldd "$out/readme-1/prog" | grep -q libpagepipe_c && { echo "static build links the .so" >&2; exit 1; }
ldd "$out/readme-0/prog" | grep libpagepipe_c | grep -q "$prefix" \
  || { echo "shared build does not find $prefix's library" >&2; exit 1; }
echo "   static library: $(stat -c %s "$prefix/lib/libpagepipe_c.a") bytes," \
  "shared: $(stat -c %s "$(readlink -f "$prefix/lib/libpagepipe_c.so")") bytes"

cc="${CC:-cc}"
flags=(-std=c11 -O2 -Wall -Wextra -Werror -pthread $(pkg-config --cflags pagepipe))
test_c=crates/pagepipe-c/tests/c/test_pagepipe.c
"$cc" "${flags[@]}" "$test_c" $(pkg-config --libs pagepipe-static) -o "$out/test_pagepipe_static"
"$cc" "${flags[@]}" "$test_c" $(pkg-config --libs pagepipe) -o "$out/test_pagepipe_shared"
echo "-- static library"
"$out/test_pagepipe_static" "$@"
echo "-- shared library"
"$out/test_pagepipe_shared" "$@"
