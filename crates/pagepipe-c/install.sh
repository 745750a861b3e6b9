#!/usr/bin/env bash
# Installs the C library of pagepipe under PREFIX, as `make install` would:
#
#   PREFIX/include/pagepipe.h
#   PREFIX/lib/libpagepipe_c.a                  static, without debug info
#   PREFIX/lib/libpagepipe_c.so.0.1.0           shared (soname libpagepipe_c.so.0.1), and the
#   PREFIX/lib/libpagepipe_c.so.0.1, .so        links to it
#   PREFIX/lib/pkgconfig/pagepipe.pc            cc prog.c $(pkg-config --cflags --libs pagepipe)
#   PREFIX/lib/pkgconfig/pagepipe-static.pc     the same, linking the static library
#
# Usage: crates/pagepipe-c/install.sh PREFIX     (for example /usr/local or "$HOME/.local")
# Builds first, with the `release-c` profile (release code, no debug info), into
# $CARGO_TARGET_DIR (target by default). LIBDIR (default lib) names the library directory under
# PREFIX; DESTDIR stages the files under another root, for packagers (the .pc files still say
# PREFIX). Needs cargo; `strip` (binutils) where installed.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 PREFIX" >&2
  exit 2
fi
prefix=$1
case "$prefix" in
  /*) ;;
  *) prefix="$(pwd)/$prefix" ;;
esac
cd "$(dirname "$0")/../.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --profile release-c -p pagepipe-c
built="$target/release-c"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' crates/pagepipe-c/Cargo.toml | head -1)
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
if [ "$major" = 0 ]; then soversion="$major.$minor"; else soversion=$major; fi

libdir="$prefix/${LIBDIR:-lib}"
dest="${DESTDIR:-}"
install -d "$dest$prefix/include" "$dest$libdir/pkgconfig"
install -m 644 crates/pagepipe-c/include/pagepipe.h "$dest$prefix/include/pagepipe.h"

# The standard library's objects in the archive carry their debug info (the profile cannot drop
# it): strip it here (23 MB -> 14 MB; a program linked with it is about 1.8 MB).
if command -v strip >/dev/null 2>&1; then
  strip --strip-debug -o "$dest$libdir/libpagepipe_c.a" "$built/libpagepipe_c.a"
else
  echo "install.sh: no strip found; libpagepipe_c.a keeps the standard library's debug info" >&2
  cp "$built/libpagepipe_c.a" "$dest$libdir/libpagepipe_c.a"
fi
chmod 644 "$dest$libdir/libpagepipe_c.a"
install -m 755 "$built/libpagepipe_c.so" "$dest$libdir/libpagepipe_c.so.$version"
ln -sfn "libpagepipe_c.so.$version" "$dest$libdir/libpagepipe_c.so.$soversion"
ln -sfn "libpagepipe_c.so.$soversion" "$dest$libdir/libpagepipe_c.so"

# A library directory the loader does not search gets an rpath, so that a program linked as the
# README says starts without LD_LIBRARY_PATH.
rpath="-Wl,-rpath,\${libdir} "
multiarch=$(cc -print-multiarch 2>/dev/null || true)
for d in /lib /lib64 /usr/lib /usr/lib64 ${multiarch:+/lib/$multiarch /usr/lib/$multiarch}; do
  [ "$libdir" = "$d" ] && rpath=""
done
# What the static library needs from the system: `cargo rustc -p pagepipe-c --crate-type
# staticlib -- --print native-static-libs` prints "-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc".
native="-lgcc_s -lutil -lrt -lpthread -lm -ldl"
description="Linux pipe semantics over a userspace ring of page slots: pp_pipe, pp_write, pp_read"
url=$(sed -n 's/^repository = "\(.*\)"/\1/p' Cargo.toml | head -1)

pc() { # pc NAME LIBS [LIBS.PRIVATE]
  cat >"$dest$libdir/pkgconfig/$1.pc" <<EOF
prefix=$prefix
includedir=\${prefix}/include
libdir=$libdir

Name: $1
Description: $description
URL: $url
Version: $version
Cflags: -I\${includedir}
Libs: $2
${3:+Libs.private: $3}
EOF
}
pc pagepipe "-L\${libdir} ${rpath}-lpagepipe_c" "$native"
pc pagepipe-static "\${libdir}/libpagepipe_c.a $native"

echo "installed pagepipe $version under $prefix:"
ls -l "$dest$prefix/include/pagepipe.h" "$dest$libdir"/libpagepipe_c.* "$dest$libdir"/pkgconfig/pagepipe*.pc
